"""Click-study analyses: display-mode ablation, PC vs mobile, click-model comparison, map plots.

``python -m benchmark analyze <ablation|pc-mobile|models|plots> ...`` (see :func:`main`).

Each analysis works on :class:`TaskData` (one task's image, masks and real clicks as arrays), so it can
run on a synthetic study as well as on an RClicks CSV plus dataset folder (:func:`load_task_data`).

Deliberate differences from the reference scripts (protocol §6, §8):

* PC vs mobile builds the PC point set from (x, y) — the reference used (x, x) (§8 item 6), which made
  its published WD/PL1 meaningless; the KS column was unaffected.
* Tasks are keyed by the CSV's (dataset, image_stem, object_stem) columns; the model comparison
  accumulates every model's rows (the reference kept only the last model, §8 item 5).
* The bootstrap uses one generator per task seeded from (seed, task id): common random numbers across
  models and results independent of evaluation order.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from benchmark.clickability.click_model import ClickModel, load_click_model
from benchmark.distribution_metrics import (
    DEFAULT_BOOTSTRAP_SETS,
    DEFAULT_SEED,
    compare_point_sets,
    evaluate_click_map,
    object_box,
    sample_click_sets,
    task_generator,
)

if TYPE_CHECKING:
    from benchmark.datasets import Dataset

logger = logging.getLogger(__name__)

REFERENCE_MODE = "Text_Description"
DISPLAY_MODES = (
    "Text_Description",
    "Object_CutOut",
    "Shifted_CutOut",
    "Silhouette_Mask",
    "Highlighted_Instance",
)
MIN_CLICKS_PER_DEVICE = 10
METRIC_COLUMNS = ("ks", "pl1", "wd", "nss", "pde")


@dataclass
class TaskData:
    """One task as arrays.

    ``image``: (H, W, 3) uint8 RGB; ``gt_mask``/``error_mask``: bool (H, W); ``clicks_xy``: float (n, 2)
    (x, y) in loaded-image pixels; ``devices``: (n,) str ``pc``/``mobile``.
    """

    dataset: str
    full_stem: str
    click_type: str
    image: np.ndarray
    gt_mask: np.ndarray
    error_mask: np.ndarray
    clicks_xy: np.ndarray
    devices: np.ndarray

    @property
    def task_id(self) -> str:
        return f"{self.dataset}/{self.full_stem}"


def load_task_data(
    tasks, dataset, *, prev_masks_dir: Path | None, min_error_area_px: Callable[[str], int] | None = None
) -> Iterator[TaskData]:
    """Yield :class:`TaskData` for ``benchmark.rclicks.ClickTask`` objects of ``dataset`` (lazy, one at a time).

    ``min_error_area_px(full_stem)``: the rule each task's error region was built with (a Clicklab export's
    manifest: ``ExportManifest.min_error_area_px``), so the regions are the ones workers were shown; None: 0.
    """
    from benchmark.rclicks import error_mask

    samples = {sample.key: sample for sample in dataset.samples}
    image_cache: dict[Path, np.ndarray] = {}
    for task in tasks:
        sample = samples[task.key]
        if sample.image_path not in image_cache:
            image_cache.clear()  # tasks of one image are adjacent in CSV order; keep one image in memory
            image_cache[sample.image_path] = sample.load_image()
        gt_mask, _ = sample.load_masks()
        yield TaskData(
            dataset=task.key.dataset,
            full_stem=task.full_stem,
            click_type=task.click_type,
            image=image_cache[sample.image_path],
            gt_mask=gt_mask,
            error_mask=error_mask(
                task,
                sample,
                prev_masks_dir,
                min_error_area_px=min_error_area_px(task.full_stem) if min_error_area_px else 0,
            ),
            clicks_xy=task.clicks_xy,
            devices=task.devices,
        )


# --------------------------------------------------------------------------------------------------
# Display-mode ablation
# --------------------------------------------------------------------------------------------------


def display_mode_ablation(
    mode_tasks: Mapping[str, Sequence[TaskData]], *, reference_mode: str = REFERENCE_MODE
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Each mode against the reference mode on the same full_stems: PL1, WD, KS on the raw click sets.

    ``mode_tasks``: mode name → its tasks (all devices). Every full_stem of the reference mode must exist in
    every other mode (ValueError naming the mode and full_stem otherwise). The object box is the GT mask's.

    Returns (per-task rows: mode, full_stem, pl1, wd, ks_p_value, ks; per-mode means sorted by PL1).
    """
    if reference_mode not in mode_tasks:
        raise ValueError(
            f"no tasks for the reference display mode {reference_mode!r}; modes found: {sorted(mode_tasks)}"
        )
    reference = list(mode_tasks[reference_mode])
    rows = []
    for mode, tasks in mode_tasks.items():
        if mode == reference_mode:
            continue
        by_stem = {task.full_stem: task for task in tasks}
        for ref in reference:
            other = by_stem.get(ref.full_stem)
            if other is None:
                raise ValueError(
                    f"display mode {mode!r} has no clicks for full_stem {ref.full_stem!r} of {reference_mode!r}; "
                    "every mode must cover the same full_stems"
                )
            if other.gt_mask.shape != ref.gt_mask.shape:
                raise ValueError(
                    f"full_stem {ref.full_stem!r}: image sizes differ between {mode!r} and {reference_mode!r}"
                )
            comparison = compare_point_sets(other.clicks_xy, ref.clicks_xy, box=object_box(ref.gt_mask))
            rows.append({"mode": mode, "full_stem": ref.full_stem, **comparison.as_dict()})
    per_task = pd.DataFrame(rows, columns=["mode", "full_stem", "pl1", "wd", "ks_p_value", "ks"])
    summary = (
        per_task.groupby("mode", sort=False)[["pl1", "ks", "wd"]]
        .mean()
        .reset_index()
        .sort_values("pl1", kind="stable")
    )
    return per_task, summary.reset_index(drop=True)


