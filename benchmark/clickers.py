"""Simulated users: where the next click goes, given the GT and the current prediction.

Every clicker follows one small protocol (:class:`Clicker`): ``start(...)`` begins a trajectory on
one instance, ``next_clicks(pred)`` returns the clicks of the next round (an empty list ends the
trajectory). Coordinates are ``Click(x, y, is_positive)`` with x = column, y = row, in pixels of the
loaded image. Masks are bool (H, W); ``ignore`` marks the band excluded from errors and IoU.

Clickers:

* :class:`BaselineClicker` -- RITM's rule exactly (protocol §5.2 steps 1-5).
* :class:`GroupClicker` -- one clicking group [low, high] of a clickability map (protocol §5.2 step 6).
* :class:`ReplayClicker` -- the recorded real first-round clicks, one per trajectory.
* :class:`AnnotatorSimulator` -- the seed-001 annotator: k clicks per round over error regions
  chosen with probability proportional to their area, regions below a minimum size ignored,
  region-centre or boundary clicks, N(0, sigma) click noise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import cv2
import numpy as np

from segmenters.base import Click

MapFn = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
"""``map_fn(image, gt_mask, error_mask) -> (H, W) float`` clickability map (any scale, >= 0)."""

DEFAULT_GROUP_BOUNDS: tuple[tuple[float, float], ...] = tuple((k / 10, (k + 1) / 10) for k in range(10))
"""The RClicks clicking groups G1..G10 as (low, high) mass fractions; G1 holds the least likely pixels."""


class ClickerError(RuntimeError):
    """A clicker was used out of order (the message says which call is missing)."""


def error_regions(*, gt: np.ndarray, ignore: np.ndarray, pred: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(false negatives, false positives) as bool (H, W), the ignore band excluded."""
    valid = ~ignore
    return gt & ~pred & valid, ~gt & pred & valid


def padded_distance(mask: np.ndarray) -> np.ndarray:
    """Exact L2 distance (px) of each ``mask`` pixel to the nearest non-mask pixel, float32 (H, W).

    A 1-px zero border is added first, so the image edge counts as a boundary (as in RITM).
    """
    padded = np.pad(mask.astype(np.uint8), 1)
    dist = cv2.distanceTransform(padded, cv2.DIST_L2, cv2.DIST_MASK_PRECISE)
    return dist[1:-1, 1:-1]


def _first_argmax_xy(values: np.ndarray) -> tuple[int, int]:
    # np.argmax returns the first maximum in row-major (C) order: RITM's tie-break.
    flat = int(np.argmax(values))
    y, x = divmod(flat, values.shape[1])
    return x, y


def baseline_click(*, gt: np.ndarray, ignore: np.ndarray, pred: np.ndarray, not_clicked: np.ndarray) -> Click:
    """RITM's next click: the deepest point of the larger error, first in row-major order.

    Positive iff max DT(fn) > max DT(fp) (strict, so a tie -- also 0 vs 0 when there is no error --
    gives a negative click, at (0, 0) if nothing is left, as RITM does).
    """
    fn, fp = error_regions(gt=gt, ignore=ignore, pred=pred)
    dist_fn = padded_distance(fn) * not_clicked
    dist_fp = padded_distance(fp) * not_clicked
    is_positive = bool(dist_fn.max() > dist_fp.max())
    x, y = _first_argmax_xy(dist_fn if is_positive else dist_fp)
    return Click(x=float(x), y=float(y), is_positive=is_positive)


def group_band(values: np.ndarray, *, low: float, high: float) -> np.ndarray:
    """Bool mask of the pixels of clicking group [low, high] of a non-negative map (protocol §5.2).

    Values are sorted ascending (zeros included) with cumulative sums c and total S; the band runs
    from the first value whose c >= low*S to the first whose c > high*S (capped at the last value),
    both ends inclusive, so neighbouring groups share their boundary value.
    """
    if not 0.0 <= low <= high <= 1.0:
        raise ValueError(f"Clicking group bounds low={low}, high={high} must satisfy 0 <= low <= high <= 1.")
    flat = values.ravel().astype(np.float64)
    ordered = np.sort(flat)
    cumulative = np.cumsum(ordered)
    total = cumulative[-1]
    last = len(ordered) - 1
    i_lo = min(int(np.searchsorted(cumulative, low * total, side="left")), last)
    i_hi = min(int(np.searchsorted(cumulative, high * total, side="right")), last)
    band = (flat >= ordered[i_lo]) & (flat <= ordered[i_hi])
    return band.reshape(values.shape)


