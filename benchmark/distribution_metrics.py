"""Click-distribution metrics of RClicks protocol §4: PL1, WD, 2-D KS, NSS and PDE.

Conventions: a point set is a float array of shape (n, 2) holding (x, y) = (column, row) in pixels of
the loaded image. A map is a float array of shape (H, W), non-negative, not necessarily normalised.

Deliberate differences from the reference scripts:

* the bootstrap uses one ``numpy.random.Generator`` per task, seeded from (base seed, task id), so a
  task's numbers do not depend on the order in which tasks are evaluated (the reference seeds the
  global generator once);
* the 2-D KS test returns p = NaN (counted as "different") when a sample has fewer than 2 points;
  the reference (``ndtest.ks2d2s`` via ``scipy.stats.pearsonr``) *raises* ``ValueError`` there
  ("`x` and `y` must have length at least 2"), which stops its script. With a constant coordinate
  both give NaN (``pearsonr`` warns and returns NaN) and the test counts as "different";
* NSS standardises the raw map, ``(S - mean S) / (std S + 1e-9)``; the reference first normalises S
  to sum 1, so its 1e-9 is comparable to the deviation of the normalised map (~1/(H*W)) and shrinks
  the scores: relative difference 1e-4..2e-4 at 640x480 and 8e-4..1.5e-3 at 1920x1080 on DT,
  Gaussian and flat maps (benchmark/README.md). We keep ours: NSS is meant to be scale-invariant.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.spatial.distance import cdist
from scipy.stats import kstwobign, wasserstein_distance_nd

from benchmark.distance import mask_box

DEFAULT_BOOTSTRAP_SETS = 100
DEFAULT_SEED = 42
KS_ALPHA = 0.05
SUM_EPS = 1e-9
NSS_EPS = 1e-9


@dataclass(frozen=True)
class ObjectBox:
    """Size of the bounding box of the full GT object mask: max − min + 1 along each axis (pixels)."""

    width_px: int
    height_px: int

    @property
    def diagonal_px(self) -> float:
        return float(np.hypot(self.width_px, self.height_px))


def object_box(mask: np.ndarray) -> ObjectBox:
    """Bounding-box size of the True pixels of ``mask`` (bool (H, W)).

    Raises ValueError for an empty mask: the normalisations of PL1 and WD are undefined there.
    """
    box = mask_box(mask)
    if box is None:
        raise ValueError("object_box: the GT object mask is empty; PL1/WD need a non-empty object")
    top, bottom, left, right = box
    return ObjectBox(width_px=right - left, height_px=bottom - top)


def _as_points(points: np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(points, dtype=np.float64)
    if array.ndim != 2 or array.shape[1] != 2:
        raise ValueError(f"{name}: expected an (n, 2) array of (x, y) points, got shape {array.shape}")
    return array


# --------------------------------------------------------------------------------------------------
# Sample-based metrics on two point sets
# --------------------------------------------------------------------------------------------------


def pairwise_l1(real_xy: np.ndarray, other_xy: np.ndarray, *, box: ObjectBox) -> float:
    """PL1: mean over all (real, other) pairs of |Δx|/w_o + |Δy|/h_o (dimensionless)."""
    real = _as_points(real_xy, "real_xy")
    other = _as_points(other_xy, "other_xy")
    dx = np.abs(real[:, None, 0] - other[None, :, 0]).mean()
    dy = np.abs(real[:, None, 1] - other[None, :, 1]).mean()
    return float(dx / box.width_px + dy / box.height_px)


def wasserstein_assignment(a_xy: np.ndarray, b_xy: np.ndarray) -> float:
    """Exact 2-D W1 (Euclidean cost, equal weights) for two sets of the *same* size, in pixels.

    With equal sizes and uniform weights an optimal transport plan is a permutation (Birkhoff), so the
    optimal assignment gives the exact distance.
    """
    a = _as_points(a_xy, "a_xy")
    b = _as_points(b_xy, "b_xy")
    if len(a) != len(b):
        raise ValueError(
            f"wasserstein_assignment needs sets of equal size, got {len(a)} and {len(b)}; "
            "use wasserstein_exact for unequal sizes"
        )
    cost = cdist(a, b)
    rows, cols = linear_sum_assignment(cost)
    return float(cost[rows, cols].mean())


def wasserstein_exact(a_xy: np.ndarray, b_xy: np.ndarray) -> float:
    """Exact 2-D W1 in pixels for any sizes: assignment for equal sizes, SciPy's LP otherwise."""
    a = _as_points(a_xy, "a_xy")
    b = _as_points(b_xy, "b_xy")
    if len(a) == len(b):
        return wasserstein_assignment(a, b)
    return float(wasserstein_distance_nd(a, b))


