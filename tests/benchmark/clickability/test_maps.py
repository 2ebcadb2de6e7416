"""GT clickability maps (protocol §3.1) and their on-disk cache."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmark.clickability.maps import (
    ClickabilityMapCache,
    ErrorBlur,
    click_density,
    click_sigma_px,
    clickability_map,
    soft_error_mask,
)


def test_click_sigma_is_given_for_a_1080p_frame():
    assert click_sigma_px(sigma=5, height=1080, width=1920) == pytest.approx(5.0)
    assert click_sigma_px(sigma=5, height=540, width=960) == pytest.approx(2.5)


def test_error_blur_rules():
    # 640x480: diagonal 800; reference: int(5*800/(500*sqrt 2)) = int(5.657) = 5; paper: 1% = 8
    assert ErrorBlur.parse("reference").sigma_px(height=480, width=640) == 5.0
    assert ErrorBlur.parse("paper").sigma_px(height=480, width=640) == pytest.approx(8.0)
    assert ErrorBlur.parse("0.02").sigma_px(height=480, width=640) == pytest.approx(16.0)
    assert ErrorBlur.parse("reference").sigma_px(height=60, width=80) == 0.0  # small image: no blur
    with pytest.raises(ValueError, match="reference"):
        ErrorBlur.parse("lots")


def test_click_density_is_a_gaussian_with_peak_one():
    height, width = 108, 192  # sigma_px = 5 * 0.1 * 2 = 1.0 for sigma=10
    density = click_density(np.array([[96.0, 54.0]]), height=height, width=width, sigma=10)
    sigma_px = click_sigma_px(sigma=10, height=height, width=width)
    assert sigma_px == pytest.approx(1.0)
    assert density.max() == pytest.approx(1.0)
    assert np.unravel_index(density.argmax(), density.shape) == (54, 96)
    for dx in (1, 2):
        assert density[54, 96 + dx] == pytest.approx(math.exp(-(dx**2) / (2 * sigma_px**2)), rel=2e-2)
    assert density[54, 96 + 5] == 0.0  # kernel side ceil(7*1) = 7: support ends at 3 px


def test_clicks_on_one_pixel_add_up():
    clicks = np.array([[20.0, 20.0], [20.0, 20.0], [60.0, 20.0]])
    density = click_density(clicks, height=40, width=80, sigma=20)
    assert density[20, 20] == pytest.approx(1.0)
    assert density[20, 60] == pytest.approx(0.5, rel=1e-6)


def test_blur_border_is_zero_not_reflected():
    density_edge = click_density(np.array([[1.0, 20.0]]), height=40, width=80, sigma=20)
    density_mid = click_density(np.array([[40.0, 20.0]]), height=40, width=80, sigma=20)
    # with a reflecting border the pixel next to the edge would gain mass from the mirrored click
    assert density_edge[20, 0] / density_edge[20, 1] == pytest.approx(
        density_mid[20, 39] / density_mid[20, 40], rel=1e-6
    )


def test_clickability_map_is_soft_error_mask_times_density():
    height, width = 480, 640
    error = np.zeros((height, width), dtype=bool)
    error[100:300, 200:400] = True
    clicks = np.array([[300.0, 200.0], [310.0, 190.0], [250.0, 150.0]])
    result = clickability_map(clicks, error_mask=error)
    expected = soft_error_mask(error, blur=ErrorBlur()) * click_density(clicks, height=height, width=width)
    assert result.dtype == np.float32
    np.testing.assert_allclose(result, expected, rtol=1e-6)
    assert result.max() <= 1.0
    assert result[400:, :].max() == 0.0  # far below E: soft E is 0
    assert np.isclose(
        result[200, 300], click_density(clicks, height=height, width=width)[200, 300], rtol=1e-3
    )


def test_paper_error_blur_lets_more_mass_outside_the_mask():
    height, width = 480, 640
    error = np.zeros((height, width), dtype=bool)
    error[100:300, 200:400] = True
    clicks = np.array([[202.0, 200.0]] * 3)  # on the mask's left edge
    reference = clickability_map(clicks, error_mask=error, sigma=20, error_blur="reference")
    paper = clickability_map(clicks, error_mask=error, sigma=20, error_blur="paper")
    assert paper[200, 190] > reference[200, 190] > 0


def test_empty_error_mask_gives_a_zero_map_and_no_clicks_is_an_error():
    assert clickability_map(np.array([[3.0, 3.0]]), error_mask=np.zeros((10, 10), dtype=bool)).max() == 0.0
    with pytest.raises(ValueError, match="n ≥ 1"):
        clickability_map(np.zeros((0, 2)), error_mask=np.ones((10, 10), dtype=bool))


def test_cache_hits_and_rebuilds_on_changed_inputs(tmp_path):
    cache = ClickabilityMapCache(tmp_path, sigma=5, error_blur="paper")
    error = np.zeros((50, 60), dtype=bool)
    error[10:40, 10:50] = True
    clicks = np.array([[20.0, 20.0], [30.0, 25.0]])
    built = cache.get_or_build(dataset="GrabCut", full_stem="x_sam_fn", clicks_xy=clicks, error_mask=error)
    path = tmp_path / "sigma5_eblur-paper" / "GrabCut" / "x_sam_fn.npy"
    assert path.is_file()
    again = cache.get_or_build(dataset="GrabCut", full_stem="x_sam_fn", clicks_xy=clicks, error_mask=error)
    assert (cache.builds, cache.hits) == (1, 1)
    np.testing.assert_array_equal(built, again)
    moved = cache.get_or_build(
        dataset="GrabCut", full_stem="x_sam_fn", clicks_xy=clicks + 5, error_mask=error
    )
    assert cache.builds == 2
    assert not np.array_equal(moved, built)
    np.testing.assert_array_equal(np.load(path), moved)


@pytest.mark.dataset
def test_map_on_a_grabcut_image(grabcut_root):
    from benchmark.datasets import open_dataset

    dataset = open_dataset(grabcut_root, "grabcut")
    sample = next(s for s in dataset.samples if s.key.image_stem == "sheep")
    image = sample.load_image()
    gt, ignore = sample.load_masks()
    error = gt & ~ignore
    rows, cols = np.nonzero(error)
    centre = np.array([[cols.mean(), rows.mean()]])
    clicks = centre + np.random.default_rng(0).normal(0, 3, size=(30, 2))
    result = clickability_map(clicks, error_mask=error)
    assert result.shape == image.shape[:2]
    assert 0.0 < result.max() <= 1.0
    peak_row, peak_col = np.unravel_index(result.argmax(), result.shape)
    assert math.hypot(peak_col - centre[0, 0], peak_row - centre[0, 1]) < 15
    far = ~soft_error_mask(error, blur=ErrorBlur()).astype(bool)
    assert result[far].max() == 0.0