def sample_group_pixel(
    weights: np.ndarray, *, low: float, high: float, rng: np.random.Generator
) -> tuple[int, int] | None:
    """(x, y) drawn with probability proportional to ``weights`` inside group [low, high], or None.

    None when the weights sum to zero (no mass left); the caller then falls back to the baseline.
    """
    if not np.any(weights > 0):
        return None
    banded = np.where(group_band(weights, low=low, high=high), weights, 0.0).astype(np.float64).ravel()
    total = banded.sum()
    if not total > 0:
        return None
    flat = int(rng.choice(banded.size, p=banded / total))
    y, x = divmod(flat, weights.shape[1])
    return x, y


class Clicker(Protocol):
    """What the engine and the session need from a simulated user."""

    name: str

    def start(self, *, image: np.ndarray, gt: np.ndarray, ignore: np.ndarray) -> None: ...

    def next_clicks(self, pred: np.ndarray) -> list[Click]: ...


class _TrajectoryState:
    """Per-trajectory GT, ignore band and the already-clicked pixels."""

    def __init__(self) -> None:
        self.gt: np.ndarray | None = None
        self.ignore: np.ndarray | None = None
        self.image: np.ndarray | None = None
        self.not_clicked: np.ndarray | None = None

    def begin(self, *, image: np.ndarray, gt: np.ndarray, ignore: np.ndarray) -> None:
        if gt.shape != ignore.shape or gt.shape != image.shape[:2]:
            raise ValueError(
                f"Clicker.start: image {image.shape[:2]}, gt {gt.shape} and ignore {ignore.shape} must share (H, W)."
            )
        self.image, self.gt, self.ignore = image, gt.astype(bool), ignore.astype(bool)
        self.not_clicked = np.ones(gt.shape, dtype=bool)

    def require(self, who: str) -> None:
        if self.gt is None:
            raise ClickerError(f"{who}.next_clicks called before start(image=..., gt=..., ignore=...).")

    def mark(self, click: Click) -> None:
        height, width = self.not_clicked.shape
        x = min(max(int(click.x), 0), width - 1)
        y = min(max(int(click.y), 0), height - 1)
        self.not_clicked[y, x] = False


class BaselineClicker:
    """RITM's deterministic clicker, one click per round."""

    name = "baseline"

    def __init__(self) -> None:
        self._state = _TrajectoryState()

    def start(self, *, image: np.ndarray, gt: np.ndarray, ignore: np.ndarray) -> None:
        self._state.begin(image=image, gt=gt, ignore=ignore)

    def next_clicks(self, pred: np.ndarray) -> list[Click]:
        state = self._state
        state.require("BaselineClicker")
        click = baseline_click(gt=state.gt, ignore=state.ignore, pred=pred, not_clicked=state.not_clicked)
        state.mark(click)
        return [click]