def _pearson_r(points: np.ndarray) -> float:
    x, y = points[:, 0], points[:, 1]
    if len(points) < 2:
        return float("nan")
    dx, dy = x - x.mean(), y - y.mean()
    denom = np.sqrt((dx * dx).sum() * (dy * dy).sum())
    if denom == 0:
        return float("nan")
    return float(np.clip((dx * dy).sum() / denom, -1.0, 1.0))


def _max_quadrant_distance(origins: np.ndarray, other: np.ndarray) -> float:
    """D₁ of Fasano–Franceschini with the points of ``origins`` used as origins (ndtest's maxdist)."""
    n1 = len(origins)

    def fractions(sample: np.ndarray) -> np.ndarray:
        left = sample[None, :, 0] <= origins[:, None, 0]  # (n1, n)
        low = sample[None, :, 1] <= origins[:, None, 1]
        a = (left & low).mean(axis=1)
        b = (left & ~low).mean(axis=1)
        c = (~left & low).mean(axis=1)
        return np.stack([a, b, c, 1.0 - a - b - c], axis=1)  # (n1, 4)

    diff = fractions(origins) - fractions(other)
    # the origin itself sits in the ≤ quadrant; move it out to maximise the difference (ndtest)
    diff[:, 0] -= 1.0 / n1
    return float(max(-diff.min(), diff.max() + 1.0 / n1))


@dataclass(frozen=True)
class KSResult:
    statistic: float  # D = (D₁₂ + D₂₁)/2, dimensionless
    p_value: float  # NaN when Pearson r is undefined

    @property
    def same(self) -> bool:
        """True iff p > 0.05 ("no significant difference"); NaN counts as different."""
        return bool(self.p_value > KS_ALPHA)


def ks_2d_two_sample(a_xy: np.ndarray, b_xy: np.ndarray) -> KSResult:
    """2-D two-sample KS test (Peacock / Fasano–Franceschini, ndtest's analytic p-value)."""
    a = _as_points(a_xy, "a_xy")
    b = _as_points(b_xy, "b_xy")
    if len(a) == 0 or len(b) == 0:
        raise ValueError(f"ks_2d_two_sample needs two non-empty samples, got sizes {len(a)} and {len(b)}")
    statistic = 0.5 * (_max_quadrant_distance(a, b) + _max_quadrant_distance(b, a))
    n1, n2 = len(a), len(b)
    sqen = np.sqrt(n1 * n2 / (n1 + n2))
    r1, r2 = _pearson_r(a), _pearson_r(b)
    r = np.sqrt(1.0 - 0.5 * (r1**2 + r2**2))
    d = statistic * sqen / (1.0 + r * (0.25 - 0.75 / sqen))
    p_value = float(kstwobign.sf(d)) if np.isfinite(d) else float("nan")
    return KSResult(statistic=float(statistic), p_value=p_value)


# --------------------------------------------------------------------------------------------------
# Map-based metrics
# --------------------------------------------------------------------------------------------------


