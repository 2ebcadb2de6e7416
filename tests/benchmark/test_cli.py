from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from benchmark.cli import equal_mass_groups, guess_layout, main
from benchmark.datasets import open_dataset
from benchmark.engine import load_results
from benchmark.metrics import noc
from benchmark.rclicks import CLICKS_COLUMNS


def test_equal_mass_groups_and_layout_guess(tmp_path):
    assert equal_mass_groups(4) == ((0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0))
    (tmp_path / "x" / "data_GT").mkdir(parents=True)
    assert guess_layout(tmp_path / "x") == "grabcut"
    assert guess_layout(tmp_path / "COCO_MVal") == "coco_mval"
    with pytest.raises(ValueError, match="pass --layout"):
        guess_layout(tmp_path)


def test_run_without_click_model_is_a_clear_error(tiny_dataset, capsys, tmp_path):
    code = main(["run", "--method", "embedded", "--dataset", str(tiny_dataset.root), "--out", str(tmp_path)])
    assert code == 2
    assert "--groups needs --click-model" in capsys.readouterr().err


def _real_clicks_csv(dataset, samples, path):
    """Two clicks inside each object, recorded in a frame half the image size (tests the rescaling)."""
    rows = []
    for sample in samples:
        gt, _ = sample.load_masks()
        ys, xs = np.nonzero(gt)
        height, width = gt.shape
        for pick in (len(xs) // 3, 2 * len(xs) // 3):
            rows.append(dict(dataset=dataset.name, image_stem=sample.key.image_stem, object_stem="",
                             model_type="", click_type="first", full_stem=sample.key.image_stem,
                             device="pc", x=xs[pick] // 2, y=ys[pick] // 2, w=width // 2, h=height // 2))  # fmt: skip
    pd.DataFrame(rows, columns=list(CLICKS_COLUMNS)).to_csv(path, index=False)


@pytest.mark.dataset
def test_end_to_end_embedded_on_grabcut_resumes(grabcut_root, tmp_path, capsys):
    dataset = open_dataset(grabcut_root, "grabcut")
    samples = dataset.samples[:3]
    clicks_csv = tmp_path / "clicks.csv"
    _real_clicks_csv(dataset, samples, clicks_csv)
    out = tmp_path / "runs"
    argv = ["run", "--method", "embedded", "--dataset", str(grabcut_root), "--click-model", "dt",
            "--groups", "2", "--max-clicks", "3", "--limit", "3", "--workers", "2", "--clicks", str(clicks_csv),
            "--out", str(out), "--heatmaps", "2", "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    run_dir = out / "embedded" / "GrabCut"
    results = load_results(run_dir)
    assert [r.key for r in results] == sorted(s.key for s in samples)
    for result in results:
        assert result.base_iou.shape == (3,) and result.group_iou.shape == (2, 1, 3)
        assert np.all((result.base_iou >= 0) & (result.base_iou <= 1))
        assert result.user_iou.shape == (2,) and result.sample_iou.shape == (2,)
        gt, _ = next(s for s in samples if s.key == result.key).load_masks()
        for x, y in result.user_clicks:  # rescaled back into the object (2x the frame coordinates)
            assert (
                gt[int(y), int(x)] or gt[min(int(y) + 1, gt.shape[0] - 1), min(int(x) + 1, gt.shape[1] - 1)]
            )
    summary = json.loads((run_dir / "summary.json").read_text())
    expected_base_noc = np.mean([noc(r.base_iou, 0.9, max_clicks=3) for r in results])
    assert summary["base_noc90"] == pytest.approx(expected_base_noc)
    assert summary["instances"] == 3 and summary["user_instances"] == 3
    report = pd.read_csv(out / "report.csv")
    assert report.loc[0, "Method"] == "embedded" and report.loc[0, "Instances"] == 3
    assert (out / "report.md").read_text().startswith("| Method |")
    for png in [run_dir / "miou_vs_clicks.png", *sorted((run_dir / "heatmaps").glob("*.png"))]:
        assert Image.open(png).format == "PNG"
    assert len(list((run_dir / "heatmaps").glob("*.png"))) == 2
    stamps = {p.name: p.stat().st_mtime_ns for p in (run_dir / "instances").glob("*.npz")}
    capsys.readouterr()
    assert main(argv) == 0  # resumes: nothing is recomputed
    assert {p.name: p.stat().st_mtime_ns for p in (run_dir / "instances").glob("*.npz")} == stamps
    assert "| embedded | GrabCut | 3 |" in capsys.readouterr().out


def test_two_datasets_with_one_name_do_not_share_a_run_folder(tmp_path, capsys):
    """#15.4: same layout, other content: a clear error naming both folders and --name; rows carry path + hash."""
    from benchmark.cli import dataset_content_hash

    from .conftest import write_grabcut

    first, second = tmp_path / "a" / "GrabCut", tmp_path / "b" / "GrabCut"
    write_grabcut(first, {"one": (2, 3, 10, 12)})
    write_grabcut(second, {"one": (4, 4, 12, 12)})
    out = tmp_path / "runs"
    argv = ["run", "--method", "embedded", "--groups", "0", "--max-clicks", "1", "--heatmaps", "0", "--no-progress",
            "--out", str(out)]  # fmt: skip
    assert main([*argv, "--dataset", str(first)]) == 0
    assert main([*argv, "--dataset", str(first)]) == 0  # the same dataset again: resumes
    capsys.readouterr()
    assert main([*argv, "--dataset", str(second)]) == 2
    error = capsys.readouterr().err
    assert str(first.resolve()) in error and str(second.resolve()) in error and "--name" in error
    assert main([*argv, "--dataset", str(second), "--name", "GrabCut-b"]) == 0
    report = pd.read_csv(out / "report.csv")
    hashes = {
        open_dataset(root, "grabcut").root: dataset_content_hash(open_dataset(root, "grabcut"))
        for root in (first, second)
    }
    assert report["Dataset"].tolist() == ["GrabCut", "GrabCut-b"]
    assert report["Dataset path"].tolist() == [str(first.resolve()), str(second.resolve())]
    assert report["Dataset hash"].tolist() == [hashes[first], hashes[second]]
    assert hashes[first] != hashes[second]
    # the hash is of the content, not of the name or the folder
    copy = tmp_path / "c" / "GrabCut"
    write_grabcut(copy, {"one": (2, 3, 10, 12)})
    assert dataset_content_hash(open_dataset(copy, "grabcut", name="Else")) == hashes[first]


def test_report_names_the_checkpoint_of_a_weighted_model_and_marks_a_weight_free_one(tiny_dataset, tmp_path):
    """#15.6: report.csv/md carry the sha256 of the checkpoint that made the masks; '-' for a weight-free model."""
    import hashlib

    from segmenters.registry import get_predictor, register, unregister
    from tests.segmenters.conftest import TINY_SAM, write_tiny_sam_checkpoint

    checkpoint = write_tiny_sam_checkpoint(tmp_path / "tiny_sam.pth", seed=0)
    register("test-tiny-sam")(
        lambda **options: get_predictor("sam", architecture=TINY_SAM, device="cpu", **options)
    )
    out = tmp_path / "runs"
    argv = ["run", "--dataset", str(tiny_dataset.root), "--groups", "0", "--max-clicks", "2", "--heatmaps", "0",
            "--no-progress", "--out", str(out)]  # fmt: skip
    try:
        assert main([*argv, "--method", "test-tiny-sam", "--option", f"checkpoint={checkpoint}"]) == 0
    finally:
        unregister("test-tiny-sam")
    assert main([*argv, "--method", "embedded"]) == 0
    report = pd.read_csv(out / "report.csv", keep_default_na=False)
    digest = hashlib.sha256(checkpoint.read_bytes()).hexdigest()
    assert report["Method"].tolist() == ["embedded", "test-tiny-sam"]
    assert report["Checkpoint sha256"].tolist() == ["-", digest]
    markdown = (out / "report.md").read_text()
    assert markdown.splitlines()[0].endswith("| Dataset hash | Checkpoint sha256 |")
    assert f"| {digest} |" in markdown and "| - |" in markdown


def test_a_run_reports_quality_against_time_beside_the_per_click_curve(tiny_dataset, tmp_path, capsys):
    """Issue 33.2: mIoU against the method's time and its AUC, for Base and the groups: in timing.json (wall
    times), timing.csv, a plot beside miou_vs_clicks.png and the printed report; summary.json stays free of
    wall times and records the code version."""
    from benchmark.provenance import code_version

    out = tmp_path / "runs"
    argv = ["run", "--method", "embedded", "--option", "work_long_side_px=48", "--dataset", str(tiny_dataset.root),
            "--click-model", "dt", "--groups", "2", "--max-clicks", "3", "--heatmaps", "0", "--no-progress",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    run_dir = next(out.glob("embedded/*"))
    timing = json.loads((run_dir / "timing.json").read_text())
    for key in ("base", "sample"):
        curve = timing[f"time_curve_{key}"]
        assert (
            len(curve["seconds"]) == len(curve["miou"]) == 4 and curve["seconds"][0] == curve["miou"][0] == 0
        )
        assert (
            all(b >= a for a, b in zip(curve["seconds"], curve["seconds"][1:])) and curve["seconds"][-1] > 0
        )
        assert 0 <= timing[f"time_auc_{key}"] <= 1
    assert (run_dir / "miou_vs_time.png").stat().st_size > 1000 and (run_dir / "miou_vs_clicks.png").is_file()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert not {k for k in summary if k.startswith("time_")} and summary["code_version"] == code_version()
    assert summary["click_model"] == "dt"
    row = pd.read_csv(out / "timing.csv").iloc[0]
    assert row["Base mIoU-time AuC"] == pytest.approx(timing["time_auc_base"])
    assert "mIoU against method time, AUC: Base" in capsys.readouterr().out
