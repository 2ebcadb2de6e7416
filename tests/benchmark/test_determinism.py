"""#15.1: one config gives byte-identical instance files and reports however it is run."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

from benchmark.cli import main
from benchmark.datasets import open_dataset
from benchmark.engine import (
    EngineConfig,
    RunSpec,
    config_to_dict,
    evaluate_instance_from_payload,
    sample_to_dict,
)
from segmenters.base import Click
from segmenters.registry import get_predictor


def test_embedded_grabcut_is_repeatable_in_one_process(tiny_dataset):
    """The same image and clicks give the same mask again, whatever ran in between (OpenCV's RNG is seeded)."""
    predictor = get_predictor("embedded")
    rng = np.random.default_rng(0)
    image = rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)  # noise: GrabCut's k-means init matters
    image[10:40, 15:50] //= 2
    embedding = predictor.encode(image)
    clicks = [Click(30.0, 25.0, True)]
    masks = []
    for _ in range(4):
        masks.append(predictor.predict(embedding, clicks).logits.tobytes())
        np.random.seed(None)
        import cv2

        cv2.setRNGSeed(int(rng.integers(1 << 30)))  # someone else draws from OpenCV's generator
        cv2.kmeans(rng.random((50, 3), dtype=np.float32), 3, None,
                   (cv2.TERM_CRITERIA_MAX_ITER, 2, 0), 1, cv2.KMEANS_RANDOM_CENTERS)  # fmt: skip
    assert len(set(masks)) == 1
    other = get_predictor("embedded", random_seed=7)
    assert other.model_id != predictor.model_id  # another seed is another model id (no silent reuse)


def _tree(root):
    """{relative path: bytes} of every reproducible output (not the wall-time sidecars)."""
    files = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and "timing" not in path.name and path.suffix in (".npz", ".json", ".csv", ".md"):
            files[str(path.relative_to(root))] = path.read_bytes()
    return files


@pytest.mark.dataset
def test_workers_resume_and_fan_out_give_identical_bytes(grabcut_root, tmp_path):
    argv = ["run", "--method", "embedded", "--dataset", str(grabcut_root), "--click-model", "dt",
            "--groups", "2", "--max-clicks", "3", "--limit", "2", "--heatmaps", "0", "--no-progress",
            "--option", "work_long_side_px=96"]  # fmt: skip
    one, two, resumed, fanned = (tmp_path / name for name in ("one", "two", "resumed", "fanned"))
    assert main([*argv, "--out", str(one)]) == 0
    assert main([*argv, "--out", str(two), "--workers", "2"]) == 0
    # resumed: a run that lost one instance file (as if killed) and its summary, then ran again
    shutil.copytree(one, resumed)
    run_dir = resumed / "embedded" / "GrabCut"
    lost = sorted((run_dir / "instances").glob("*.npz"))[0]
    lost.unlink()
    (run_dir / "summary.json").unlink()
    assert main([*argv, "--out", str(resumed)]) == 0
    # fan-out: the instance files written by what the Celery task runs, then the report from them
    samples = open_dataset(grabcut_root, "grabcut").samples[:2]
    config = EngineConfig(max_clicks=3, group_bounds=((0.0, 0.5), (0.5, 1.0)))
    spec = RunSpec("embedded", {"work_long_side_px": 96}, "dt", config, str(fanned / "embedded" / "GrabCut"))
    for sample in reversed(samples):  # another order too
        payload = {
            **dataclasses.asdict(spec),
            "config": config_to_dict(config),
            "sample": sample_to_dict(sample),
        }
        evaluate_instance_from_payload(payload)
    stamps = {p: p.stat().st_mtime_ns for p in (fanned / "embedded" / "GrabCut" / "instances").glob("*.npz")}
    assert main([*argv, "--out", str(fanned)]) == 0
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # the CLI reused the fanned-out files

    reference = _tree(one)
    assert len([name for name in reference if name.endswith(".npz")]) == 2
    assert {"report.csv", "report.md", "embedded/GrabCut/summary.json"} <= set(reference)
    for other in (two, resumed, fanned):
        assert _tree(other) == reference, other.name
