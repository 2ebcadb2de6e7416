"""collector.charts: the pictures decode, and their pixels show what they claim."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image as PILImage

from collector import charts


def _decode(png: bytes) -> np.ndarray:
    return np.asarray(PILImage.open(io.BytesIO(png)).convert("RGB")).astype(np.int32)


def test_click_density_peaks_at_the_clicks():
    density = charts.click_density(
        xs=np.array([10.2, 10.7, 30.0, -5.0]),
        ys=np.array([5.0, 5.9, 20.0, 3.0]),
        height=40,
        width=50,
        sigma_px=0,
    )
    assert density.shape == (40, 50) and density.max() == 1.0
    assert density[5, 10] == 1.0 and density[20, 30] == 0.5  # two clicks in one pixel, one in another
    assert density.sum() == pytest.approx(1.5)  # the click at x=-5 is outside the image and dropped
    smooth = charts.click_density(xs=np.array([25.0]), ys=np.array([20.0]), height=40, width=50, sigma_px=3)
    assert np.unravel_index(smooth.argmax(), smooth.shape) == (20, 25)


def _count_near(rgb: np.ndarray, colour: str, tolerance: int = 40) -> int:
    target = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)])
    return int((np.abs(rgb - target).max(axis=2) < tolerance).sum())


def test_heatmap_draws_devices_invalid_clicks_and_region_in_their_colours():
    image = np.full((120, 160, 3), 90, dtype=np.uint8)
    region = np.zeros((120, 160), dtype=bool)
    region[40:80, 50:110] = True
    clicks = [
        {"x": 70.0, "y": 60.0, "device": "pc", "is_valid": True},
        {"x": 90.0, "y": 55.0, "device": "mobile", "is_valid": None},
        {"x": 5.0, "y": 5.0, "device": "pc", "is_valid": False},
    ]
    with_clicks = _decode(charts.target_heatmap_png(image=image, region=region, clicks=clicks, title="t"))
    without = _decode(charts.target_heatmap_png(image=image, region=region, clicks=[], title="t"))
    for colour in (charts.DEVICE_COLOURS["pc"], charts.DEVICE_COLOURS["mobile"], charts.INVALID_COLOUR):
        assert _count_near(with_clicks, colour) > 8, colour
        assert _count_near(without, colour) == 0, colour
    assert _count_near(without, charts.REGION_COLOUR) > 50


def test_heatmap_refuses_mismatched_region():
    with pytest.raises(ValueError, match=r"region has shape \(10, 10\)"):
        charts.target_heatmap_png(
            image=np.zeros((20, 20, 3), np.uint8), region=np.zeros((10, 10), bool), clicks=[]
        )


def test_histograms_and_comparison_render_with_and_without_data():
    empty = {"pc": np.zeros(0), "mobile": np.zeros(0)}
    data = {"pc": np.array([300.0, 420.0, 500.0]), "mobile": np.array([600.0, 650.0])}
    for reaction in (empty, data):
        rgb = _decode(charts.reaction_time_histogram_png(reaction_ms=reaction, min_reaction_ms=150))
        assert rgb.shape == (340, 640, 3)
    with_data = _decode(charts.reaction_time_histogram_png(reaction_ms=data, min_reaction_ms=150))
    # bars are drawn at alpha 0.55 on white
    orange = np.array([int(charts.DEVICE_COLOURS["mobile"][i : i + 2], 16) for i in (1, 3, 5)])
    blended = "#" + "".join(f"{round(0.55 * c + 0.45 * 255):02x}" for c in orange)
    assert _count_near(with_data, blended, 12) > 100
    assert (
        _count_near(
            _decode(charts.reaction_time_histogram_png(reaction_ms=empty, min_reaction_ms=150)), blended, 12
        )
        == 0
    )
    phases = {"A": {"pc": np.array([1500.0, 1517.0])}, "B": {}, "C": {"mobile": np.array([1490.0])}}
    png = charts.phase_timing_histogram_png(durations_ms=phases, nominal_ms={"A": 1500, "B": 2000, "C": 1500})
    assert _decode(png).shape == (320, 960, 3)
    comparison = {
        "pc": {"valid_rate": 0.9, "counted_rate": 1.0, "median_reaction_ms": 450.0},
        "mobile": {"valid_rate": None, "counted_rate": None, "median_reaction_ms": None},
    }
    rgb = _decode(charts.device_comparison_png(comparison=comparison))
    assert _count_near(rgb, charts.DEVICE_COLOURS["pc"], 10) > 500