def _click_pixels(points_xy: np.ndarray, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    points = _as_points(points_xy, "clicks_xy")
    height, width = shape
    cols = np.clip(np.floor(points[:, 0]).astype(np.int64), 0, width - 1)
    rows = np.clip(np.floor(points[:, 1]).astype(np.int64), 0, height - 1)
    return rows, cols


def normalized_scanpath_saliency(prob_map: np.ndarray, real_xy: np.ndarray) -> float:
    """NSS: mean of (S − mean S)/(std S + 1e-9) at the real click pixels (clipped into the image)."""
    values = np.asarray(prob_map, dtype=np.float64)
    z = (values - values.mean()) / (values.std() + NSS_EPS)
    rows, cols = _click_pixels(real_xy, values.shape)
    return float(z[rows, cols].mean())


def probability_density_at_clicks(prob_map: np.ndarray, real_xy: np.ndarray) -> float:
    """PDE: mean of S/(ΣS + 1e-9) at the real click pixels. Per-pixel, so resolution-dependent."""
    values = np.asarray(prob_map, dtype=np.float64)
    density = values / (values.sum() + SUM_EPS)
    rows, cols = _click_pixels(real_xy, values.shape)
    return float(density[rows, cols].mean())


# --------------------------------------------------------------------------------------------------
# Bootstrap evaluation of one task
# --------------------------------------------------------------------------------------------------


def task_generator(*, seed: int, task_id: str) -> np.random.Generator:
    """A generator seeded from (seed, task_id) alone, so results do not depend on evaluation order."""
    digest = hashlib.sha256(task_id.encode("utf-8")).digest()
    return np.random.default_rng([seed, int.from_bytes(digest[:8], "little")])


def sample_click_sets(
    prob_map: np.ndarray, *, n_clicks: int, n_sets: int, rng: np.random.Generator
) -> np.ndarray:
    """Draw ``n_sets`` sets of ``n_clicks`` pixels i.i.d. from the map (with replacement).

    Returns float64 (n_sets, n_clicks, 2) of integer pixel coordinates (x = column, y = row).
    Raises ValueError when the map has no positive mass (nothing can be sampled).
    """
    values = np.asarray(prob_map, dtype=np.float64)
    flat = np.clip(values.ravel(), 0.0, None)
    total = flat.sum()
    if not np.isfinite(total) or total <= 0:
        raise ValueError("sample_click_sets: the map sums to zero (or is not finite); nothing to sample")
    index = rng.choice(flat.size, size=n_clicks * n_sets, replace=True, p=flat / total)
    rows, cols = np.divmod(index, values.shape[1])
    return np.stack([cols, rows], axis=1).astype(np.float64).reshape(n_sets, n_clicks, 2)


@dataclass(frozen=True)
class TaskMetrics:
    ks: float  # fraction of bootstrap sets with KS p > 0.05 (↑)
    pl1: float  # ↓
    wd: float  # W1 / object-box diagonal (↓)
    nss: float  # ↑
    pde: float  # ↑ (per-pixel density, not comparable across resolutions)

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def evaluate_click_map(
    prob_map: np.ndarray,
    real_xy: np.ndarray,
    *,
    gt_mask: np.ndarray,
    rng: np.random.Generator,
    n_sets: int = DEFAULT_BOOTSTRAP_SETS,
) -> TaskMetrics:
    """All §4 metrics of one task.

    ``prob_map``: float (H, W) ≥ 0, any scale (normalised here). ``real_xy``: (n, 2) real clicks at
    the map's resolution. ``gt_mask``: bool (H, W), the full GT object (sets the PL1/WD box).
    ``rng``: use :func:`task_generator` for order-independent results.
    """
    values = np.asarray(prob_map, dtype=np.float64)
    if values.shape != gt_mask.shape:
        raise ValueError(f"map shape {values.shape} differs from GT mask shape {gt_mask.shape}")
    real = _as_points(real_xy, "real_xy")
    if len(real) == 0:
        raise ValueError("evaluate_click_map: the task has no real clicks")
    box = object_box(gt_mask)
    sets = sample_click_sets(values, n_clicks=len(real), n_sets=n_sets, rng=rng)
    ks_same, pl1_values, wd_values = [], [], []
    for sampled in sets:
        ks_same.append(ks_2d_two_sample(sampled, real).same)
        pl1_values.append(pairwise_l1(real, sampled, box=box))
        wd_values.append(wasserstein_assignment(sampled, real) / box.diagonal_px)
    return TaskMetrics(
        ks=float(np.mean(ks_same)),
        pl1=float(np.mean(pl1_values)),
        wd=float(np.mean(wd_values)),
        nss=normalized_scanpath_saliency(values, real),
        pde=probability_density_at_clicks(values, real),
    )


@dataclass(frozen=True)
class PointSetComparison:
    """PL1 / WD / KS between two raw click sets (display-mode ablation, PC vs mobile)."""

    pl1: float
    wd: float  # W1 / object-box diagonal
    ks_p_value: float
    ks_same: bool

    def as_dict(self) -> dict[str, float]:
        return {"pl1": self.pl1, "wd": self.wd, "ks_p_value": self.ks_p_value, "ks": float(self.ks_same)}


def compare_point_sets(a_xy: np.ndarray, b_xy: np.ndarray, *, box: ObjectBox) -> PointSetComparison:
    """Compare two raw click sets (no bootstrap, no density model); PL1 with ``a`` as the first set."""
    ks = ks_2d_two_sample(a_xy, b_xy)
    return PointSetComparison(
        pl1=pairwise_l1(a_xy, b_xy, box=box),
        wd=wasserstein_exact(a_xy, b_xy) / box.diagonal_px,
        ks_p_value=ks.p_value,
        ks_same=ks.same,
    )