class GroupClicker:
    """Clicks sampled from one clicking group of a clickability map, one per round.

    Each round: the error type comes from the baseline rule (strict DT comparison); E = all fn
    (or fp) pixels; A = map_fn(image, gt, E) * E * not_clicked; the group band of A is recomputed
    and a pixel is drawn with probability proportional to A inside it. If A has no mass the
    baseline click of that error type is taken.

    Args:
      map_fn: ``(image, gt, E) -> (H, W)`` clickability map.
      low, high: the group's mass fractions, e.g. (0.9, 1.0) for G10.
      rng: the trajectory's random stream.
      first_round_map: optional precomputed ``map_fn(image, gt, gt & ~ignore)`` reused in round 1
        (identical for every group of an instance, so the engine computes it once).
    """

    def __init__(
        self,
        *,
        map_fn: MapFn,
        low: float,
        high: float,
        rng: np.random.Generator,
        first_round_map: np.ndarray | None = None,
        name: str | None = None,
    ) -> None:
        if not 0.0 <= low <= high <= 1.0:
            raise ValueError(
                f"GroupClicker bounds low={low}, high={high} must satisfy 0 <= low <= high <= 1."
            )
        self.map_fn, self.low, self.high, self.rng = map_fn, low, high, rng
        self.first_round_map = first_round_map
        self.name = name or f"group[{low:.2f},{high:.2f}]"
        self._state = _TrajectoryState()
        self._round = 0

    def start(self, *, image: np.ndarray, gt: np.ndarray, ignore: np.ndarray) -> None:
        self._state.begin(image=image, gt=gt, ignore=ignore)
        self._round = 0

    def next_clicks(self, pred: np.ndarray) -> list[Click]:
        state = self._state
        state.require("GroupClicker")
        self._round += 1
        fn, fp = error_regions(gt=state.gt, ignore=state.ignore, pred=pred)
        dist_fn = padded_distance(fn) * state.not_clicked
        dist_fp = padded_distance(fp) * state.not_clicked
        is_positive = bool(dist_fn.max() > dist_fp.max())
        region = fn if is_positive else fp
        if self._round == 1 and self.first_round_map is not None and not pred.any():
            raw_map = self.first_round_map
        else:
            raw_map = self.map_fn(state.image, state.gt, region)
        weights = np.asarray(raw_map, dtype=np.float64) * region * state.not_clicked
        picked = sample_group_pixel(weights, low=self.low, high=self.high, rng=self.rng)
        if picked is None:
            picked = _first_argmax_xy(dist_fn if is_positive else dist_fp)
        click = Click(x=float(picked[0]), y=float(picked[1]), is_positive=is_positive)
        state.mark(click)
        return [click]


class ReplayClicker:
    """Replays one recorded real first-round click as a one-click trajectory.

    ``clicks_xy``: (n, 2) float (x, y) in loaded-image pixels; trajectory j uses click j. Each
    click is clipped into the image (on a copy: the caller's array is never modified).
    """

    name = "user"

    def __init__(self, clicks_xy: np.ndarray) -> None:
        self.clicks_xy = np.array(clicks_xy, dtype=np.float64).reshape(-1, 2)
        self._index = -1
        self._given = True
        self._shape: tuple[int, int] | None = None

    def __len__(self) -> int:
        return len(self.clicks_xy)

    def start(self, *, image: np.ndarray, gt: np.ndarray, ignore: np.ndarray) -> None:
        """Begin the trajectory of the next recorded click."""
        self._index += 1
        if self._index >= len(self.clicks_xy):
            raise ClickerError(
                f"ReplayClicker has only {len(self.clicks_xy)} recorded clicks; all were replayed."
            )
        self._shape = gt.shape
        self._given = False

    def next_clicks(self, pred: np.ndarray) -> list[Click]:
        if self._shape is None:
            raise ClickerError("ReplayClicker.next_clicks called before start(...).")
        if self._given:
            return []
        self._given = True
        height, width = self._shape
        x, y = self.clicks_xy[self._index]
        return [
            Click(x=float(np.clip(x, 0, width - 1)), y=float(np.clip(y, 0, height - 1)), is_positive=True)
        ]


def _components(mask: np.ndarray, *, min_area_px: int) -> list[np.ndarray]:
    count, labels = cv2.connectedComponents(mask.astype(np.uint8), connectivity=8)
    regions = []
    for label in range(1, count):
        region = labels == label
        if int(region.sum()) >= min_area_px:
            regions.append(region)
    return regions


def _partition(region: np.ndarray, parts: int) -> list[np.ndarray]:
    """Split a region into ``parts`` pieces of about equal area along its principal axis."""
    ys, xs = np.nonzero(region)
    if parts <= 1 or len(xs) < parts:
        return [region]
    coords = np.stack([xs, ys], axis=1).astype(np.float64)
    centred = coords - coords.mean(axis=0)
    _, _, axes = np.linalg.svd(centred, full_matrices=False)
    order = np.argsort(centred @ axes[0], kind="stable")
    pieces = []
    for chunk in np.array_split(order, parts):
        piece = np.zeros_like(region)
        piece[ys[chunk], xs[chunk]] = True
        pieces.append(piece)
    return pieces


