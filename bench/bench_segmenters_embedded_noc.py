"""Bench: quality and speed of the embedded default on GrabCut with the RITM baseline clicker.

For every GrabCut instance, 20 baseline clicks (protocol §5.2; no early stop), prediction =
probability > 0.5, IoU without the ignore band. Prints NoC@85, NoC@90, NoF@90, mIoU@{1,3,5,10,20}
and ms per click for the embedded default and, in the same run on the same clicker, for a baseline
of one plain full-resolution ``cv2.grabCut`` run per click (see bench_segmenters_embedding_reuse).

Usage: .venv/bin/python bench/bench_segmenters_embedded_noc.py [--no-baseline] [--option key=value ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from bench_segmenters_embedding_reuse import CLICKS, grabcut_root, plain_grabcut_mask  # noqa: E402

from benchmark.clickers import baseline_click  # noqa: E402
from benchmark.datasets import open_dataset  # noqa: E402
from benchmark.metrics import iou, noc  # noqa: E402
from segmenters.registry import get_predictor  # noqa: E402


def run(samples, make_step) -> tuple[np.ndarray, float]:
    """IoU per (instance, click) and seconds per click (encode included) for ``make_step(image)``."""
    all_ious, seconds = [], 0.0
    for image, gt, ignore in samples:
        start = time.perf_counter()
        step = make_step(image)
        seconds += time.perf_counter() - start
        pred = np.zeros_like(gt)
        not_clicked = np.ones(gt.shape, np.float32)
        clicks, logits, ious = [], None, []
        for _ in range(CLICKS):
            click = baseline_click(gt=gt, ignore=ignore, pred=pred, not_clicked=not_clicked)
            not_clicked[int(click.y), int(click.x)] = 0
            clicks.append(click)
            start = time.perf_counter()
            pred, logits = step(clicks, logits)
            seconds += time.perf_counter() - start
            ious.append(iou(pred, gt, ignore))
        all_ious.append(ious)
    return np.asarray(all_ious), seconds / (CLICKS * len(samples))


def report(label: str, ious: np.ndarray, seconds_per_click: float) -> None:
    noc85 = np.mean([noc(row, 0.85, max_clicks=CLICKS) for row in ious])
    noc90s = [noc(row, 0.90, max_clicks=CLICKS) for row in ious]
    curve = ious.mean(axis=0)
    mious = ", ".join(f"@{k}={curve[k - 1]:.3f}" for k in (1, 3, 5, 10, 20))
    print(
        f"{label:<22} NoC@85={noc85:5.2f}  NoC@90={np.mean(noc90s):5.2f}  NoF@90={sum(n == CLICKS for n in noc90s):2d}"
        f"  mIoU {mious}  {seconds_per_click * 1000:6.0f} ms/click"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--no-baseline", action="store_true", help="skip the plain cv2.grabCut baseline")
    parser.add_argument("--option", action="append", default=[], help="embedded option key=JSON value")
    args = parser.parse_args()
    options = {key: json.loads(value) for key, value in (item.split("=", 1) for item in args.option)}
    dataset = open_dataset(grabcut_root(), "grabcut")
    samples = []
    for sample in dataset.samples:
        gt, ignore = sample.load_masks()
        samples.append((sample.load_image(), gt, ignore))
    predictor = get_predictor("embedded", **options)

    def embedded_step(image):
        embedding = predictor.encode(image)

        def step(clicks, logits):
            prediction = predictor.predict(embedding, clicks, logits)
            return predictor.predict_mask(prediction), prediction.logits

        return step

    def plain_step(image):
        image_bgr = np.ascontiguousarray(image[:, :, ::-1])
        return lambda clicks, logits: (plain_grabcut_mask(image_bgr, clicks), None)

    print(
        f"GrabCut, {len(samples)} instances x {CLICKS} baseline clicks; embedded options {options or 'default'}"
    )
    ious, seconds = run(samples, embedded_step)
    report("embedded", ious, seconds)
    if not args.no_baseline:
        base_ious, base_seconds = run(samples, plain_step)
        report("plain cv2.grabCut", base_ious, base_seconds)
        print(f"time per click ratio (plain / embedded): {base_seconds / seconds:5.2f}x")


if __name__ == "__main__":
    main()
