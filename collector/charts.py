"""Pictures for the researcher area: click heatmaps, phase-timing and reaction-time histograms, pc vs
mobile comparisons. Each function takes plain arrays and returns PNG bytes (matplotlib's Agg canvas,
no pyplot global state, so it is safe inside a threaded web server).

Colours are fixed across pictures: pc = blue, mobile = orange, invalid = red cross, target region =
green outline.
"""

from __future__ import annotations

import io

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from scipy.ndimage import gaussian_filter

DEVICE_COLOURS = {"pc": "#1f77b4", "mobile": "#ff7f0e"}
INVALID_COLOUR = "#d62728"
REGION_COLOUR = "#2ca02c"
DEVICE_MARKERS = {"pc": "o", "mobile": "^"}


def _png(figure: Figure) -> bytes:
    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def click_density(*, xs: np.ndarray, ys: np.ndarray, height: int, width: int, sigma_px: float) -> np.ndarray:
    """Gaussian-smoothed click density on the image grid: (H, W) float64, max 1 (all zeros without
    clicks). ``xs``/``ys`` are column/row pixel coordinates; clicks outside the image are dropped."""
    density = np.zeros((height, width), dtype=np.float64)
    cols = np.floor(np.asarray(xs, dtype=np.float64)).astype(np.int64)
    rows = np.floor(np.asarray(ys, dtype=np.float64)).astype(np.int64)
    inside = (cols >= 0) & (cols < width) & (rows >= 0) & (rows < height)
    np.add.at(density, (rows[inside], cols[inside]), 1.0)
    if sigma_px > 0:
        density = gaussian_filter(density, sigma=sigma_px)
    peak = density.max()
    return density / peak if peak > 0 else density


def target_heatmap_png(
    *,
    image: np.ndarray,
    region: np.ndarray,
    clicks: list[dict],
    title: str = "",
    max_side_px: int = 900,
) -> bytes:
    """The image (dimmed), the target region outlined, a density of the valid clicks per device and
    every click as a marker (pc circles blue, mobile triangles orange, invalid clicks red crosses).

    ``image``: (H, W, 3) uint8 RGB; ``region``: (H, W) bool at the same size; ``clicks``: dicts with
    ``x``, ``y`` (canonical px), ``device`` and ``is_valid`` (False = invalid; None = not judged yet,
    drawn as valid)."""
    if image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"image has shape {image.shape}; expected (H, W, 3) RGB.")
    height, width = image.shape[:2]
    if region.shape != (height, width):
        raise ValueError(f"region has shape {region.shape}; expected the image's {(height, width)}.")
    scale = max_side_px / max(height, width)
    figure = Figure(figsize=(max(width * scale / 100, 3.0), max(height * scale / 100, 2.0) + 0.5))
    axes = figure.add_axes((0, 0, 1, height * scale / 100 / figure.get_figheight()))
    axes.imshow((image.astype(np.float64) * 0.55 + 255 * 0.2).astype(np.uint8), interpolation="bilinear")
    if region.any():
        axes.contour(region.astype(np.float64), levels=[0.5], colors=[REGION_COLOUR], linewidths=2)
    sigma = 0.02 * float(np.hypot(height, width))
    for device, colour in DEVICE_COLOURS.items():
        valid = [c for c in clicks if c.get("device") == device and c.get("is_valid") is not False]
        if not valid:
            continue
        density = click_density(
            xs=np.array([c["x"] for c in valid]),
            ys=np.array([c["y"] for c in valid]),
            height=height,
            width=width,
            sigma_px=sigma,
        )
        overlay = np.zeros((height, width, 4), dtype=np.float64)
        overlay[..., :3] = to_rgb(colour)
        overlay[..., 3] = 0.75 * density
        axes.imshow(overlay, interpolation="bilinear")
        axes.scatter(
            [c["x"] for c in valid],
            [c["y"] for c in valid],
            s=28,
            marker=DEVICE_MARKERS[device],
            facecolors=colour,
            edgecolors="white",
            linewidths=0.8,
            label=f"{device} ({len(valid)})",
        )
    invalid = [c for c in clicks if c.get("is_valid") is False]
    if invalid:
        axes.scatter(
            [c["x"] for c in invalid],
            [c["y"] for c in invalid],
            s=60,
            marker="x",
            c=INVALID_COLOUR,
            linewidths=2,
            label=f"invalid ({len(invalid)})",
        )
    axes.set_xlim(-0.5, width - 0.5)
    axes.set_ylim(height - 0.5, -0.5)
    axes.set_axis_off()
    if clicks:
        axes.legend(loc="lower right", fontsize=8, framealpha=0.85)
    figure.text(0.01, 0.99, title or "clicks", va="top", fontsize=10)
    return _png(figure)


