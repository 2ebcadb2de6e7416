"""Training of the clickability model: ``python -m benchmark train-clickability --clicks CSV --dataset PATH``.

Data: one example per task (``full_stem``) of the clicks CSV, all devices pooled, click types
``first``/``fn``/``fp`` (fn/fp need ``--prev-masks``). Target: the GT clickability map of
:mod:`benchmark.clickability.maps` (σ, error blur), letterboxed like the inputs.

Loss: KLD between the sum-normalised target t and prediction p (ε = 1e-9),
Σ t·log(ε + t/(ε + p)) per image, averaged over the batch. Adam (default lr 0.01) on all parameters;
per-iteration schedule: linear warm-up from 0 over the first ``warmup_fraction`` of the steps, then a cosine
that reaches 0 at the last step (the reference's timm scheduler stops at ~2.4 % of the peak because its
warm-up is a prefix of the cosine period; ours spans the remaining steps). Horizontal flips with p = 0.5.
After every epoch: ``epoch_<k>.pt``; ``best.pt`` is the epoch with the highest mean validation SIM.

Split: by image stem, from ``--train-split``/``--val-split`` files (one stem per line; a missing final
newline is fine, protocol §8 item 12) or a seeded random ``--val-fraction`` of the image stems.

Memory: examples are prepared once and kept in RAM — about 1.5 MB per task plus 1 MB per image at 416 px.
"""

from __future__ import annotations

import argparse
import csv
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from benchmark.clickability.maps import DEFAULT_SIGMA, ClickabilityMapCache, ErrorBlur, clickability_map
from benchmark.clickability.model import (
    CONFIGS,
    DEFAULT_INPUT_SIZE,
    ClickabilityNet,
    Letterbox,
    get_config,
    letterbox,
    prepare_inputs,
    save_checkpoint,
)

logger = logging.getLogger(__name__)

KLD_EPS = 1e-9


# --------------------------------------------------------------------------------------------------
# Examples
# --------------------------------------------------------------------------------------------------


@dataclass
class Example:
    """One training/validation task, letterboxed to ``size``.

    ``image``: float32 (3, S, S) ImageNet-normalised (shared between tasks of one image);
    ``masks``: float32 (2, S, S) [GT, E] in [0, 1]; ``target``: float32 (1, S, S) GT clickability map;
    ``box``: where the image sits in the canvas; ``task_id``: e.g. ``"GrabCut/banana1"``.
    """

    image: np.ndarray
    masks: np.ndarray
    target: np.ndarray
    box: Letterbox
    task_id: str


def make_example(
    *,
    image: np.ndarray,
    gt_mask: np.ndarray,
    error_mask: np.ndarray,
    target_map: np.ndarray,
    size: int,
    task_id: str,
) -> Example:
    """Letterbox one task. ``image`` (H, W, 3) uint8 RGB; masks bool (H, W); ``target_map`` float (H, W)."""
    image_in, masks_in, box = prepare_inputs(image, gt_mask, error_mask, size=size)
    target = letterbox(np.asarray(target_map, dtype=np.float32), box)[None]
    return Example(image=image_in, masks=masks_in.astype(np.float32), target=target, box=box, task_id=task_id)


class ExampleSet(Dataset):
    def __init__(self, examples: Sequence[Example]) -> None:
        self.examples = list(examples)

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int):
        ex = self.examples[index]
        return torch.from_numpy(ex.image), torch.from_numpy(ex.masks), torch.from_numpy(ex.target), index


# --------------------------------------------------------------------------------------------------
# Loss, metrics, schedule
# --------------------------------------------------------------------------------------------------


def kld_loss(pred: torch.Tensor, target: torch.Tensor, eps: float = KLD_EPS) -> torch.Tensor:
    """Mean over the batch of Σ t·log(ε + t/(ε + p)) with p, t sum-normalised per sample; (B, 1, H, W) inputs."""
    p = pred.flatten(1)
    t = target.flatten(1)
    p = p / (p.sum(dim=1, keepdim=True) + eps)
    t = t / (t.sum(dim=1, keepdim=True) + eps)
    return (t * torch.log(eps + t / (eps + p))).sum(dim=1).mean()


