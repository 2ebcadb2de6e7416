"""Baseline click models of RClicks protocol §3.3: uniform (UD), distance transform (DT), saliency (SM/SI).

All return float32 (H, W) maps that are zero outside the error mask E and all-zero when E is empty
(the reference SM/SI crash there, protocol §8 item 13).

The saliency baseline needs no downloaded weights: TranSalNet is replaced by spectral-residual saliency
(Hou & Zhang, CVPR 2007) computed on the same 1.4× crop around E; SM paints the crop gray (0.5) outside E,
SI keeps the crop as is. Numbers therefore differ from the paper's SM/SI rows.
"""

from __future__ import annotations

import cv2
import numpy as np
from scipy.ndimage import gaussian_filter, uniform_filter

from benchmark.clickability.click_model import ClickModel, check_inputs
from benchmark.distance import box_distance, mask_box

CROP_EXPANSION = 1.4
SALIENCY_LONG_SIDE_PX = 64
SALIENCY_BLUR_SIGMA_PX = 3.0  # at the 64-px working scale
GRAY_OUTSIDE = 0.5
# keeps exact spectral zeros (flat crops, e.g. SM's gray fill) from dominating the log-amplitude residual
LOG_AMPLITUDE_EPS = 1e-3


class UniformClickModel(ClickModel):
    """UD: E / max(E) — every pixel of the error region equally likely."""

    name = "ud"

    def predict_map(self, image: np.ndarray, gt_mask: np.ndarray, error_mask: np.ndarray) -> np.ndarray:
        check_inputs(image, gt_mask, error_mask)
        return error_mask.astype(np.float32)


class DistanceTransformClickModel(ClickModel):
    """DT: exact Euclidean distance to the nearest non-E pixel, divided by its maximum.

    No 1-px padding (unlike the benchmark clicker), so the image border is not a boundary. The
    transform is :mod:`benchmark.distance`'s (correctly rounded, on E's box, shared with the clicker's
    transform of the same region in the same round); the reference calls OpenCV's
    ``DIST_MASK_PRECISE``, which differs by an ulp on about 1.5e-4 of the pixels.
    """

    name = "dt"

    def predict_map(self, image: np.ndarray, gt_mask: np.ndarray, error_mask: np.ndarray) -> np.ndarray:
        check_inputs(image, gt_mask, error_mask)
        mask = error_mask.astype(bool, copy=False)
        box = mask_box(mask)  # found once: no full-image any()/all() passes besides it
        out = np.zeros(mask.shape, dtype=np.float32)
        if box is None:
            return out
        y0, y1, x0, x1 = box
        if y1 - y0 == mask.shape[0] and x1 - x0 == mask.shape[1] and mask.all():
            # no background pixel to measure from: OpenCV would return huge values; treat as uniform
            out.fill(1.0)
            return out
        found = box_distance(mask, border=False, box=box)
        assert found is not None  # box is not None
        distance = found[0]
        np.divide(distance, distance.max(), out=out[y0:y1, x0:x1])  # float32 / float32, zero off E
        return out


def expanded_box(mask: np.ndarray, *, expansion: float = CROP_EXPANSION) -> tuple[int, int, int, int]:
    """(x0, y0, x1, y1), exclusive ends: bbox of ``mask`` scaled by ``expansion`` about its centre, clipped."""
    box = mask_box(mask)
    if box is None:
        raise ValueError("expanded_box: empty mask")
    top, bottom, left, right = box
    height, width = mask.shape
    box_w, box_h = right - left, bottom - top
    centre_x, centre_y = (left + right) / 2.0, (top + bottom) / 2.0
    new_w, new_h = int(box_w * expansion), int(box_h * expansion)
    x0 = int(centre_x - new_w / 2.0)
    y0 = int(centre_y - new_h / 2.0)
    return max(0, x0), max(0, y0), min(width, x0 + new_w), min(height, y0 + new_h)


def spectral_residual_saliency(gray: np.ndarray) -> np.ndarray:
    """Spectral-residual saliency of a float (h, w) image in [0, 1]; float32 (h, w), peak 1.

    Works at long side 64 px: log amplitude minus its 3×3 local mean, back-transformed with the original
    phase, squared, Gaussian-smoothed, resized to (h, w).
    """
    height, width = gray.shape
    scale = SALIENCY_LONG_SIDE_PX / max(height, width)
    small_w, small_h = max(1, round(width * scale)), max(1, round(height * scale))
    small = cv2.resize(gray.astype(np.float32), (small_w, small_h), interpolation=cv2.INTER_AREA)
    spectrum = np.fft.fft2(small)
    log_amplitude = np.log(np.abs(spectrum) + LOG_AMPLITUDE_EPS)
    residual = log_amplitude - uniform_filter(log_amplitude, size=3, mode="nearest")
    saliency = np.abs(np.fft.ifft2(np.exp(residual + 1j * np.angle(spectrum)))) ** 2
    saliency = gaussian_filter(saliency, sigma=SALIENCY_BLUR_SIGMA_PX)
    saliency = cv2.resize(saliency.astype(np.float32), (width, height), interpolation=cv2.INTER_LINEAR)
    peak = saliency.max()
    return saliency / peak if peak > 0 else np.ones_like(saliency)


class SpectralSaliencyClickModel(ClickModel):
    """SM (``gray_outside=True``) / SI: weight-free saliency on the 1.4× crop around E.

    Steps: bbox of E scaled 1.4× about its centre; crop (SM: pixels outside E set to gray 0.5); saliency of
    the crop's luminance; multiply by E; normalise to sum 1 (E itself if the product sums to 0); paste
    into a zero (H, W) map.
    """

    def __init__(self, *, gray_outside: bool = True) -> None:
        self.gray_outside = gray_outside
        self.name = "sm" if gray_outside else "si"

    def predict_map(self, image: np.ndarray, gt_mask: np.ndarray, error_mask: np.ndarray) -> np.ndarray:
        check_inputs(image, gt_mask, error_mask)
        out = np.zeros(error_mask.shape, dtype=np.float32)
        if not error_mask.any():
            return out
        x0, y0, x1, y1 = expanded_box(error_mask)
        crop = image[y0:y1, x0:x1].astype(np.float32) / 255.0
        crop_e = error_mask[y0:y1, x0:x1]
        if self.gray_outside:
            crop = np.where(crop_e[..., None], crop, GRAY_OUTSIDE)
        luminance = crop @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
        weights = spectral_residual_saliency(luminance) * crop_e
        total = weights.sum()
        if total <= 0:
            weights, total = crop_e.astype(np.float32), float(crop_e.sum())
        out[y0:y1, x0:x1] = weights / total
        return out