def _histogram(axes, values_by_device: dict[str, np.ndarray], *, bins: np.ndarray) -> None:
    for device, colour in DEVICE_COLOURS.items():
        values = values_by_device.get(device)
        if values is None or values.size == 0:
            continue
        axes.hist(values, bins=bins, color=colour, alpha=0.55, label=f"{device} (n={values.size})")


def _bins(arrays: list[np.ndarray], *, count: int = 30) -> np.ndarray:
    values = np.concatenate([a for a in arrays if a.size] or [np.zeros(1)])
    low, high = float(np.min(values)), float(np.max(values))
    if high <= low:
        low, high = low - 1.0, high + 1.0
    return np.linspace(low, high, count + 1)


def reaction_time_histogram_png(*, reaction_ms: dict[str, np.ndarray], min_reaction_ms: float) -> bytes:
    """Histogram of reaction times (ms, phase-D onset to click), pc and mobile overlaid, with the
    study's fast-click threshold as a dashed line."""
    figure = Figure(figsize=(6.4, 3.4))
    axes = figure.add_subplot()
    arrays = [np.asarray(v, dtype=np.float64) for v in reaction_ms.values()]
    _histogram(axes, reaction_ms, bins=_bins(arrays + [np.array([float(min_reaction_ms)])]))
    axes.axvline(
        min_reaction_ms, color=INVALID_COLOUR, linestyle="--", label=f"fast < {min_reaction_ms:g} ms"
    )
    axes.set_xlabel("reaction time (ms)")
    axes.set_ylabel("clicks")
    axes.set_title("Reaction times")
    if not any(a.size for a in arrays):
        axes.text(0.5, 0.5, "no clicks yet", transform=axes.transAxes, ha="center", color="grey")
    axes.legend(fontsize=8)
    figure.tight_layout()
    return _png(figure)


def phase_timing_histogram_png(
    *, durations_ms: dict[str, dict[str, np.ndarray]], nominal_ms: dict[str, int]
) -> bytes:
    """One histogram per phase (A, B, C) of measured durations (ms) by device, with the nominal
    duration as a dashed line: drift shows as mass away from the line."""
    phases = [p for p in ("A", "B", "C") if p in nominal_ms]
    figure = Figure(figsize=(9.6, 3.2))
    names = {"A": "A image", "B": "B target", "C": "C blocked"}
    for index, phase in enumerate(phases, start=1):
        axes = figure.add_subplot(1, len(phases), index)
        by_device = durations_ms.get(phase, {})
        nominal = float(nominal_ms[phase])
        arrays = [np.asarray(v, dtype=np.float64) for v in by_device.values()]
        _histogram(
            axes, by_device, bins=_bins(arrays + [np.array([nominal - 20.0, nominal + 20.0])], count=20)
        )
        axes.axvline(nominal, color="black", linestyle="--", label=f"nominal {nominal:g}")
        axes.set_title(f"phase {names.get(phase, phase)}")
        axes.set_xlabel("measured duration (ms)")
        if index == 1:
            axes.set_ylabel("trials")
        if not any(a.size for a in arrays):
            axes.text(0.5, 0.5, "no trials yet", transform=axes.transAxes, ha="center", color="grey")
        axes.legend(fontsize=7)
    figure.tight_layout()
    return _png(figure)


def device_comparison_png(*, comparison: dict[str, dict]) -> bytes:
    """pc vs mobile side by side: valid-click rate, counted-session rate (both %) and median reaction
    time (ms). ``comparison`` is :func:`collector.selectors.timing.study_device_comparison`'s output."""
    figure = Figure(figsize=(9.6, 3.2))
    panels = [
        ("valid_rate", "valid clicks (%)", 100.0),
        ("counted_rate", "counted sessions (%)", 100.0),
        ("median_reaction_ms", "median reaction (ms)", 1.0),
    ]
    devices = [d for d in DEVICE_COLOURS if d in comparison]
    for index, (key, label, factor) in enumerate(panels, start=1):
        axes = figure.add_subplot(1, len(panels), index)
        values = [comparison[d].get(key) for d in devices]
        heights = [v * factor if v is not None else 0.0 for v in values]
        bars = axes.bar(devices, heights, color=[DEVICE_COLOURS[d] for d in devices])
        for bar, value in zip(bars, values, strict=True):
            text = "n/a" if value is None else f"{value * factor:.0f}"
            axes.annotate(
                text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom"
            )
        axes.set_title(label)
        if factor == 100.0:
            axes.set_ylim(0, 110)
    figure.suptitle("pc vs mobile")
    figure.tight_layout()
    return _png(figure)