def similarity(pred: np.ndarray, target: np.ndarray, eps: float = KLD_EPS) -> float:
    """SIM (histogram intersection) of the min-max normalised prediction and the target, both sum-normalised."""
    p = pred.astype(np.float64)
    p = (p - p.min()) / (p.max() - p.min() + eps)
    p = p / (p.sum() + eps)
    t = target.astype(np.float64)
    t = t / (t.sum() + eps)
    return float(np.minimum(p, t).sum())


def correlation(pred: np.ndarray, target: np.ndarray) -> float:
    """Pearson CC between two maps (NaN when one is constant)."""
    a = pred.astype(np.float64).ravel() - pred.mean()
    b = target.astype(np.float64).ravel() - target.mean()
    denom = math.sqrt(float((a * a).sum() * (b * b).sum()))
    return float((a * b).sum() / denom) if denom > 0 else float("nan")


def lr_factor(step: int, *, total_steps: int, warmup_steps: int) -> float:
    """Multiplier of the peak lr at iteration ``step`` (0-based): linear warm-up from 0, then cosine to 0."""
    if step < warmup_steps:
        return step / warmup_steps
    span = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / span)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


# --------------------------------------------------------------------------------------------------
# Training loop
# --------------------------------------------------------------------------------------------------


@dataclass
class EpochRecord:
    epoch: int
    train_loss: float
    val_kld: float
    val_sim: float
    val_cc: float
    lr_end: float
    seconds: float


@dataclass
class TrainingResult:
    history: list[EpochRecord] = field(default_factory=list)
    best_epoch: int = 0
    best_path: Path | None = None
    iteration_losses: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class TrainSettings:
    """Hyper-parameters with the protocol's defaults (batch 16 there; 8 here for CPU memory)."""

    config: str = "small"
    input_size: int = DEFAULT_INPUT_SIZE
    epochs: int = 20
    batch_size: int = 8
    lr: float = 0.01
    warmup_fraction: float = 0.1
    flip_probability: float = 0.5
    seed: int = 42
    device: str = "cpu"


def evaluate(
    net: ClickabilityNet, examples: Sequence[Example], *, device: str = "cpu"
) -> tuple[float, float, float]:
    """(mean KLD, mean SIM, mean CC) over ``examples``, measured on each letterbox's valid area."""
    if not examples:
        return float("nan"), float("nan"), float("nan")
    net.eval()
    klds, sims, ccs = [], [], []
    with torch.inference_mode():
        for ex in examples:
            pred = net(
                torch.from_numpy(ex.image)[None].to(device), torch.from_numpy(ex.masks)[None].to(device)
            )
            box = ex.box
            rows = slice(box.top, box.top + box.new_h)
            cols = slice(box.left, box.left + box.new_w)
            p = pred[0, 0, rows, cols].cpu().numpy()
            t = ex.target[0, rows, cols]
            klds.append(float(kld_loss(torch.from_numpy(p)[None, None], torch.from_numpy(t)[None, None])))
            sims.append(similarity(p, t))
            ccs.append(correlation(p, t))
    return (
        float(np.mean(klds)),
        float(np.mean(sims)),
        float(np.nanmean(ccs)) if np.isfinite(ccs).any() else float("nan"),
    )


