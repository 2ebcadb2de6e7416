"""Input checks and image arithmetic shared by the predictors (numpy/OpenCV only)."""

from __future__ import annotations

import hashlib

import numpy as np

from segmenters.base import SegmenterError


def validate_image(image: np.ndarray) -> None:
    """Fail fast unless ``image`` is (H, W, 3) uint8 RGB with H, W >= 1."""
    if not isinstance(image, np.ndarray):
        raise SegmenterError(
            f"image must be a numpy array of shape (H, W, 3) uint8 RGB, got {type(image).__name__}"
        )
    if image.ndim != 3 or image.shape[2] != 3 or image.shape[0] < 1 or image.shape[1] < 1:
        raise SegmenterError(
            f"image has shape {image.shape}; expected (H, W, 3) RGB (convert greyscale/RGBA images first)"
        )
    if image.dtype != np.uint8:
        raise SegmenterError(f"image has dtype {image.dtype}; expected uint8 RGB in 0..255")


def image_sha256(image: np.ndarray) -> str:
    """sha256 of the decoded pixels and their shape (so equal pixels in other files share a key)."""
    validate_image(image)
    digest = hashlib.sha256()
    digest.update(repr(image.shape).encode())
    digest.update(np.ascontiguousarray(image).tobytes())
    return digest.hexdigest()


def resized_long_side(height: int, width: int, long_side_px: int) -> tuple[int, int]:
    """(new_h, new_w) with the long side equal to ``long_side_px``: old * long_side / long, rounded."""
    scale = long_side_px / max(height, width)
    return int(height * scale + 0.5), int(width * scale + 0.5)
