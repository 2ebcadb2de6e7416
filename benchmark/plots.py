"""PNG plots of engine results: mIoU vs clicks per clicking group, mIoU vs time, and click heatmaps.

matplotlib runs with the non-interactive Agg backend (no display needed).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import cv2
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from benchmark.datasets import Sample  # noqa: E402
from benchmark.engine import InstanceResult  # noqa: E402


def figure_save(figure, path: Path, *, dpi: int = 110) -> Path:
    """Lay ``figure`` out, write it to ``path`` as a PNG (its folder created) and close it: pyplot keeps every
    figure it made until closed, so a run that draws one per instance would grow without it. Returns ``path``."""
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=dpi)
    plt.close(figure)
    return path


def plot_miou_curves(summary: dict, path: Path) -> Path:
    """mIoU vs number of clicks: baseline (black, dashed) and every group (G1 blue .. G10 red)."""
    figure, axes = plt.subplots(figsize=(6, 4))
    groups = summary.get("curve_groups", [])
    colours = plt.cm.coolwarm(np.linspace(0, 1, max(len(groups), 2)))
    for index, curve in enumerate(groups):
        axes.plot(np.arange(1, len(curve) + 1), curve, color=colours[index], label=f"G{index + 1}")
    if "curve_base" in summary:
        curve = summary["curve_base"]
        axes.plot(np.arange(1, len(curve) + 1), curve, "k--", label="Base")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("clicks")
    axes.set_ylabel("mIoU")
    axes.set_title(f"{summary['method']} on {summary['dataset']} ({summary['instances']} instances)")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7, ncol=2)
    return figure_save(figure, path)


def plot_time_curves(summary: dict, path: Path) -> Path | None:
    """mIoU vs the method's time (seconds): Base (black, dashed) and the pooled group trajectories (Sample), each
    labelled with its AUC; None (no file) when the summary has no timing."""
    curves = [(key, label, style) for key, label, style in
              (("base", "Base", "k--"), ("sample", "Sample (groups)", "C3-")) if f"time_curve_{key}" in summary]  # fmt: skip
    if not curves:
        return None
    figure, axes = plt.subplots(figsize=(6, 4))
    for key, label, style in curves:
        curve, auc = summary[f"time_curve_{key}"], summary.get(f"time_auc_{key}", float("nan"))
        axes.plot(curve["seconds"], curve["miou"], style, label=f"{label}, AUC {auc:.3f}")
    axes.set_xlabel("method time (s, mean per trajectory; the encode counts at the first click)")
    axes.set_ylabel("mIoU")
    axes.set_title(f"{summary['method']} on {summary['dataset']}: quality against time")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    return figure_save(figure, path)


def click_heatmap(
    shape: tuple[int, int], clicks_xy: np.ndarray, *, sigma_px: float | None = None
) -> np.ndarray:
    """float32 (H, W) density of clicks: a unit impulse per click blurred by a Gaussian, peak 1."""
    height, width = shape
    density: np.ndarray = np.zeros((height, width), dtype=np.float32)
    for x, y in np.asarray(clicks_xy, dtype=np.float64).reshape(-1, 2):
        if np.isfinite(x) and np.isfinite(y):
            density[min(max(int(y), 0), height - 1), min(max(int(x), 0), width - 1)] += 1.0
    sigma = sigma_px or max(2.0, 0.01 * float(np.hypot(height, width)))
    density = cv2.GaussianBlur(density, (0, 0), sigma)
    peak = float(density.max())
    return density / peak if peak > 0 else density


def plot_click_heatmap(result: InstanceResult, sample: Sample, path: Path) -> Path:
    """The image with the first-click heatmap of all groups and the real clicks (white) on top."""
    image = sample.load_image()
    gt, _ = sample.load_masks()
    first_clicks = (
        result.group_clicks[:, :, 0, :2].reshape(-1, 2) if result.group_clicks.size else np.zeros((0, 2))
    )
    sampled = result.sample_clicks[:, :2] if result.sample_clicks.size else np.zeros((0, 2))
    heat = click_heatmap(gt.shape, np.concatenate([first_clicks, sampled]))
    figure, axes = plt.subplots(figsize=(6, 6 * gt.shape[0] / max(gt.shape[1], 1) + 0.5))
    axes.imshow(image)
    axes.contour(gt, levels=[0.5], colors="lime", linewidths=0.8)
    axes.imshow(np.ma.masked_less(heat, 0.02), cmap="inferno", alpha=0.6)
    if result.user_clicks.size:
        axes.scatter(result.user_clicks[:, 0], result.user_clicks[:, 1], s=6, c="white", label="real clicks")
        axes.legend(fontsize=7, loc="lower right")
    key = result.key
    axes.set_title(f"{key.dataset} / {key.image_stem} {key.object_stem}".strip(), fontsize=9)
    axes.axis("off")
    return figure_save(figure, path, dpi=100)


def plot_heatmaps(
    results: Sequence[InstanceResult], samples: dict, out_dir: Path, *, limit: int = 8
) -> list[Path]:
    """Heatmaps for up to ``limit`` instances (those with group or real clicks), in key order."""
    from benchmark.engine import instance_file_name

    paths: list[Path] = []
    for result in results:
        if len(paths) >= limit:
            break
        sample = samples.get(result.key)
        if sample is None or not (result.group_clicks.size or result.user_clicks.size):
            continue
        name = instance_file_name(result.key).removesuffix(".npz") + ".png"
        paths.append(plot_click_heatmap(result, sample, out_dir / name))
    return paths
