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

import math
import threading
from collections.abc import Callable, Sequence
from typing import Literal, Protocol, TypedDict

import cv2
import numpy as np

from benchmark.distance import (
    BOUND_MARGIN,
    COARSE_BLOCK_PX,
    Box,
    box_distance,
    chessboard_distance_bound,
    coarse_distance_map,
    distance_upper_bound,
    full_distance,
    mask_box,
    windowed_maximum,
)
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

    The image edge counts as a boundary (RITM's 1-px zero padding). Correctly rounded, computed on
    the mask's box and cached (:mod:`benchmark.distance`); RITM calls OpenCV's ``DIST_MASK_PRECISE``,
    whose values differ from these by an ulp on about 1.5e-4 of the pixels (benchmark/README.md).
    """
    return full_distance(mask.astype(bool, copy=False), border=True)


_box = mask_box


def deepest_point(mask: np.ndarray, not_clicked: np.ndarray) -> tuple[float, tuple[int, int]]:
    """(max, first argmax (x, y) in row-major order) of ``padded_distance(mask) * not_clicked``.

    Computed on the mask's bounding box only (zero outside it, and the exact transform has the same
    values there as on the full image). With no positive value the full array's argmax is (0, 0),
    returned as such.
    """
    return _deepest_in_box(mask, mask_box(mask), not_clicked)


def _deepest_in_box(
    mask: np.ndarray, box: Box | None, not_clicked: np.ndarray
) -> tuple[float, tuple[int, int]]:
    found = box_distance(mask, border=True, box=box)
    if found is None:
        return 0.0, (0, 0)
    dist, (y0, y1, x0, x1) = found
    flat = int(np.argmax(dist))
    if not not_clicked[y0 + flat // (x1 - x0), x0 + flat % (x1 - x0)]:
        # the first maximum was clicked already (else it is also the first maximum of dist * not_clicked)
        dist = dist * not_clicked[y0:y1, x0:x1]
        flat = int(np.argmax(dist))
    best = float(dist.flat[flat])
    if not best > 0:
        return best, (0, 0)
    y, x = divmod(flat, x1 - x0)
    return best, (x0 + x, y0 + y)


def ritm_choice(fn: np.ndarray, fp: np.ndarray, not_clicked: np.ndarray) -> tuple[bool, tuple[int, int]]:
    """(is_positive, (x, y)): RITM's sign (max DT(fn) > max DT(fp), strict) and that region's deepest point.

    The same as two :func:`deepest_point` calls, but the losing region's transform is skipped when
    an upper bound of its maximum already decides the comparison (see :func:`_known_below`).
    """
    is_positive, deepest, _ = _ritm_step(fn, fp, not_clicked)
    return is_positive, deepest


COARSE_MIN_PX = 4096
"""Boxes of at most this many pixels are transformed outright (the coarse bound would cost about as much)."""
LOOSE_BOUND_RATIO = 1.5
"""A coarse bound above this multiple of the target is loose (scattered holes): try the chessboard bound."""
ORDER_BY_CHESSBOARD_RATIO = 2
"""When the region to transform first has a box this many times the other's, both chessboard bounds pick it."""


class _Region:
    """One error region of a RITM step: its box, its box-and-count bound and (lazily) its other bounds."""

    def __init__(self, mask: np.ndarray) -> None:
        self.mask = mask
        self.box = mask_box(mask)
        self.crude = distance_upper_bound(mask, self.box)
        self.area = 0 if self.box is None else (self.box[1] - self.box[0]) * (self.box[3] - self.box[2])
        self._coarse: np.ndarray | None = None
        self.chessboard: float | None = None  # computed by chessboard_bound()

    @property
    def coarse_eligible(self) -> bool:
        return self.area > COARSE_MIN_PX

    def coarse(self) -> np.ndarray:
        if self._coarse is None:
            assert self.box is not None  # coarse_eligible
            self._coarse = coarse_distance_map(self.mask, self.box)
        return self._coarse

    def coarse_bound(self) -> float:
        return float(self.coarse().max()) * COARSE_BLOCK_PX * BOUND_MARGIN

    def chessboard_bound(self) -> float:
        if self.chessboard is None:
            self.chessboard = chessboard_distance_bound(self.mask, self.box)
        return self.chessboard


