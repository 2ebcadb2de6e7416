"""Ground-truth clickability maps built from real clicks (RClicks protocol §3.1).

A clickability map is float32 (H, W) at the loaded image size, peak ≤ 1, zero far from the error
region. It is *not* sum-normalised: sum normalisation happens in the KLD loss and in the metrics.

Construction for one task (clicks of all devices, image size H×W, error mask E):

1. σ_px = σ · √(H²+W²) / √(1920²+1080²) — σ is given for a 1080p frame (default σ = 5).
2. Add 255·2πσ_px²/N at each click pixel (N clicks; clicks on one pixel add up).
3. OpenCV Gaussian blur, std σ_px, kernel side ceil(7σ_px) made odd, zero (constant) border.
4. Divide by the maximum.
5. Soft error mask: SciPy ``gaussian_filter`` of E with σ_e (reflect border, truncate 4σ_e); no blur
   when σ_e = 0. σ_e is :class:`ErrorBlur`: ``"reference"`` = int(5·diag/(500·√2)) ≈ 0.707 % of the
   diagonal floored to an integer (what the released model was trained with, the default), ``"paper"``
   = 1 % of the diagonal (the radius of the UI click, as the paper states), or any float fraction.
6. Map = (soft E) · (step-4 map).

Maps are cached per task as ``<cache_dir>/<params>/<dataset>/<full_stem>.npy`` by
:class:`ClickabilityMapCache`; a sidecar digest of the inputs makes a changed CSV or mask rebuild the map.
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
from scipy.ndimage import gaussian_filter

DEFAULT_SIGMA = 5.0
REFERENCE_DIAGONAL_PX = math.hypot(1920.0, 1080.0)
PAPER_ERROR_BLUR_FRACTION = 0.01


def click_sigma_px(*, sigma: float, height: int, width: int) -> float:
    """σ of the click Gaussian in pixels of an H×W image; ``sigma`` is given for a 1080p frame."""
    return float(sigma) * math.hypot(height, width) / REFERENCE_DIAGONAL_PX


def _odd_kernel_side(sigma_px: float) -> int:
    side = max(1, math.ceil(7.0 * sigma_px))
    return side if side % 2 == 1 else side + 1


@dataclass(frozen=True)
class ErrorBlur:
    """σ_e of the soft error mask.

    ``rule``: ``"reference"`` (int(5·diag/(500√2)), the reference code), ``"paper"`` (0.01·diag) or
    ``"fraction"`` (``fraction``·diag).
    """

    rule: str = "reference"
    fraction: float = 0.0

    def __post_init__(self) -> None:
        if self.rule not in {"reference", "paper", "fraction"}:
            raise ValueError(f"ErrorBlur rule {self.rule!r}: use 'reference', 'paper' or a diagonal fraction")
        if self.rule == "fraction" and not (0.0 <= self.fraction < 1.0):
            raise ValueError(f"ErrorBlur fraction {self.fraction} must be in [0, 1)")

    @classmethod
    def parse(cls, text: str | float | ErrorBlur) -> ErrorBlur:
        """``"reference"``, ``"paper"`` or a number (fraction of the diagonal, e.g. ``0.01``)."""
        if isinstance(text, ErrorBlur):
            return text
        if isinstance(text, str) and text in {"reference", "paper"}:
            return cls(rule=text)
        try:
            value = float(text)
        except ValueError:
            raise ValueError(
                f"error blur {text!r}: use 'reference', 'paper' or a fraction of the diagonal such as 0.01"
            ) from None
        return cls(rule="fraction", fraction=value)

    def sigma_px(self, *, height: int, width: int) -> float:
        diagonal = math.hypot(height, width)
        if self.rule == "reference":
            return float(int(5.0 * diagonal / (500.0 * math.sqrt(2.0))))
        if self.rule == "paper":
            return PAPER_ERROR_BLUR_FRACTION * diagonal
        return self.fraction * diagonal

    @property
    def tag(self) -> str:
        return self.rule if self.rule != "fraction" else f"frac{self.fraction:g}"


def soft_error_mask(error_mask: np.ndarray, *, blur: ErrorBlur) -> np.ndarray:
    """float32 (H, W) in [0, 1]: E blurred with σ_e (reflect border, truncate 4σ); E itself if σ_e = 0."""
    height, width = error_mask.shape
    sigma_e = blur.sigma_px(height=height, width=width)
    values = error_mask.astype(np.float32)
    if sigma_e <= 0:
        return values
    return gaussian_filter(values, sigma=sigma_e, mode="reflect", truncate=4.0)


def click_density(
    clicks_xy: np.ndarray, *, height: int, width: int, sigma: float = DEFAULT_SIGMA
) -> np.ndarray:
    """Steps 1-4: blurred click histogram, float32 (H, W), peak 1.

    ``clicks_xy``: (n, 2) float (x, y) pixels of the loaded image; floored and clipped into the image.
    """
    points = np.asarray(clicks_xy, dtype=np.float64)
    if points.ndim != 2 or points.shape[1] != 2 or len(points) == 0:
        raise ValueError(f"click_density needs an (n, 2) array with n ≥ 1 clicks, got shape {points.shape}")
    sigma_px = click_sigma_px(sigma=sigma, height=height, width=width)
    cols = np.clip(np.floor(points[:, 0]).astype(np.int64), 0, width - 1)
    rows = np.clip(np.floor(points[:, 1]).astype(np.int64), 0, height - 1)
    histogram = np.zeros((height, width), dtype=np.float64)
    np.add.at(histogram, (rows, cols), 255.0 * 2.0 * math.pi * sigma_px**2 / len(points))
    side = _odd_kernel_side(sigma_px)
    blurred: np.ndarray = cv2.GaussianBlur(  # float64, as the histogram
        histogram, (side, side), sigmaX=sigma_px, sigmaY=sigma_px, borderType=cv2.BORDER_CONSTANT
    )
    peak = blurred.max()
    if peak > 0:
        blurred /= peak
    return blurred.astype(np.float32)


def clickability_map(
    clicks_xy: np.ndarray,
    *,
    error_mask: np.ndarray,
    sigma: float = DEFAULT_SIGMA,
    error_blur: ErrorBlur | str = "reference",
) -> np.ndarray:
    """The GT clickability map of one task: float32 (H, W) = soft(E) · click density (see module doc).

    ``error_mask``: bool (H, W), E of the task (first: object; fn: M∧¬P; fp: ¬M∧P).
    """
    height, width = error_mask.shape
    density = click_density(clicks_xy, height=height, width=width, sigma=sigma)
    return (soft_error_mask(error_mask, blur=ErrorBlur.parse(error_blur)) * density).astype(np.float32)


# --------------------------------------------------------------------------------------------------
# On-disk cache
# --------------------------------------------------------------------------------------------------


def _digest(clicks_xy: np.ndarray, error_mask: np.ndarray) -> str:
    hasher = hashlib.sha256()
    hasher.update(np.ascontiguousarray(clicks_xy, dtype=np.float64).tobytes())
    hasher.update(np.asarray(error_mask.shape, dtype=np.int64).tobytes())
    hasher.update(np.packbits(np.ascontiguousarray(error_mask, dtype=bool)).tobytes())
    return hasher.hexdigest()


class ClickabilityMapCache:
    """Per-task GT maps on disk: ``<cache_dir>/sigma<σ>_eblur-<rule>/<dataset>/<full_stem>.npy``.

    The sidecar ``<full_stem>.sha256`` holds the digest of the clicks and E the map was built from; a
    mismatch (changed CSV, changed previous mask) rebuilds the map. Writes go through a temporary file and
    an atomic rename, so concurrent workers never read half a file.
    """

    def __init__(
        self,
        cache_dir: str | Path,
        *,
        sigma: float = DEFAULT_SIGMA,
        error_blur: ErrorBlur | str = "reference",
    ):
        self.sigma = float(sigma)
        self.error_blur = ErrorBlur.parse(error_blur)
        self.root = Path(cache_dir) / f"sigma{self.sigma:g}_eblur-{self.error_blur.tag}"
        self.hits = 0
        self.builds = 0

    def path_for(self, *, dataset: str, full_stem: str) -> Path:
        return self.root / dataset / f"{full_stem}.npy"

    def get_or_build(
        self, *, dataset: str, full_stem: str, clicks_xy: np.ndarray, error_mask: np.ndarray
    ) -> np.ndarray:
        """The task's map, from disk when its digest matches, else built and stored. float32 (H, W)."""
        path = self.path_for(dataset=dataset, full_stem=full_stem)
        digest_path = path.with_suffix(".sha256")
        digest = _digest(clicks_xy, error_mask)
        if path.is_file() and digest_path.is_file() and digest_path.read_text().strip() == digest:
            cached = np.load(path)
            if cached.shape == error_mask.shape:
                self.hits += 1
                return cached
        built = clickability_map(
            clicks_xy, error_mask=error_mask, sigma=self.sigma, error_blur=self.error_blur
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as handle:
            np.save(handle, built)
        os.replace(tmp, path)
        digest_tmp = digest_path.with_name(f".{digest_path.name}.{os.getpid()}.tmp")
        digest_tmp.write_text(digest)
        os.replace(digest_tmp, digest_path)
        self.builds += 1
        return built