# --------------------------------------------------------------------------------------------------
# PC vs mobile
# --------------------------------------------------------------------------------------------------


def pc_vs_mobile(
    tasks: Iterable[TaskData], *, min_clicks: int = MIN_CLICKS_PER_DEVICE
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per task with ≥ ``min_clicks`` clicks on *each* device: KS indicator, WD/diag, PL1 between PC and mobile.

    Tasks below the threshold get NaN and are skipped by the per-dataset means (as the reference).
    Returns (per-task rows, per-dataset means with the number of tasks used).
    """
    rows = []
    for task in tasks:
        pc = task.clicks_xy[task.devices == "pc"]
        mobile = task.clicks_xy[task.devices == "mobile"]
        row = {
            "dataset": task.dataset,
            "full_stem": task.full_stem,
            "click_type": task.click_type,
            "n_pc": len(pc),
            "n_mobile": len(mobile),
            "ks": np.nan,
            "wd": np.nan,
            "pl1": np.nan,
        }
        if len(pc) >= min_clicks and len(mobile) >= min_clicks:
            comparison = compare_point_sets(pc, mobile, box=object_box(task.gt_mask))
            row.update(ks=float(comparison.ks_same), wd=comparison.wd, pl1=comparison.pl1)
        rows.append(row)
    per_task = pd.DataFrame(
        rows, columns=["dataset", "full_stem", "click_type", "n_pc", "n_mobile", "ks", "wd", "pl1"]
    )
    grouped = per_task.groupby("dataset", sort=False)
    summary = grouped[["ks", "wd", "pl1"]].mean()
    summary["tasks_used"] = grouped["ks"].count()
    return per_task, summary.reset_index()


# --------------------------------------------------------------------------------------------------
# Click-model comparison (Tables 3 and 6)
# --------------------------------------------------------------------------------------------------


def compare_click_models(
    tasks: Iterable[TaskData],
    models: dict[str, ClickModel],
    *,
    n_sets: int = DEFAULT_BOOTSTRAP_SETS,
    seed: int = DEFAULT_SEED,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """KS, PL1, WD, NSS, PDE of every model on every task (bootstrap of ``n_sets`` sets).

    A model whose map has no mass on a task gets NaN for it (logged). Returns (per-task rows: dataset,
    full_stem, click_type, model, metrics; per (dataset, model) means in the models' order).
    """
    rows = []
    for task in tasks:
        if len(task.clicks_xy) == 0 or not task.gt_mask.any():
            logger.warning("task %s has no clicks or an empty GT mask; skipped", task.task_id)
            continue
        for name, model in models.items():
            prob_map = model.predict_map(task.image, task.gt_mask, task.error_mask)
            row: dict[str, str | float] = {
                "dataset": task.dataset,
                "full_stem": task.full_stem,
                "click_type": task.click_type,
                "model": name,
            }
            if not np.isfinite(prob_map).all() or prob_map.sum() <= 0:
                logger.warning(
                    "model %s gives an empty map on task %s; metrics set to NaN", name, task.task_id
                )
                row.update({metric: np.nan for metric in METRIC_COLUMNS})
            else:
                rng = task_generator(seed=seed, task_id=task.task_id)
                metrics = evaluate_click_map(
                    prob_map, task.clicks_xy, gt_mask=task.gt_mask, rng=rng, n_sets=n_sets
                )
                row.update(metrics.as_dict())
            rows.append(row)
    columns = ["dataset", "full_stem", "click_type", "model", *METRIC_COLUMNS]
    per_task = pd.DataFrame(rows, columns=columns)
    summary = per_task.groupby(["dataset", "model"], sort=False)[list(METRIC_COLUMNS)].mean().reset_index()
    return per_task, summary


def format_model_table(summary: pd.DataFrame) -> str:
    """Text table like the paper's Tables 3/6: dataset, model, KS↑ PL1↓ WD↓ NSS↑ PDE↑."""
    lines = [f"{'dataset':<12} {'model':<10} {'KS↑':>6} {'PL1↓':>6} {'WD↓':>6} {'NSS↑':>6} {'PDE↑':>9}"]
    for row in summary.itertuples(index=False):
        lines.append(
            f"{row.dataset:<12} {row.model:<10} {row.ks:6.2f} {row.pl1:6.3f} {row.wd:6.3f} {row.nss:6.2f} {row.pde:9.2E}"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# Plots
# --------------------------------------------------------------------------------------------------


def plot_task_maps(
    task: TaskData, models: dict[str, ClickModel], out_path: Path, *, seed: int = DEFAULT_SEED
) -> Path:
    """One PNG: the image with real clicks and the error region, then per model its map with as many sampled
    clicks as there are real ones."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmark.plots import figure_save

    panels = 1 + len(models)
    figure, axes = plt.subplots(1, panels, figsize=(3.2 * panels, 3.4), squeeze=False)
    ax = axes[0, 0]
    ax.imshow(task.image)
    ax.contour(task.error_mask.astype(float), levels=[0.5], colors="cyan", linewidths=0.8)
    ax.scatter(task.clicks_xy[:, 0], task.clicks_xy[:, 1], s=6, c="lime", edgecolors="black", linewidths=0.3)
    ax.set_title(f"{task.full_stem} ({task.click_type}), n={len(task.clicks_xy)}", fontsize=7)
    rng = task_generator(seed=seed, task_id=task.task_id)
    for index, (name, model) in enumerate(models.items(), start=1):
        ax = axes[0, index]
        prob_map = model.predict_map(task.image, task.gt_mask, task.error_mask)
        ax.imshow(task.image, alpha=0.5)
        ax.imshow(prob_map, cmap="magma", alpha=0.6)
        if prob_map.sum() > 0 and len(task.clicks_xy):
            sampled = sample_click_sets(prob_map, n_clicks=len(task.clicks_xy), n_sets=1, rng=rng)[0]
            ax.scatter(sampled[:, 0], sampled[:, 1], s=6, c="yellow", edgecolors="black", linewidths=0.3)
        ax.set_title(name, fontsize=8)
    for ax in axes[0]:
        ax.set_axis_off()
    return figure_save(figure, out_path)


# --------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------


def _open(args, name: str | None = None) -> Dataset:
    from benchmark.datasets import open_dataset

    layout = args.layout
    if layout is None:
        if (Path(args.dataset) / "data_GT").is_dir():
            layout = "grabcut"
        else:
            raise SystemExit(
                f"{args.dataset}: pass --layout (grabcut, berkeley, davis, coco_mval, tetris, folder)"
            )
    return open_dataset(args.dataset, layout, name=name or args.name)


def _stems_filter(tasks, split_file: Path | None):
    if split_file is None:
        return tasks
    from benchmark.clickability.train import read_split_file

    stems = set(read_split_file(split_file))
    return [task for task in tasks if task.key.image_stem in stems]


def _models_from_arg(text: str, *, cm_raw: bool) -> dict[str, ClickModel]:
    models: dict[str, ClickModel] = {}
    for item in [part.strip() for part in text.split(",") if part.strip()]:
        model = load_click_model(item)
        if cm_raw and hasattr(model, "restrict_to_error"):
            model.restrict_to_error = False
        path = Path(item)
        name = (f"cm:{path.parent.name}" if path.parent.name else "cm") if path.is_file() else model.name
        models[name] = model
    return models


def _write(frame: pd.DataFrame, out_dir: Path, name: str) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / name
    frame.to_csv(path, index=False)
    return path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmark analyze", description="Click-study analyses.")
    sub = parser.add_subparsers(dest="analysis", required=True)

    def dataset_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--dataset", type=Path, required=True, help="dataset folder")
        p.add_argument("--layout", default=None, help="dataset layout (default: grabcut if data_GT/ exists)")
        p.add_argument("--name", default=None, help="dataset name as in the CSV 'dataset' column")
        p.add_argument("--out", type=Path, default=Path("var/analyses"), help="output folder")

    ablation = sub.add_parser("ablation", help="display modes vs Text_Description (previews.csv)")
    ablation.add_argument(
        "--previews", type=Path, required=True, help="previews.csv (mode names in 'dataset')"
    )
    ablation.add_argument("--reference-mode", default=REFERENCE_MODE)
    dataset_args(ablation)

    for name, helptext in (
        ("pc-mobile", "PC vs mobile clicks"),
        ("models", "click-model comparison table"),
        ("plots", "maps with clicks per task"),
    ):
        p = sub.add_parser(name, help=helptext)
        source = p.add_mutually_exclusive_group(required=True)
        source.add_argument("--clicks", type=Path, help="RClicks clicks CSV")
        source.add_argument(
            "--export",
            type=Path,
            help="a Clicklab RClicks export (folder or rclicks.zip): its clicks, previous masks, dataset name and "
            "the rule of its error regions, so they are the ones workers were shown",
        )
        p.add_argument(
            "--prev-masks", type=Path, default=None, help="folder of <full_stem>.png (fn/fp tasks)"
        )
        p.add_argument(
            "--split", type=Path, default=None, help="only these image stems (e.g. TETRIS_val.txt)"
        )
        dataset_args(p)
        if name == "pc-mobile":
            p.add_argument("--min-clicks", type=int, default=MIN_CLICKS_PER_DEVICE)
        else:
            p.add_argument("--models", default="ud,dt,sm,si", help="comma list of names and/or checkpoints")
            p.add_argument("--seed", type=int, default=DEFAULT_SEED)
            p.add_argument("--cm-raw", action="store_true", help="score the CM map without multiplying by E")
        if name == "models":
            p.add_argument(
                "--n-sets", type=int, default=DEFAULT_BOOTSTRAP_SETS, help="bootstrap sets per task"
            )
        if name == "plots":
            p.add_argument("--max-tasks", type=int, default=20)
    return parser


def _tasks_for(args, dataset):
    from benchmark.rclicks import group_tasks, read_clicks_csv

    frame = read_clicks_csv(args.clicks)
    if args.prev_masks is None:
        skipped = int((frame["click_type"] != "first").sum())
        if skipped:
            logger.warning("%d fn/fp rows skipped: pass --prev-masks to include later-round tasks", skipped)
        frame = frame[frame["click_type"] == "first"]
    tasks = _stems_filter(group_tasks(frame, dataset, prev_masks_dir=args.prev_masks), args.split)
    if not tasks:
        raise SystemExit(f"no task of {args.clicks} matches dataset {dataset.name!r} at {args.dataset}")
    return tasks


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    dataset = _open(args)
    if args.analysis == "ablation":
        from benchmark.rclicks import group_tasks, read_clicks_csv

        frame = read_clicks_csv(args.previews)
        mode_tasks = {}
        for mode in pd.unique(frame["dataset"]):
            renamed = frame[frame["dataset"] == mode].assign(dataset=dataset.name)
            mode_tasks[str(mode)] = list(
                load_task_data(group_tasks(renamed, dataset), dataset, prev_masks_dir=None)
            )
        per_task, summary = display_mode_ablation(mode_tasks, reference_mode=args.reference_mode)
        _write(per_task, args.out, "display_modes_per_task.csv")
        print(summary.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        _write(summary, args.out, "display_modes.csv")
        return 0
    with contextlib.ExitStack() as stack:
        rule = None
        if args.export is not None:
            from benchmark.rclicks import open_export

            export = stack.enter_context(open_export(args.export))
            if args.name is None and len(export.datasets) == 1:
                dataset = _open(args, name=export.datasets[0].name)
            args.clicks, args.prev_masks = export.clicks_csv, export.prev_masks_dir(dataset.name)
            rule = export.min_error_area_px
        tasks = _tasks_for(args, dataset)
        data = load_task_data(tasks, dataset, prev_masks_dir=args.prev_masks, min_error_area_px=rule)
        return _run_click_analysis(args, dataset, data)


def _run_click_analysis(args, dataset: Dataset, data: Iterator[TaskData]) -> int:
    if args.analysis == "pc-mobile":
        per_task, summary = pc_vs_mobile(data, min_clicks=args.min_clicks)
        _write(per_task, args.out, f"pc_vs_mobile_{dataset.name}_per_task.csv")
        _write(summary, args.out, f"pc_vs_mobile_{dataset.name}.csv")
        print(summary.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        return 0
    models = _models_from_arg(args.models, cm_raw=args.cm_raw)
    if args.analysis == "models":
        per_task, summary = compare_click_models(data, models, n_sets=args.n_sets, seed=args.seed)
        _write(per_task, args.out, f"click_models_{dataset.name}_per_task.csv")
        _write(summary, args.out, f"click_models_{dataset.name}.csv")
        print(format_model_table(summary))
        return 0
    for index, task in enumerate(data):
        if index >= args.max_tasks:
            break
        path = plot_task_maps(
            task, models, args.out / "plots" / f"{dataset.name}__{task.full_stem}.png", seed=args.seed
        )
        print(path)
    return 0
