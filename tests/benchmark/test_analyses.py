"""Analyses on small synthetic studies whose right answer is known by construction."""

from __future__ import annotations

import csv

import cv2
import numpy as np
import pandas as pd
import pytest

from benchmark.analyses import (
    TaskData,
    compare_click_models,
    display_mode_ablation,
    format_model_table,
    main,
    pc_vs_mobile,
    plot_task_maps,
)
from benchmark.clickability import ClickModel
from benchmark.clickability.baselines import UniformClickModel
from benchmark.distribution_metrics import sample_click_sets
from benchmark.rclicks import CLICKS_COLUMNS

HEIGHT, WIDTH = 60, 80


def _true_map(gt: np.ndarray, centre_xy: tuple[float, float], spread: float = 3.0) -> np.ndarray:
    yy, xx = np.mgrid[0 : gt.shape[0], 0 : gt.shape[1]]
    return np.exp(-((xx - centre_xy[0]) ** 2 + (yy - centre_xy[1]) ** 2) / (2 * spread**2)) * gt


class TrueMapModel(ClickModel):
    """Knows the distribution the synthetic clicks were drawn from (per error mask)."""

    name = "true"

    def __init__(self, centres: dict[bytes, tuple[float, float]]) -> None:
        self.centres = centres

    def predict_map(self, image, gt_mask, error_mask):
        return _true_map(error_mask, self.centres[error_mask.tobytes()]).astype(np.float32)


