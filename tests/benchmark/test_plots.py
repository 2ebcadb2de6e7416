"""benchmark.plots: every plot is a PNG in a folder made for it, and no pyplot figure stays open after it."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from PIL import Image

from benchmark.plots import click_heatmap, figure_save, plot_miou_curves, plot_time_curves

SUMMARY = {
    "method": "m",
    "dataset": "d",
    "instances": 2,
    "curve_groups": [[0.5, 0.7, 0.8], [0.4, 0.6, 0.9]],
    "curve_base": [0.6, 0.8, 0.85],
}


def test_figure_save_writes_the_png_into_a_new_folder_and_closes_the_figure(tmp_path):
    figure, axes = plt.subplots(figsize=(2, 1))
    axes.plot([0, 1], [0, 1])
    path = tmp_path / "new" / "deeper" / "line.png"
    assert figure_save(figure, path, dpi=50) == path
    assert Image.open(path).size == (100, 50)  # 2 x 1 inches at 50 dpi
    assert not plt.fignum_exists(figure.number)


def test_curve_plots_are_written_and_closed(tmp_path):
    open_before = set(plt.get_fignums())
    miou = plot_miou_curves(SUMMARY, tmp_path / "a" / "miou.png")
    assert Image.open(miou).size == (660, 440)  # 6 x 4 inches at 110 dpi
    assert plot_time_curves(SUMMARY, tmp_path / "b" / "time.png") is None  # no timing: no file
    assert not (tmp_path / "b").exists()
    timed = {**SUMMARY, "time_curve_base": {"seconds": [0.1, 0.2], "miou": [0.6, 0.8]}, "time_auc_base": 0.7}
    assert plot_time_curves(timed, tmp_path / "b" / "time.png").is_file()
    assert set(plt.get_fignums()) == open_before


def test_click_heatmap_peaks_at_one_where_the_clicks_are():
    heat = click_heatmap((20, 30), np.array([[5.0, 4.0], [5.2, 4.9], [25.0, 15.0]]), sigma_px=1.0)
    assert heat.shape == (20, 30) and heat.dtype == np.float32
    assert heat.max() == 1.0 and np.unravel_index(np.argmax(heat), heat.shape) == (4, 5)  # two clicks there
    assert heat[15, 25] < 1.0 and heat[0, 29] < 1e-3
