"""#15.6: the cheaper per-click paths give the very same numbers as the plain full-image ones."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from benchmark import clickers
from benchmark.clickers import deepest_point, group_band, padded_distance, sample_group_pixel
from benchmark.metrics import InstanceIoU, iou


def _plain_sample(weights, low, high, rng):
    """The former full-image implementation (group band + Generator.choice over every pixel)."""
    if not np.any(weights > 0):
        return None
    banded = np.where(group_band(weights, low=low, high=high), weights, 0.0).astype(np.float64).ravel()
    total = banded.sum()
    if not total > 0:
        return None
    flat = int(rng.choice(banded.size, p=banded / total))
    y, x = divmod(flat, weights.shape[1])
    return x, y


def _blobs(rng, height, width):
    canvas = np.zeros((height, width), np.uint8)
    for _ in range(int(rng.integers(1, 4))):
        centre = (int(rng.integers(0, width)), int(rng.integers(0, height)))
        axes = (int(rng.integers(1, width)), int(rng.integers(1, height)))
        cv2.ellipse(canvas, centre, axes, 0, 0, 360, 1, -1)
    return canvas.astype(bool) & (rng.random((height, width)) > 0.05)


def test_sparse_group_sampling_draws_exactly_what_the_full_image_choice_draws():
    rng = np.random.default_rng(3)
    draws = 0
    for trial in range(150):
        height, width = (int(v) for v in rng.integers(4, 90, 2))
        mask = _blobs(rng, height, width)
        kind = trial % 3
        if kind == 0:
            base = cv2.distanceTransform(mask.astype(np.uint8), cv2.DIST_L2, cv2.DIST_MASK_PRECISE)
        else:
            base = rng.random((height, width)) if kind == 1 else np.ones((height, width))
        weights = np.asarray(base, np.float64) * mask
        for low, high in ((0.0, 0.1), (0.3, 0.4), (0.9, 1.0), (0.0, 1.0), (0.0, 0.0), (1.0, 1.0)):
            seed = int(rng.integers(1 << 30))
            first, second = np.random.default_rng(seed), np.random.default_rng(seed)
            assert sample_group_pixel(weights, low=low, high=high, rng=first) == _plain_sample(
                weights, low, high, second
            )
            assert first.random() == second.random()  # and the streams stay in step
            draws += 1
    assert draws == 900


def test_deepest_point_on_the_box_is_the_full_image_argmax(monkeypatch):
    rng = np.random.default_rng(4)
    for _ in range(100):
        height, width = (int(v) for v in rng.integers(4, 90, 2))
        mask = _blobs(rng, height, width) if rng.random() > 0.1 else np.zeros((height, width), bool)
        not_clicked = rng.random((height, width)) > 0.03
        full = padded_distance(mask)  # one transform for both (OpenCV's may differ by an ulp between calls)
        monkeypatch.setattr(clickers, "padded_distance", lambda _mask, full=full: full)
        values = full * not_clicked
        flat = int(np.argmax(values))
        expected = (float(values.max()), (flat % width, flat // width))
        assert deepest_point(mask, not_clicked) == expected


def test_instance_iou_equals_the_plain_iou():
    rng = np.random.default_rng(5)
    for _ in range(200):
        height, width = (int(v) for v in rng.integers(2, 60, 2))
        gt = _blobs(rng, height, width) if rng.random() > 0.1 else np.zeros((height, width), bool)
        ignore = (
            (rng.random((height, width)) > 0.9) if rng.random() > 0.3 else np.zeros((height, width), bool)
        )
        measure = InstanceIoU(gt, ignore)
        for _ in range(3):
            pred = _blobs(rng, height, width) if rng.random() > 0.1 else np.zeros((height, width), bool)
            assert measure(pred) == iou(pred, gt, ignore)
    with pytest.raises(ValueError, match=r"prediction shape \(2, 2\)"):
        InstanceIoU(np.zeros((3, 3), bool))(np.zeros((2, 2), bool))