def _boundary_points(region: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """``parts`` boundary pixels splitting the region's outline into about equal lengths."""
    contours, _ = cv2.findContours(region.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
    outline = max(contours, key=len).reshape(-1, 2)  # (x, y) along the outer contour
    positions = (np.arange(parts) + 0.5) * len(outline) / parts
    return [tuple(int(v) for v in outline[int(p) % len(outline)]) for p in positions]


class AnnotatorSimulator:
    """The seed-001 simulated annotator (Benenson et al., 'Large-scale interactive object segmentation').

    Each round gives up to ``clicks_per_round`` clicks. Error regions are the 8-connected components
    of fn and fp with at least ``min_region_px`` pixels (the paper ignores regions smaller than x*x
    px). Each click picks a region with probability proportional to its area (with replacement);
    a region that gets m clicks is split into m parts of about equal area (``mode="center"``:
    each click at the deepest point of its part) or its outline into m equal arcs
    (``mode="boundary"``). Then N(0, noise_sigma_px) noise is added to x and y and the click is
    clipped into the image; its sign is that of the region it aimed at. No region left: [].
    """

    name = "annotator"

    def __init__(
        self,
        *,
        rng: np.random.Generator,
        noise_sigma_px: float = 3.0,
        min_region_px: int = 1,
        mode: str = "center",
        clicks_per_round: int = 3,
    ) -> None:
        if mode not in ("center", "boundary"):
            raise ValueError(f"AnnotatorSimulator mode={mode!r}: use 'center' or 'boundary'.")
        if clicks_per_round < 1:
            raise ValueError(f"AnnotatorSimulator clicks_per_round={clicks_per_round} must be >= 1.")
        if noise_sigma_px < 0:
            raise ValueError(f"AnnotatorSimulator noise_sigma_px={noise_sigma_px} must be >= 0.")
        self.rng, self.noise_sigma_px, self.min_region_px = (
            rng,
            float(noise_sigma_px),
            max(int(min_region_px), 1),
        )
        self.mode, self.clicks_per_round = mode, int(clicks_per_round)
        self._state = _TrajectoryState()

    def start(self, *, image: np.ndarray, gt: np.ndarray, ignore: np.ndarray) -> None:
        self._state.begin(image=image, gt=gt, ignore=ignore)

    def next_clicks(self, pred: np.ndarray) -> list[Click]:
        state = self._state
        state.require("AnnotatorSimulator")
        fn, fp = error_regions(gt=state.gt, ignore=state.ignore, pred=pred)
        regions = [(r, True) for r in _components(fn, min_area_px=self.min_region_px)]
        regions += [(r, False) for r in _components(fp, min_area_px=self.min_region_px)]
        if not regions:
            return []
        areas = np.array([r.sum() for r, _ in regions], dtype=np.float64)
        counts = self.rng.multinomial(self.clicks_per_round, areas / areas.sum())
        height, width = state.gt.shape
        clicks: list[Click] = []
        for (region, is_positive), count in zip(regions, counts):
            if count == 0:
                continue
            if self.mode == "center":
                targets = [
                    _first_argmax_xy(padded_distance(piece)) for piece in _partition(region, int(count))
                ]
            else:
                targets = _boundary_points(region, int(count))
            for x, y in targets:
                noise = (
                    self.rng.normal(0.0, self.noise_sigma_px, size=2)
                    if self.noise_sigma_px > 0
                    else (0.0, 0.0)
                )
                click = Click(
                    x=float(np.clip(x + noise[0], 0, width - 1)),
                    y=float(np.clip(y + noise[1], 0, height - 1)),
                    is_positive=is_positive,
                )
                state.mark(click)
                clicks.append(click)
        return clicks


def clicks_to_array(clicks: Sequence[Click]) -> np.ndarray:
    """(n, 3) float64 rows of (x, y, is_positive) for saving."""
    if not clicks:
        return np.zeros((0, 3), dtype=np.float64)
    return np.array([(c.x, c.y, float(c.is_positive)) for c in clicks], dtype=np.float64)
