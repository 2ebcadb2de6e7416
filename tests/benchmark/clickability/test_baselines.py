"""Baseline click models UD, DT, SM, SI (protocol §3.3)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmark.clickability.baselines import (
    DistanceTransformClickModel,
    SpectralSaliencyClickModel,
    UniformClickModel,
    expanded_box,
    spectral_residual_saliency,
)


def _scene(height=64, width=80):
    rng = np.random.default_rng(0)
    image = rng.integers(0, 255, size=(height, width, 3), dtype=np.uint8)
    gt = np.zeros((height, width), dtype=bool)
    gt[16:48, 20:60] = True
    return image, gt


def test_uniform_is_the_error_mask():
    image, gt = _scene()
    result = UniformClickModel().predict_map(image, gt, gt)
    assert result.dtype == np.float32
    np.testing.assert_array_equal(result, gt.astype(np.float32))


def test_distance_transform_by_hand():
    error = np.zeros((11, 11), dtype=bool)
    error[2:9, 2:9] = True  # 7x7 square: the centre is 4 px from the nearest outside pixel
    image = np.zeros((11, 11, 3), dtype=np.uint8)
    result = DistanceTransformClickModel().predict_map(image, error, error)
    assert result[5, 5] == pytest.approx(1.0)
    assert result[2, 5] == pytest.approx(0.25)
    assert result[0, 0] == 0.0


def test_distance_transform_does_not_treat_the_image_border_as_boundary():
    error = np.zeros((10, 10), dtype=bool)
    error[:, :5] = True  # touches the left image border
    result = DistanceTransformClickModel().predict_map(np.zeros((10, 10, 3), np.uint8), error, error)
    assert result[5, 0] == pytest.approx(1.0)  # 5 px from column 5, the only boundary
    assert result[5, 4] == pytest.approx(0.2)


def test_expanded_box_by_hand():
    mask = np.zeros((100, 100), dtype=bool)
    mask[20:30, 10:20] = True  # 10x10 box centred at (15, 25) -> 14x14
    assert expanded_box(mask) == (8, 18, 22, 32)
    edge = np.zeros((100, 100), dtype=bool)
    edge[0:10, 0:10] = True
    assert expanded_box(edge) == (0, 0, 12, 12)  # centre 5, half-width 7 -> starts at -2, clipped to 0
    odd = np.zeros((100, 100), dtype=bool)
    odd[40:43, 60:65] = True  # 5x3 box centred at (62.5, 41.5) -> 7x4
    assert expanded_box(odd) == (59, 39, 66, 43)
    with pytest.raises(ValueError, match="empty mask"):
        expanded_box(np.zeros((4, 4), dtype=bool))


@pytest.mark.parametrize("gray_outside", [True, False])
def test_saliency_maps_are_distributions_inside_the_error_mask(gray_outside):
    image, gt = _scene()
    result = SpectralSaliencyClickModel(gray_outside=gray_outside).predict_map(image, gt, gt)
    assert result.sum() == pytest.approx(1.0, rel=1e-5)
    assert result[~gt].max() == 0.0
    assert (result[gt] >= 0).all()


def test_sm_ignores_pixels_outside_the_error_mask_but_si_does_not():
    image, gt = _scene()
    changed = image.copy()
    changed[10:16, 14:66] = 255  # inside the 1.4x crop, outside E
    sm, si = SpectralSaliencyClickModel(gray_outside=True), SpectralSaliencyClickModel(gray_outside=False)
    np.testing.assert_array_equal(sm.predict_map(image, gt, gt), sm.predict_map(changed, gt, gt))
    assert not np.array_equal(si.predict_map(image, gt, gt), si.predict_map(changed, gt, gt))


def test_spectral_residual_highlights_an_odd_spot():
    gray = np.full((64, 64), 0.5, dtype=np.float32)
    gray[40:44, 12:16] = 1.0
    saliency = spectral_residual_saliency(gray)
    assert saliency[42, 14] > 4 * np.median(saliency)
    noisy = np.clip(0.5 + 0.05 * np.random.default_rng(0).normal(size=(64, 64)), 0, 1).astype(np.float32)
    noisy[40:44, 12:16] = 1.0
    peak = np.unravel_index(spectral_residual_saliency(noisy).argmax(), noisy.shape)
    assert abs(peak[0] - 42) <= 2 and abs(peak[1] - 14) <= 2


@pytest.mark.parametrize(
    "model",
    [
        UniformClickModel(),
        DistanceTransformClickModel(),
        SpectralSaliencyClickModel(),
        SpectralSaliencyClickModel(gray_outside=False),
    ],
)
def test_empty_error_mask_gives_zero_map_without_crashing(model):
    image, gt = _scene()
    result = model.predict_map(image, gt, np.zeros_like(gt))
    assert result.shape == gt.shape and result.max() == 0.0


def test_shape_mismatch_names_the_shapes():
    image, gt = _scene()
    with pytest.raises(ValueError, match="must match the image size"):
        UniformClickModel().predict_map(image, gt[:10], gt)


@pytest.mark.dataset
def test_baselines_on_grabcut_images(grabcut_root):
    from benchmark.datasets import open_dataset

    dataset = open_dataset(grabcut_root, "grabcut")
    for sample in dataset.samples[:3]:
        image = sample.load_image()
        gt, ignore = sample.load_masks()
        error = gt & ~ignore
        for model in (UniformClickModel(), DistanceTransformClickModel(), SpectralSaliencyClickModel()):
            result = model.predict_map(image, gt, error)
            assert result.shape == gt.shape, (sample.key, model.name)
            assert result[~error].max() == 0.0 and result.sum() > 0, (sample.key, model.name)