# C901: the training loop (epochs, steps, flips, validation, checkpoints); its step order is the recipe.
def train_click_model(  # noqa: C901
    train_examples: Sequence[Example],
    val_examples: Sequence[Example],
    *,
    settings: TrainSettings,
    out_dir: Path | None,
    max_iterations: int | None = None,
    extra_checkpoint_info: dict | None = None,
) -> TrainingResult:
    """Train a fresh network; write ``epoch_<k>.pt``, ``best.pt`` and ``history.csv`` in ``out_dir`` (if given).

    ``max_iterations`` stops early (tests). Without validation examples ``best.pt`` follows the lowest
    training loss instead of the highest validation SIM.
    """
    if not train_examples:
        raise ValueError("train_click_model: no training examples; check the clicks CSV, dataset and split")
    sizes = {ex.image.shape[-1] for ex in list(train_examples) + list(val_examples)}
    if sizes != {settings.input_size}:
        raise ValueError(
            f"examples were letterboxed to {sorted(sizes)} px but settings.input_size is {settings.input_size}"
        )
    torch.manual_seed(settings.seed)
    generator = torch.Generator().manual_seed(settings.seed)
    net = ClickabilityNet(get_config(settings.config)).to(settings.device)
    loader = DataLoader(
        ExampleSet(train_examples), batch_size=settings.batch_size, shuffle=True, generator=generator
    )
    total_steps = settings.epochs * len(loader)
    if max_iterations is not None:
        total_steps = min(total_steps, max_iterations)
    warmup_steps = int(settings.warmup_fraction * total_steps)
    optimizer = torch.optim.Adam(net.parameters(), lr=settings.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, total_steps=total_steps, warmup_steps=warmup_steps)
    )
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    result = TrainingResult()
    best_score = -math.inf
    step = 0
    info = {"settings": settings.__dict__, **(extra_checkpoint_info or {})}
    for epoch in range(1, settings.epochs + 1):
        net.train()
        started = time.perf_counter()
        losses = []
        for image, masks, target, _ in loader:
            if step >= total_steps:
                break
            flip = torch.rand(image.shape[0], generator=generator) < settings.flip_probability
            if flip.any():
                image[flip] = image[flip].flip(-1)
                masks[flip] = masks[flip].flip(-1)
                target[flip] = target[flip].flip(-1)
            device = settings.device
            pred = net(image.to(device), masks.to(device))
            loss = kld_loss(pred, target.to(device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            losses.append(loss.item())
            result.iteration_losses.append(losses[-1])
        val_kld, val_sim, val_cc = evaluate(net, val_examples, device=settings.device)
        record = EpochRecord(
            epoch=epoch,
            train_loss=float(np.mean(losses)) if losses else float("nan"),
            val_kld=val_kld,
            val_sim=val_sim,
            val_cc=val_cc,
            lr_end=float(optimizer.param_groups[0]["lr"]),
            seconds=time.perf_counter() - started,
        )
        result.history.append(record)
        logger.info(
            "epoch %d: train KLD %.4f, val KLD %.4f, val SIM %.4f, val CC %.4f (%.0f s)",
            epoch,
            record.train_loss,
            val_kld,
            val_sim,
            val_cc,
            record.seconds,
        )
        score = val_sim if val_examples else -record.train_loss
        if out_dir is not None:
            save_checkpoint(
                out_dir / f"epoch_{epoch}.pt",
                net=net,
                input_size=settings.input_size,
                extra={"epoch": epoch, **info},
            )
            _write_history(out_dir / "history.csv", result.history)
        if score > best_score:
            best_score = score
            result.best_epoch = epoch
            if out_dir is not None:
                result.best_path = out_dir / "best.pt"
                save_checkpoint(
                    result.best_path, net=net, input_size=settings.input_size, extra={"epoch": epoch, **info}
                )
        if step >= total_steps:
            break
    return result


def _write_history(path: Path, history: list[EpochRecord]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["epoch", "train_kld", "val_kld", "val_sim", "val_cc", "lr_end", "seconds"])
        for r in history:
            writer.writerow(
                [r.epoch, r.train_loss, r.val_kld, r.val_sim, r.val_cc, r.lr_end, round(r.seconds, 1)]
            )


# --------------------------------------------------------------------------------------------------
# Split
# --------------------------------------------------------------------------------------------------


def read_split_file(path: str | Path) -> list[str]:
    """Image stems, one per line. Line endings (\\n, \\r\\n) are removed, the last line may lack one;
    blank lines are skipped; other whitespace is part of the stem."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"split file {path} does not exist; pass a text file with one image stem per line")
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def split_stems(stems: Sequence[str], *, val_fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """Seeded split of image stems into (train, val); at least one of each when there are ≥ 2 stems."""
    unique = sorted(set(stems))
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"--val-fraction {val_fraction} must be in [0, 1)")
    order = np.random.default_rng(seed).permutation(len(unique))
    n_val = int(round(val_fraction * len(unique)))
    if val_fraction > 0 and len(unique) >= 2:
        n_val = min(max(1, n_val), len(unique) - 1)
    val = sorted(unique[i] for i in order[:n_val])
    train = sorted(unique[i] for i in order[n_val:])
    return train, val


# --------------------------------------------------------------------------------------------------
# Building examples from an RClicks clicks CSV and a dataset folder
# --------------------------------------------------------------------------------------------------


def build_examples_from_csv(
    *,
    clicks_csv: Path,
    dataset_root: Path,
    layout: str,
    dataset_name: str | None,
    prev_masks_dir: Path | None,
    input_size: int,
    sigma: float = DEFAULT_SIGMA,
    error_blur: ErrorBlur | str = "reference",
    cache_dir: Path | None = None,
    click_types: Sequence[str] = ("first", "fn", "fp"),
    device_filter: str | None = None,
    max_tasks: int | None = None,
) -> dict[str, list[Example]]:
    """Examples grouped by image stem: ``{image_stem: [Example, ...]}``."""
    from benchmark.datasets import open_dataset
    from benchmark.rclicks import error_mask, group_tasks, read_clicks_csv

    frame = read_clicks_csv(clicks_csv, device=device_filter)
    dataset = open_dataset(dataset_root, layout, name=dataset_name)
    frame = frame[frame["click_type"].isin(list(click_types))]
    if prev_masks_dir is None:
        skipped = int((frame["click_type"] != "first").sum())
        if skipped:
            logger.warning(
                "%d fn/fp click rows skipped: pass --prev-masks (the folder of <full_stem>.png previous masks) "
                "to train on later-round tasks too",
                skipped,
            )
        frame = frame[frame["click_type"] == "first"]
    tasks = group_tasks(frame, dataset, prev_masks_dir=prev_masks_dir)
    if max_tasks is not None:
        tasks = tasks[:max_tasks]
    if not tasks:
        raise ValueError(
            f"no click task of {clicks_csv} matches dataset {dataset.name!r} at {dataset_root}: check that the CSV's "
            "'dataset' column equals the dataset name (--name) and the image stems exist"
        )
    samples = {sample.key: sample for sample in dataset.samples}
    cache = ClickabilityMapCache(cache_dir, sigma=sigma, error_blur=error_blur) if cache_dir else None
    images: dict[Path, np.ndarray] = {}
    by_stem: dict[str, list[Example]] = {}
    for task in tasks:
        sample = samples[task.key]
        if sample.image_path not in images:
            images[sample.image_path] = sample.load_image()
        image = images[sample.image_path]
        gt_mask, _ = sample.load_masks()
        region = error_mask(task, sample, prev_masks_dir)
        if not region.any():
            logger.warning("task %r has an empty error region; skipped", task.full_stem)
            continue
        if cache is not None:
            target = cache.get_or_build(
                dataset=dataset.name, full_stem=task.full_stem, clicks_xy=task.clicks_xy, error_mask=region
            )
        else:
            target = clickability_map(task.clicks_xy, error_mask=region, sigma=sigma, error_blur=error_blur)
        example = make_example(
            image=image,
            gt_mask=gt_mask,
            error_mask=region,
            target_map=target,
            size=input_size,
            task_id=f"{dataset.name}/{task.full_stem}",
        )
        shared = by_stem.get(task.key.image_stem)
        if shared:  # one normalised image array per image
            example.image = shared[0].image
        by_stem.setdefault(task.key.image_stem, []).append(example)
    return by_stem


def _detect_layout(root: Path) -> str:
    if (root / "data_GT").is_dir():
        return "grabcut"
    raise ValueError(
        f"{root}: cannot tell the dataset layout; pass --layout (grabcut, berkeley, davis, coco_mval, tetris, folder)"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmark train-clickability",
        description="Train the clickability model on real clicks (RClicks protocol §3.2).",
    )
    parser.add_argument("--clicks", type=Path, required=True, help="RClicks clicks CSV")
    parser.add_argument("--dataset", type=Path, required=True, help="dataset folder")
    parser.add_argument("--layout", default=None, help="dataset layout (default: grabcut if data_GT/ exists)")
    parser.add_argument("--name", default=None, help="dataset name as in the CSV 'dataset' column")
    parser.add_argument(
        "--prev-masks", type=Path, default=None, help="folder of <full_stem>.png previous masks"
    )
    parser.add_argument("--out", type=Path, default=Path("var/clickability/run"), help="checkpoint folder")
    parser.add_argument(
        "--config", choices=sorted(CONFIGS), default="small", help="architecture (segnext-b: GPU)"
    )
    parser.add_argument("--input-size", type=int, default=DEFAULT_INPUT_SIZE, help="letterbox side in px")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--warmup-fraction", type=float, default=0.1)
    parser.add_argument("--sigma", type=float, default=DEFAULT_SIGMA, help="click σ for a 1080p frame")
    parser.add_argument(
        "--error-blur", default="reference", help="'reference', 'paper' or a diagonal fraction"
    )
    parser.add_argument("--cache-dir", type=Path, default=None, help="cache of GT maps (<full_stem>.npy)")
    parser.add_argument("--train-split", type=Path, default=None, help="file of training image stems")
    parser.add_argument("--val-split", type=Path, default=None, help="file of validation image stems")
    parser.add_argument("--val-fraction", type=float, default=0.2, help="seeded split when no split files")
    parser.add_argument("--click-types", default="first,fn,fp")
    parser.add_argument(
        "--device-filter", choices=("pc", "mobile"), default=None, help="use one device's clicks"
    )
    parser.add_argument("--max-tasks", type=int, default=None, help="use only the first N tasks (smoke runs)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--device", default="cpu", help="torch device (cpu, cuda)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.threads:
        torch.set_num_threads(args.threads)
    layout = args.layout or _detect_layout(args.dataset)
    by_stem = build_examples_from_csv(
        clicks_csv=args.clicks,
        dataset_root=args.dataset,
        layout=layout,
        dataset_name=args.name,
        prev_masks_dir=args.prev_masks,
        input_size=args.input_size,
        sigma=args.sigma,
        error_blur=args.error_blur,
        cache_dir=args.cache_dir,
        click_types=[t.strip() for t in args.click_types.split(",") if t.strip()],
        device_filter=args.device_filter,
        max_tasks=args.max_tasks,
    )
    if args.train_split or args.val_split:
        if not (args.train_split and args.val_split):
            raise SystemExit(
                "pass both --train-split and --val-split, or neither (then --val-fraction splits)"
            )
        train_stems, val_stems = read_split_file(args.train_split), read_split_file(args.val_split)
        overlap = set(train_stems) & set(val_stems)
        if overlap:
            raise SystemExit(
                f"{args.train_split} and {args.val_split} share image stems, e.g. {sorted(overlap)[:3]}"
            )
    else:
        train_stems, val_stems = split_stems(list(by_stem), val_fraction=args.val_fraction, seed=args.seed)
    train = [ex for stem in train_stems for ex in by_stem.get(stem, [])]
    val = [ex for stem in val_stems for ex in by_stem.get(stem, [])]
    logger.info("%d training and %d validation tasks (%d images)", len(train), len(val), len(by_stem))
    settings = TrainSettings(
        config=args.config,
        input_size=args.input_size,
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        warmup_fraction=args.warmup_fraction,
        seed=args.seed,
        device=args.device,
    )
    info = {
        "sigma": args.sigma,
        "error_blur": ErrorBlur.parse(args.error_blur).tag,
        "clicks_csv": str(args.clicks),
    }
    result = train_click_model(train, val, settings=settings, out_dir=args.out, extra_checkpoint_info=info)
    best = result.history[result.best_epoch - 1]
    print(
        f"best epoch {result.best_epoch}: val SIM {best.val_sim:.4f}, val KLD {best.val_kld:.4f} -> {result.best_path}"
    )
    return 0