def _known_below(region: _Region, not_clicked: np.ndarray, target: float, *, inclusive: bool) -> bool:
    """True when ``region``'s largest unclicked padded distance is known to be < ``target`` (<= if inclusive).

    False when it is not (or could not be shown cheaply): the caller then transforms the region. In
    order: the box-and-count bound, then for boxes above :data:`COARSE_MIN_PX` the coarse bound, the
    chessboard bound when the coarse one is loose, and the exact maximum over the pixels the coarse
    map cannot rule out (:func:`~benchmark.distance.windowed_maximum`), when their window is small.
    """

    def decides(value: float) -> bool:
        return value <= target if inclusive else value < target

    if decides(region.crude):
        return True
    if not region.coarse_eligible:
        return False
    assert region.box is not None  # coarse_eligible
    if region.chessboard is not None and decides(region.chessboard):  # computed for the order already
        return True
    coarse_bound = region.coarse_bound()
    if decides(coarse_bound):
        return True
    loose = region.chessboard is None and coarse_bound > LOOSE_BOUND_RATIO * target
    if loose and decides(region.chessboard_bound()):
        return True
    top = windowed_maximum(region.mask, region.box, not_clicked, region.coarse(), target)
    return top is not None and decides(top)


def _ritm_step(
    fn: np.ndarray, fp: np.ndarray, not_clicked: np.ndarray
) -> tuple[bool, tuple[int, int], Box | None]:
    """:func:`ritm_choice` and the chosen region's box.

    The region likelier to win is transformed first: the one with the larger coarse bound when both
    boxes exceed :data:`COARSE_MIN_PX` (the loser's coarse map is needed next anyway), by the chessboard
    bounds instead when its box is :data:`ORDER_BY_CHESSBOARD_RATIO` times the other's (a costly
    transform that may be wasted; the coarse bound is loose on scattered holes), else the larger
    box-and-count bound. The other is transformed only when it is not known to lose
    (:func:`_known_below`). The order changes only the cost, never the result.
    """
    neg, pos = _Region(fp), _Region(fn)
    fn_first = pos.crude >= neg.crude
    first, second = (pos, neg) if fn_first else (neg, pos)
    if (
        second.area
        and first.area > ORDER_BY_CHESSBOARD_RATIO * second.area
        and first.coarse_eligible
        and second.coarse_eligible
    ):
        fn_first = pos.chessboard_bound() >= neg.chessboard_bound()
    elif first.coarse_eligible and second.coarse_eligible:
        fn_first = pos.coarse_bound() >= neg.coarse_bound()
    if fn_first:
        max_fn, at_fn = _deepest_in_box(fn, pos.box, not_clicked)
        if _known_below(neg, not_clicked, max_fn, inclusive=False):
            return True, at_fn, pos.box
        max_fp, at_fp = _deepest_in_box(fp, neg.box, not_clicked)
    else:
        max_fp, at_fp = _deepest_in_box(fp, neg.box, not_clicked)
        if _known_below(pos, not_clicked, max_fp, inclusive=True):
            return False, at_fp, neg.box
        max_fn, at_fn = _deepest_in_box(fn, pos.box, not_clicked)
    if max_fn > max_fp:
        return True, at_fn, pos.box
    return False, at_fp, neg.box


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
    is_positive, (x, y) = ritm_choice(fn, fp, not_clicked)
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
    Same draws as ``rng.choice(weights.size, p=banded / banded.sum())`` on the full banded array
    (see :func:`sample_sparse`), computed on the positive weights only.
    """
    flat_weights = np.ascontiguousarray(weights, dtype=np.float64).ravel()
    positions = np.flatnonzero(flat_weights > 0)
    if positions.size == 0:
        return None
    flat = sample_sparse(positions, flat_weights[positions], flat_weights.size, low=low, high=high, rng=rng)
    if flat is None:
        return None
    y, x = divmod(flat, weights.shape[1])
    return x, y


EXACT_SUM_LIMIT = 2.0**52
"""Below this many quanta (the smallest value's float32 ulp) every partial sum of the values is exact in float64."""
MASS_BUCKETS = 4096
"""At most this many buckets of float32 bit patterns in :class:`_GroupMass`'s exact path."""


class _GroupMass:
    """The cumulative mass of a weight map's positive values, for the group band limits (reusable across groups).

    ``values``: the positive values as float64 (any order); ``narrow``: the same values as float32 when
    the map is float32 (else they are checked for being float32 values). The band limits are defined
    on the ascending order and its sequential cumulative sums (``np.cumsum(np.sort(values))``, the
    reference's ``group_band``). Two paths give the very same floats:

    * exact (``self.exact``): the values are float32 and ``n * max`` is below :data:`EXACT_SUM_LIMIT`
      quanta of ``2**(e - 24)`` (``e`` the smallest value's binary exponent, so every value is a
      multiple of that quantum). Then every sum of a subset of the values is a multiple of the quantum
      below ``2**53`` of them, so exact in float64, whatever the order of the additions: the cumulative
      sums in sorted order are the exact prefix sums, and so is any other summation. No sort then: the
      values are put in at most :data:`MASS_BUCKETS` buckets of their (order-preserving) float32 bit
      patterns, the buckets' sums and cumulative sums are exact, and only the bucket a band limit falls
      in is sorted. The DT click model's maps (float32 distance / largest distance, so the smallest
      value is at least 1 / largest) take this path whenever pixels x largest distance (px) <= 2**28:
      always at 640x480 (307,200 px, distances at most the 800-px diagonal).
    * sorted (otherwise): ``np.sort`` and ``np.cumsum``, as the reference does.
    """

    def __init__(self, values: np.ndarray, narrow: np.ndarray | None = None) -> None:
        self.values = values
        if narrow is None:
            candidate = values.astype(np.float32)
            narrow = candidate if np.array_equal(candidate, values) else None
        self.exact = narrow is not None and _sums_are_exact(narrow)
        if self.exact:
            assert narrow is not None
            bits = narrow.view(np.uint32)  # positive float32: the bit patterns sort as the values do
            low_bits = int(bits.min())
            self.min_value, self.max_value = float(narrow.min()), float(narrow.max())
            shift = max(0, (int(bits.max()) - low_bits).bit_length() - MASS_BUCKETS.bit_length() + 1)
            self.keys = ((bits - np.uint32(low_bits)) >> np.uint32(shift)).astype(np.intp)
            self.bucket_cumulative = np.cumsum(np.bincount(self.keys, weights=values))
            self.total = float(self.bucket_cumulative[-1])
        else:
            # float32 -> float64 keeps the order, and float32 sorts faster
            self.ordered = np.sort(values) if narrow is None else np.sort(narrow).astype(np.float64)
            self.cumulative = np.cumsum(self.ordered)
            self.total = float(self.cumulative[-1])
            self.min_value, self.max_value = float(self.ordered[0]), float(self.ordered[-1])

    def value_at(self, target: float, side: Literal["left", "right"]) -> float:
        """The sorted value at ``np.searchsorted(cumulative, target, side)``, capped at the last value."""
        if not self.exact:
            last = len(self.ordered) - 1
            return float(self.ordered[min(int(np.searchsorted(self.cumulative, target, side=side)), last)])
        bucket = int(np.searchsorted(self.bucket_cumulative, target, side=side))
        if bucket >= len(self.bucket_cumulative):
            return self.max_value
        members = self.values[self.keys == bucket]
        smallest = members.min()
        if smallest == members.max():  # one value (ties are common in DT maps): no sort needed
            return float(smallest)
        members.sort()
        before = self.bucket_cumulative[bucket - 1] if bucket else 0.0
        prefix = np.cumsum(members)
        prefix += before  # exact: each is a sum of a subset of the values
        return float(members[min(int(np.searchsorted(prefix, target, side=side)), len(members) - 1)])

    def band_sum(self, positions: np.ndarray, values: np.ndarray, size: int) -> float:
        """``np.sum`` of the full-size array holding ``values`` (a subset of the mass) at ``positions``."""
        if self.exact:
            return float(values.sum())  # exact in any order, so the pairwise sum's float too
        return _full_sum(positions, values, size)


def _sums_are_exact(narrow: np.ndarray) -> bool:
    """True when every float64 sum of a subset of these positive float32 values is exact (see _GroupMass)."""
    smallest, largest = float(narrow.min()), float(narrow.max())
    if not (smallest > 0 and np.isfinite(largest)):
        return False
    exponent = math.frexp(smallest)[1]  # smallest in [2**(e-1), 2**e): its float32 ulp is 2**(e-24) (or less)
    return math.ldexp(narrow.size * largest, 24 - exponent) < EXACT_SUM_LIMIT


class Round1Cache(TypedDict, total=False):
    """``GroupClicker(shared_cache=...)``: round 1 of one instance, the same for every group (a plain dict)."""

    round1_step: tuple[
        np.ndarray, bool, tuple[int, int], Box | None
    ]  # (error region, is_positive, deepest, box)
    round1: tuple[np.ndarray, np.ndarray, _GroupMass]  # A's flat positions, its values, their group mass


class _Scratch(threading.local):
    """Per-thread reusable arrays: threads sampling at the same time never share a buffer."""

    def __init__(self) -> None:
        self.sum_buffers: dict[int, np.ndarray] = {}
        self.flat_index: dict[tuple[int, int], np.ndarray] = {}


_SCRATCH = _Scratch()


def _flat_index(height: int, width: int) -> np.ndarray:
    """The read-only (H, W) array of row-major flat indices (one kept per thread, for its last image size)."""
    cache = _SCRATCH.flat_index
    index = cache.get((height, width))
    if index is None:
        cache.clear()
        index = cache[(height, width)] = np.arange(height * width, dtype=np.int64).reshape(height, width)
        index.flags.writeable = False
    return index


def _full_sum(positions: np.ndarray, values: np.ndarray, size: int) -> float:
    """``np.sum`` of the full-size array holding ``values`` at ``positions`` and zeros elsewhere.

    NumPy sums pairwise, so the zeros' places change the rounding: the full layout is rebuilt in a
    reused zero buffer (the calling thread's own) to get the very same float.
    """
    buffers = _SCRATCH.sum_buffers
    buffer = buffers.get(size)
    if buffer is None:
        buffers.clear()
        buffer = buffers[size] = np.zeros(size, dtype=np.float64)
    buffer[positions] = values
    total = float(buffer.sum())
    buffer[positions] = 0.0
    return total


def sample_sparse(
    positions: np.ndarray,
    values: np.ndarray,
    size: int,
    *,
    low: float,
    high: float,
    rng: np.random.Generator,
    group_mass: _GroupMass | None = None,
) -> int | None:
    """Flat index drawn from group [low, high] of a map given by its positive ``values`` at ``positions``.

    Bit for bit what ``group_band`` + ``rng.choice(size, p=banded / banded.sum())`` give on the
    full-size array (zeros elsewhere), and the same single ``rng.random()`` draw:

    * the band: in the full ascending order the zeros come first and add exactly 0 to the cumulative
      sums, so the band limits are found among the positive values alone;
    * the draw: ``Generator.choice`` with ``p`` takes ``cdf = cumsum(p); cdf /= cdf[-1]`` and the
      first index with ``cdf > u``; zeros do not move the cumulative sum, so that index is a positive
      one and the cumulative sums over the positive values alone are the same floats. The total is
      the full array's (pairwise) sum: any sum of the values when their sums are exact (see
      :class:`_GroupMass`), else rebuilt in a reused buffer.
    """
    if not 0.0 <= low <= high <= 1.0:
        raise ValueError(f"Clicking group bounds low={low}, high={high} must satisfy 0 <= low <= high <= 1.")
    mass = group_mass or _GroupMass(values)
    low_target, high_target = low * mass.total, high * mass.total
    # with no mass below the band the full band starts at the zeros (or the smallest value)
    lo_value = mass.value_at(low_target, "left") if low_target > 0 else mass.min_value
    hi_value = mass.value_at(high_target, "right")
    keep = (values >= lo_value) & (values <= hi_value)
    kept_positions, kept = positions[keep], values[keep]
    band_total = mass.band_sum(kept_positions, kept, size)
    if not band_total > 0:
        return None
    cdf = np.cumsum(kept / band_total)
    cdf /= cdf[-1]
    index = int(np.searchsorted(cdf, rng.random(), side="right"))
    return int(kept_positions[index])


class Clicker(Protocol):
    """What the engine and the session need from a simulated user."""

    name: str

    def start(self, *, image: np.ndarray, gt: np.ndarray, ignore: np.ndarray) -> None: ...

    def next_clicks(self, pred: np.ndarray) -> list[Click]: ...


class _Trajectory:
    """One started trajectory's image, GT, ignore band and already-clicked pixels."""

    def __init__(self, *, image: np.ndarray, gt: np.ndarray, ignore: np.ndarray) -> None:
        self.image, self.gt, self.ignore = image, gt.astype(bool), ignore.astype(bool)
        self.not_clicked: np.ndarray = np.ones(gt.shape, dtype=bool)
        self._object = self.gt & ~self.ignore  # the valid object and background: error_regions' operands
        self._background = ~self.gt & ~self.ignore

    def errors(self, pred: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``error_regions(gt=..., ignore=..., pred=pred)`` from the prepared valid object and background."""
        pred = pred.astype(bool, copy=False)
        return np.greater(self._object, pred), self._background & pred  # a > b on bools is a & ~b

    def mark(self, click: Click) -> None:
        height, width = self.not_clicked.shape
        x = min(max(int(click.x), 0), width - 1)
        y = min(max(int(click.y), 0), height - 1)
        self.not_clicked[y, x] = False


class _TrajectoryState:
    """A clicker's current trajectory: None until ``start``."""

    def __init__(self) -> None:
        self.current: _Trajectory | None = None

    def begin(self, *, image: np.ndarray, gt: np.ndarray, ignore: np.ndarray) -> None:
        if gt.shape != ignore.shape or gt.shape != image.shape[:2]:
            raise ValueError(
                f"Clicker.start: image {image.shape[:2]}, gt {gt.shape} and ignore {ignore.shape} must share (H, W)."
            )
        self.current = _Trajectory(image=image, gt=gt, ignore=ignore)

    def require(self, who: str) -> _Trajectory:
        """The started trajectory; :class:`ClickerError` naming ``who`` before ``start``."""
        if self.current is None:
            raise ClickerError(f"{who}.next_clicks called before start(image=..., gt=..., ignore=...).")
        return self.current


class BaselineClicker:
    """RITM's deterministic clicker, one click per round."""

    name = "baseline"

    def __init__(self) -> None:
        self._state = _TrajectoryState()

    def start(self, *, image: np.ndarray, gt: np.ndarray, ignore: np.ndarray) -> None:
        self._state.begin(image=image, gt=gt, ignore=ignore)

    def restore(
        self, *, image: np.ndarray, gt: np.ndarray, ignore: np.ndarray, clicks: Sequence[Click]
    ) -> None:
        """``start``, then the state after ``clicks`` were given: the pixels clicked so far are its whole state."""
        self.start(image=image, gt=gt, ignore=ignore)
        state = self._state.require("BaselineClicker")
        for click in clicks:
            state.mark(click)

    def next_clicks(self, pred: np.ndarray) -> list[Click]:
        state = self._state.require("BaselineClicker")
        is_positive, (x, y) = ritm_choice(*state.errors(pred), state.not_clicked)
        click = Click(x=float(x), y=float(y), is_positive=is_positive)
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
      shared_cache: optional dict shared by the clickers of one instance (same GT, ignore band and
        ``first_round_map``): round 1's error regions, deepest points and sorted weights are kept
        there (identical for every group), so they are computed once per instance.
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
        shared_cache: Round1Cache | None = None,
    ) -> None:
        if not 0.0 <= low <= high <= 1.0:
            raise ValueError(
                f"GroupClicker bounds low={low}, high={high} must satisfy 0 <= low <= high <= 1."
            )
        self.map_fn, self.low, self.high, self.rng = map_fn, low, high, rng
        self.first_round_map = first_round_map
        self.shared_cache = shared_cache
        self.name = name or f"group[{low:.2f},{high:.2f}]"
        self._state = _TrajectoryState()
        self._round = 0

    def start(self, *, image: np.ndarray, gt: np.ndarray, ignore: np.ndarray) -> None:
        self._state.begin(image=image, gt=gt, ignore=ignore)
        self._round = 0

    def restore(
        self, *, image: np.ndarray, gt: np.ndarray, ignore: np.ndarray, clicks: Sequence[Click]
    ) -> None:
        """``start``, then the state after the rounds that gave ``clicks`` (one click per round).

        With ``rng`` in the state it had after those rounds, the next ``next_clicks`` draws what an
        uninterrupted clicker would: the evaluation server stores the clicks and the stream's state.
        """
        self.start(image=image, gt=gt, ignore=ignore)
        state = self._state.require("GroupClicker")
        for click in clicks:
            state.mark(click)
        self._round = len(clicks)

    def next_clicks(self, pred: np.ndarray) -> list[Click]:
        state = self._state.require("GroupClicker")
        self._round += 1
        # round 1 on an empty prediction draws from the precomputed map (when there is one)
        first_map = self.first_round_map if self._round == 1 else None
        if first_map is not None and pred.any():
            first_map = None
        first_round = first_map is not None
        shared = self.shared_cache if first_round else None
        step = None if shared is None else shared.get("round1_step")
        if step is None:
            fn, fp = state.errors(pred)
            is_positive, deepest, box = _ritm_step(fn, fp, state.not_clicked)
            step = (fn if is_positive else fp, is_positive, deepest, box)
            if shared is not None:  # round 1 (empty prediction, nothing clicked) is the same for every group
                shared["round1_step"] = step
        region, is_positive, deepest, box = step
        raw_map = first_map if first_map is not None else self.map_fn(state.image, state.gt, region)
        picked = self._sample(raw_map, region, box, state.not_clicked, shared=first_round)
        if picked is None:
            picked = deepest
        click = Click(x=float(picked[0]), y=float(picked[1]), is_positive=is_positive)
        state.mark(click)
        return [click]

    def _sample(
        self,
        raw_map: np.ndarray,
        region: np.ndarray,
        box: Box | None,
        not_clicked: np.ndarray,
        *,
        shared: bool,
    ) -> tuple[int, int] | None:
        """Draw from A = map * region * not_clicked inside the group, computed on the region's box only."""
        height, width = region.shape
        cached = self.shared_cache.get("round1") if shared and self.shared_cache is not None else None
        if cached is None:
            if box is None:
                return None
            y0, y1, x0, x1 = box
            # A > 0 exactly where map > 0 on the unclicked region; its values are the map's, as float64
            crop_map = raw_map[y0:y1, x0:x1]
            keep = crop_map > 0
            keep &= region[y0:y1, x0:x1]
            keep &= not_clicked[y0:y1, x0:x1]
            positions = _flat_index(height, width)[y0:y1, x0:x1][keep]  # row-major order of the full image
            if positions.size == 0:
                return None
            picked = raw_map.ravel()[positions] if raw_map.flags.c_contiguous else crop_map[keep]
            values = np.asarray(picked, dtype=np.float64)
            mass = _GroupMass(values, picked if picked.dtype == np.float32 else None)
            if shared and self.shared_cache is not None:
                # round 1 of every group of an instance draws from the same A: select and sort it once
                self.shared_cache["round1"] = (positions, values, mass)
        else:
            positions, values, mass = cached
        drawn = sample_sparse(positions, values, height * width, low=self.low, high=self.high,
                              rng=self.rng, group_mass=mass)  # fmt: skip
        if drawn is None:
            return None
        y, x = divmod(drawn, width)
        return x, y


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
    points = [outline[int(p) % len(outline)] for p in positions]
    return [(int(x), int(y)) for x, y in points]


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
        state = self._state.require("AnnotatorSimulator")
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
