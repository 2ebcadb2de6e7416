"""Image checks and arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

from segmenters.base import SegmenterError
from segmenters.images import image_sha256, resized_long_side, validate_image


@pytest.mark.parametrize(
    ("image", "message"),
    [
        (np.zeros((4, 4), np.uint8), r"shape \(4, 4\)"),
        (np.zeros((4, 4, 4), np.uint8), r"shape \(4, 4, 4\)"),
        (np.zeros((4, 4, 3), np.float32), "dtype float32"),
        ([[0, 0, 0]], "numpy array"),
    ],
)
def test_invalid_images_are_rejected_with_what_is_wrong(image, message):
    with pytest.raises(SegmenterError, match=message):
        validate_image(image)


def test_resized_long_side_rounds_half_up_like_sam():
    # 50 * 1024 / 80 = 640.0; 333 * 1024 / 500 = 681.98 -> 682; 3 * 1024 / 2048 = 1.5 -> 2
    assert resized_long_side(50, 80, 1024) == (640, 1024)
    assert resized_long_side(500, 333, 1024) == (1024, 682)
    assert resized_long_side(3, 2048, 1024) == (2, 1024)


def test_sha256_depends_on_pixels_and_shape():
    image = np.zeros((2, 6, 3), np.uint8)
    assert image_sha256(image) == image_sha256(image.copy())
    assert image_sha256(image) != image_sha256(np.zeros((6, 2, 3), np.uint8))
