"""Bench: what encoding once per image saves, and how fast the embedded default is.

Part 1 -- a tiny random-initialised SAM (no weights can be downloaded here) on a few GrabCut images:
time per instance for 20 baseline clicks with the embedding computed once and reused, against
re-encoding the image on every click as the RClicks reference does (protocol §7), same run, same clicks.

Part 2 -- masks per second of the embedded default over 20 baseline clicks per instance, against one
plain full-resolution ``cv2.grabCut`` run per click (5 iterations, click disks as hard labels, the
rest "probably background" with a "probably foreground" box around the positive clicks), same run.

Usage: .venv/bin/python bench/bench_segmenters_embedding_reuse.py [--images N]
Reads ../shared/datasets/GrabCut (or $CLICKLAB_SHARED_DATASETS/GrabCut) relative to the repository.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import cv2  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmark.clickers import baseline_click  # noqa: E402
from benchmark.datasets import open_dataset  # noqa: E402
from segmenters.base import Click  # noqa: E402
from segmenters.registry import get_predictor  # noqa: E402
from segmenters.sam import SamArchitecture, build_sam_model  # noqa: E402

CLICKS = 20
#: Small enough to run on a laptop CPU, with the real input side so preprocessing and the
#: encoder/decoder proportions keep their shape (patch 16 -> 64x64 grid, 256x256 low-res logits).
BENCH_SAM = SamArchitecture(
    encoder_embed_dim=96,
    encoder_depth=4,
    encoder_num_heads=4,
    encoder_global_attn_indexes=(1, 3),
    encoder_window_size=14,
    image_size=1024,
    prompt_embed_dim=64,
    decoder_mlp_dim=256,
    decoder_num_heads=4,
    iou_head_hidden_dim=64,
)


def grabcut_root() -> Path:
    shared = Path(os.environ.get("CLICKLAB_SHARED_DATASETS", REPO.parent / "shared" / "datasets"))
    root = shared / "GrabCut"
    if not (root / "data_GT").is_dir() or not (root / "boundary_GT").is_dir():
        sys.exit(
            f"GrabCut not found at {root}: put the project beside shared/ (../shared/datasets/GrabCut) "
            "or set CLICKLAB_SHARED_DATASETS to the folder holding GrabCut/."
        )
    return root


def trajectory(predict_step, gt: np.ndarray, ignore: np.ndarray) -> float:
    """Run CLICKS baseline clicks; ``predict_step(clicks, logits) -> (mask, logits)``; returns seconds."""
    pred = np.zeros_like(gt)
    not_clicked = np.ones(gt.shape, np.float32)
    clicks: list[Click] = []
    logits = None
    start = time.perf_counter()
    for _ in range(CLICKS):
        click = baseline_click(gt=gt, ignore=ignore, pred=pred, not_clicked=not_clicked)
        not_clicked[int(click.y), int(click.x)] = 0
        clicks.append(click)
        pred, logits = predict_step(clicks, logits)
    return time.perf_counter() - start


def bench_sam(samples, workdir: Path) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    checkpoint = workdir / "bench_sam.pth"
    torch.save(build_sam_model(BENCH_SAM).state_dict(), checkpoint)
    sam = get_predictor("sam", checkpoint=checkpoint, architecture=BENCH_SAM, device="cpu")

    reuse_s, reencode_s = [], []
    for image, gt, ignore in samples:
        start = time.perf_counter()
        embedding = sam.encode(image)
        encode_once = time.perf_counter() - start

        def reuse_step(clicks, logits, embedding=embedding):
            prediction = sam.predict(embedding, clicks, logits)
            return sam.predict_mask(prediction), prediction.logits

        reuse_s.append(encode_once + trajectory(reuse_step, gt, ignore))

        def reencode_step(clicks, logits, image=image):
            prediction = sam.predict(sam.encode(image), clicks, logits)
            return sam.predict_mask(prediction), prediction.logits

        reencode_s.append(trajectory(reencode_step, gt, ignore))
    reuse, reencode = float(np.mean(reuse_s)), float(np.mean(reencode_s))
    print(
        f"tiny random-init SAM ({BENCH_SAM.image_size}px input, embed {BENCH_SAM.encoder_embed_dim}, "
        f"depth {BENCH_SAM.encoder_depth}), {len(samples)} GrabCut instances x {CLICKS} clicks, CPU:"
    )
    print(f"  encode once + reuse      : {reuse:8.3f} s/instance")
    print(f"  re-encode every click    : {reencode:8.3f} s/instance   (RClicks reference behaviour)")
    print(f"  speed-up (re-encode / reuse): {reencode / reuse:6.2f}x")


def plain_grabcut_mask(image_bgr: np.ndarray, clicks: list[Click]) -> np.ndarray:
    """Baseline: one plain full-resolution cv2.grabCut run (5 iterations) per click."""
    height, width = image_bgr.shape[:2]
    trimap = np.full((height, width), cv2.GC_PR_BGD, np.uint8)
    positives = np.array([[c.x, c.y] for c in clicks if c.is_positive])
    if len(positives):
        margin = 0.25 * max(height, width)
        x0, y0 = np.maximum(positives.min(axis=0) - margin, 0).astype(int)
        x1, y1 = np.minimum(positives.max(axis=0) + margin, [width - 1, height - 1]).astype(int)
        trimap[y0 : y1 + 1, x0 : x1 + 1] = cv2.GC_PR_FGD
    for click in clicks:
        label = cv2.GC_FGD if click.is_positive else cv2.GC_BGD
        cv2.circle(trimap, (int(click.x), int(click.y)), 5, int(label), -1)
    if not ((trimap == cv2.GC_FGD) | (trimap == cv2.GC_PR_FGD)).any():
        return np.zeros((height, width), bool)
    bgd, fgd = np.zeros((1, 65)), np.zeros((1, 65))
    cv2.grabCut(image_bgr, trimap, None, bgd, fgd, 5, cv2.GC_INIT_WITH_MASK)
    return (trimap == cv2.GC_FGD) | (trimap == cv2.GC_PR_FGD)


def bench_embedded(samples) -> None:
    embedded = get_predictor("embedded")
    embedded_s, plain_s = 0.0, 0.0
    for image, gt, ignore in samples:
        start = time.perf_counter()
        embedding = embedded.encode(image)
        embedded_s += time.perf_counter() - start

        def embedded_step(clicks, logits, embedding=embedding):
            prediction = embedded.predict(embedding, clicks, logits)
            return embedded.predict_mask(prediction), prediction.logits

        embedded_s += trajectory(embedded_step, gt, ignore)
        image_bgr = np.ascontiguousarray(image[:, :, ::-1])
        plain_s += trajectory(
            lambda clicks, logits, image_bgr=image_bgr: (plain_grabcut_mask(image_bgr, clicks), None),
            gt,
            ignore,
        )
    masks = CLICKS * len(samples)
    print(
        f"embedded default vs plain cv2.grabCut per click, {len(samples)} GrabCut instances x {CLICKS} clicks:"
    )
    print(
        f"  embedded (encode once)   : {masks / embedded_s:8.2f} masks/s  ({embedded_s / masks * 1000:.0f} ms/mask)"
    )
    print(
        f"  plain cv2.grabCut        : {masks / plain_s:8.2f} masks/s  ({plain_s / masks * 1000:.0f} ms/mask)"
    )
    print(f"  ratio (embedded / plain masks per second): {plain_s / embedded_s:6.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--images", type=int, default=4, help="GrabCut instances for the SAM part (default 4)"
    )
    parser.add_argument("--embedded-images", type=int, default=21, help="instances for the embedded part")
    args = parser.parse_args()
    dataset = open_dataset(grabcut_root(), "grabcut")
    loaded = []
    for sample in dataset.samples[: max(args.images, args.embedded_images)]:
        gt, ignore = sample.load_masks()
        loaded.append((sample.load_image(), gt, ignore))
    if args.images > 0:
        with tempfile.TemporaryDirectory() as workdir:
            bench_sam(loaded[: args.images], Path(workdir))
    if args.embedded_images > 0:
        bench_embedded(loaded[: args.embedded_images])


if __name__ == "__main__":
    main()