def _study(n_tasks: int = 5, n_clicks: int = 30, seed: int = 0):
    rng = np.random.default_rng(seed)
    tasks, centres = [], {}
    for index in range(n_tasks):
        gt = np.zeros((HEIGHT, WIDTH), dtype=bool)
        top, left = 8 + index, 10 + 2 * index
        gt[top : top + 40, left : left + 50] = True
        centre = (left + 12.0, top + 10.0)
        centres[gt.tobytes()] = centre
        clicks = sample_click_sets(_true_map(gt, centre), n_clicks=n_clicks, n_sets=1, rng=rng)[0]
        devices = np.array(["pc", "mobile"] * (n_clicks // 2))
        image = rng.integers(0, 255, size=(HEIGHT, WIDTH, 3), dtype=np.uint8)
        tasks.append(TaskData("Synthetic", f"t{index}", "first", image, gt, gt.copy(), clicks, devices))
    return tasks, centres


def test_a_model_sampling_from_the_true_map_beats_uniform():
    tasks, centres = _study()
    per_task, summary = compare_click_models(
        tasks, {"ud": UniformClickModel(), "true": TrueMapModel(centres)}, n_sets=20, seed=1
    )
    assert len(per_task) == 2 * len(tasks)
    means = summary.set_index("model")
    assert list(summary["model"]) == ["ud", "true"]
    assert means.loc["true", "ks"] > means.loc["ud", "ks"]
    assert means.loc["true", "pl1"] < means.loc["ud", "pl1"]
    assert means.loc["true", "wd"] < means.loc["ud", "wd"]
    assert means.loc["true", "nss"] > means.loc["ud", "nss"]
    assert means.loc["true", "pde"] > means.loc["ud", "pde"]
    assert "KS↑" in format_model_table(summary)


def test_model_comparison_is_independent_of_task_order():
    tasks, centres = _study(n_tasks=3)
    models = {"true": TrueMapModel(centres)}
    forward, _ = compare_click_models(tasks, models, n_sets=5, seed=3)
    backward, _ = compare_click_models(list(reversed(tasks)), models, n_sets=5, seed=3)
    pd.testing.assert_frame_equal(
        forward.set_index("full_stem").sort_index(), backward.set_index("full_stem").sort_index()
    )


def test_display_mode_ablation_ranks_the_unbiased_mode_first():
    tasks, centres = _study(n_tasks=4, n_clicks=40)
    rng = np.random.default_rng(9)

    def redraw(shift):
        out = []
        for task in tasks:
            cx, cy = centres[task.gt_mask.tobytes()]
            clicks = sample_click_sets(
                _true_map(task.gt_mask, (cx + shift, cy + shift)), n_clicks=40, n_sets=1, rng=rng
            )[0]
            out.append(
                TaskData(
                    task.dataset,
                    task.full_stem,
                    "first",
                    task.image,
                    task.gt_mask,
                    task.error_mask,
                    clicks,
                    task.devices,
                )
            )
        return out

    per_task, summary = display_mode_ablation(
        {"Text_Description": tasks, "Object_CutOut": redraw(0.0), "Silhouette_Mask": redraw(12.0)}
    )
    assert len(per_task) == 8
    means = summary.set_index("mode")
    assert list(summary["mode"]) == ["Object_CutOut", "Silhouette_Mask"]  # sorted by PL1
    assert means.loc["Object_CutOut", "wd"] < means.loc["Silhouette_Mask", "wd"]
    assert means.loc["Object_CutOut", "ks"] > means.loc["Silhouette_Mask", "ks"]


def test_display_mode_ablation_requires_the_same_full_stems():
    tasks, _ = _study(n_tasks=2)
    with pytest.raises(ValueError, match="t1"):
        display_mode_ablation({"Text_Description": tasks, "Object_CutOut": tasks[:1]})


def test_pc_vs_mobile_uses_x_and_y_and_the_ten_click_rule():
    gt = np.zeros((HEIGHT, WIDTH), dtype=bool)
    gt[5:55, 5:75] = True
    rng = np.random.default_rng(0)
    # clicks spread along x near the top: (x, x) would put the PC set far from the mobile set
    points = np.stack([rng.uniform(10, 70, 12), rng.uniform(8, 12, 12)], axis=1)
    same = TaskData("D", "same", "first", np.zeros((HEIGHT, WIDTH, 3), np.uint8), gt, gt,
                    np.concatenate([points, points]), np.array(["pc"] * 12 + ["mobile"] * 12))  # fmt: skip
    few = TaskData("D", "few", "first", same.image, gt, gt, np.concatenate([points, points[:3]]),
                   np.array(["pc"] * 9 + ["mobile"] * 6))  # fmt: skip
    per_task, summary = pc_vs_mobile([same, few])
    row = per_task.set_index("full_stem").loc["same"]
    assert row["wd"] == 0.0 and row["ks"] == 1.0
    assert row["pl1"] == pytest.approx(
        np.mean(np.abs(points[:, None, 0] - points[None, :, 0])) / 70
        + np.mean(np.abs(points[:, None, 1] - points[None, :, 1])) / 50
    )
    assert np.isnan(per_task.set_index("full_stem").loc["few", "wd"])
    assert summary.loc[0, "tasks_used"] == 1 and summary.loc[0, "wd"] == 0.0


def test_plot_task_maps_writes_a_png(tmp_path):
    tasks, centres = _study(n_tasks=1)
    path = plot_task_maps(
        tasks[0], {"ud": UniformClickModel(), "true": TrueMapModel(centres)}, tmp_path / "p" / "t0.png"
    )
    assert path.is_file() and cv2.imread(str(path)) is not None


# --------------------------------------------------------------------------------------------------
# CLI end to end on a synthetic GrabCut-layout folder
# --------------------------------------------------------------------------------------------------


def _write_study(root, *, modes: tuple[str, ...] | None = None):
    rng = np.random.default_rng(1)
    (root / "data_GT").mkdir(parents=True)
    (root / "boundary_GT").mkdir()
    rows = []
    for index in range(3):
        stem = f"im{index}"
        cv2.imwrite(
            str(root / "data_GT" / f"{stem}.jpg"),
            rng.integers(0, 255, size=(HEIGHT, WIDTH, 3), dtype=np.uint8),
        )
        mask = np.zeros((HEIGHT, WIDTH), dtype=np.uint8)
        mask[10:50, 15:70] = 255
        cv2.imwrite(str(root / "boundary_GT" / f"{stem}.bmp"), mask)
        for label in modes or ("GrabCut",):
            shift = 15 if label == "Silhouette_Mask" else 0
            for device in ("pc", "mobile"):
                for x, y in np.array([30 + shift, 25]) + rng.normal(0, 4, size=(12, 2)):
                    rows.append(
                        [label, stem, "", "", "first", stem, device, int(x), int(y), WIDTH * 2, HEIGHT * 2]
                    )
    path = root / ("previews.csv" if modes else "clicks.csv")
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(CLICKS_COLUMNS)
        writer.writerows(rows)
    return path


def test_cli_models_and_pc_mobile_and_plots(tmp_path, capsys):
    data = tmp_path / "GrabCut"
    clicks = _write_study(data)
    out = tmp_path / "out"
    assert main(["models", "--clicks", str(clicks), "--dataset", str(data), "--out", str(out),
                 "--models", "ud,dt,sm", "--n-sets", "5"]) == 0  # fmt: skip
    table = pd.read_csv(out / "click_models_GrabCut.csv")
    assert list(table["model"]) == ["ud", "dt", "sm"] and table[["ks", "pl1", "wd"]].notna().all().all()
    assert "PL1↓" in capsys.readouterr().out
    assert main(["pc-mobile", "--clicks", str(clicks), "--dataset", str(data), "--out", str(out)]) == 0
    summary = pd.read_csv(out / "pc_vs_mobile_GrabCut.csv")
    assert summary.loc[0, "tasks_used"] == 3
    assert main(["plots", "--clicks", str(clicks), "--dataset", str(data), "--out", str(out), "--models", "ud",
                 "--max-tasks", "2"]) == 0  # fmt: skip
    assert len(list((out / "plots").glob("*.png"))) == 2


def test_cli_display_mode_ablation(tmp_path, capsys):
    data = tmp_path / "PREVIEW"
    previews = _write_study(data, modes=("Text_Description", "Object_CutOut", "Silhouette_Mask"))
    out = tmp_path / "out"
    assert main(["ablation", "--previews", str(previews), "--dataset", str(data), "--layout", "grabcut",
                 "--out", str(out)]) == 0  # fmt: skip
    summary = pd.read_csv(out / "display_modes.csv")
    assert list(summary["mode"]) == ["Object_CutOut", "Silhouette_Mask"]
    assert "Object_CutOut" in capsys.readouterr().out
