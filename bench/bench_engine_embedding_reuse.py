"""Seconds per instance for 10 clicking groups x 20 clicks: embedding reuse vs per-click re-encoding.

Both modes run the same engine code on the same GrabCut instances in this process, one after the
other; only ``EngineConfig.reencode_per_click`` differs (re-encoding is what the reference does for
SAM-like models, protocol §7). The IoUs of both modes are checked to be identical.

Segmenter: a small randomly initialised SAM (ViT encoder, depth 2, width 64, 1024-px input; the
decoder is SAM's own) built with ``segmenters.sam`` and saved as a temporary checkpoint, so the
encode/decode split is SAM's and no weights are downloaded. ``--method embedded`` uses the
weight-free GrabCut default instead (its encode is cheap, so reuse gains little there).

Usage: ``.venv/bin/python bench/bench_engine_embedding_reuse.py [--instances 2] [--method sam-tiny]``
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))  # run as a script from any folder

from benchmark.clickability.click_model import load_click_model  # noqa: E402
from benchmark.datasets import open_dataset  # noqa: E402
from benchmark.engine import EngineConfig, clear_embedding_cache, evaluate_instance  # noqa: E402
from segmenters.registry import get_predictor  # noqa: E402

GRABCUT = PROJECT_ROOT.parent / "shared" / "datasets" / "GrabCut"


def tiny_sam(folder: Path):
    """A random-init SAM with a 2-block, 64-wide ViT encoder, saved to ``folder`` and loaded back."""
    import torch

    from segmenters.sam import SamArchitecture, build_sam_model

    architecture = SamArchitecture(
        encoder_embed_dim=64, encoder_depth=2, encoder_num_heads=2, encoder_global_attn_indexes=(1,)
    )
    torch.manual_seed(0)
    checkpoint = folder / "sam_tiny_random.pth"
    torch.save(build_sam_model(architecture).state_dict(), checkpoint)
    return get_predictor("sam", checkpoint=str(checkpoint), architecture=architecture, device="cpu")


def measure(predictor, samples, map_fn, *, reencode: bool, groups: int, clicks: int):
    config = EngineConfig(
        max_clicks=clicks,
        group_bounds=tuple((k / groups, (k + 1) / groups) for k in range(groups)),
        run_base=False,
        run_user=False,
        reencode_per_click=reencode,
    )
    clear_embedding_cache()
    ious = []
    started = time.perf_counter()
    for sample in samples:
        result = evaluate_instance(
            predictor=predictor, sample=sample, config=config, method="bench", map_fn=map_fn
        )
        ious.append(result.group_iou)
    return (time.perf_counter() - started) / len(samples), ious


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--groups", type=int, default=10)
    parser.add_argument("--clicks", type=int, default=20)
    parser.add_argument("--method", default="sam-tiny", help="sam-tiny (default) or a registered name")
    parser.add_argument("--dataset", type=Path, default=GRABCUT)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    samples = open_dataset(args.dataset, "grabcut").samples[: args.instances]
    map_fn = load_click_model("dt")
    with tempfile.TemporaryDirectory() as folder:
        predictor = tiny_sam(Path(folder)) if args.method == "sam-tiny" else get_predictor(args.method)
        reuse_s, reuse_ious = measure(
            predictor, samples, map_fn, reencode=False, groups=args.groups, clicks=args.clicks
        )
        reencode_s, reencode_ious = measure(
            predictor, samples, map_fn, reencode=True, groups=args.groups, clicks=args.clicks
        )
    same = all(np.array_equal(a, b, equal_nan=True) for a, b in zip(reuse_ious, reencode_ious))
    print(
        f"method={args.method} instances={len(samples)} groups={args.groups} clicks={args.clicks} (1 CPU thread)"
    )
    print(f"embedding reuse      : {reuse_s:8.2f} s per instance")
    print(f"re-encode per click  : {reencode_s:8.2f} s per instance (baseline, as the reference)")
    print(f"speed-up (baseline / reuse): {reencode_s / reuse_s:.2f}x; identical IoUs: {same}")


if __name__ == "__main__":
    main()
