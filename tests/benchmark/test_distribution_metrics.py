"""Metrics of protocol §4 against hand-worked values and independent computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import wasserstein_distance_nd

from benchmark.distribution_metrics import (
    ObjectBox,
    compare_point_sets,
    evaluate_click_map,
    ks_2d_two_sample,
    normalized_scanpath_saliency,
    object_box,
    pairwise_l1,
    probability_density_at_clicks,
    sample_click_sets,
    task_generator,
    wasserstein_assignment,
    wasserstein_exact,
)


def test_object_box_is_max_minus_min_plus_one():
    mask = np.zeros((10, 12), dtype=bool)
    mask[2:5, 3:10] = True  # rows 2..4, cols 3..9
    box = object_box(mask)
    assert (box.width_px, box.height_px) == (7, 3)
    assert box.diagonal_px == pytest.approx(math.hypot(7, 3))


def test_object_box_rejects_empty_mask():
    with pytest.raises(ValueError, match="empty"):
        object_box(np.zeros((4, 4), dtype=bool))


def test_pairwise_l1_by_hand():
    # pairs: (0,0)-(1,2): 1/2 + 2/4 = 1.0 ; (3,0)-(1,2): 2/2 + 2/4 = 1.5 -> mean 1.25
    real = np.array([[0.0, 0.0], [3.0, 0.0]])
    other = np.array([[1.0, 2.0]])
    assert pairwise_l1(real, other, box=ObjectBox(2, 4)) == pytest.approx(1.25)


def test_wasserstein_assignment_by_hand():
    a = np.array([[0.0, 0.0], [10.0, 0.0]])
    assert wasserstein_assignment(a, a + [0.0, 1.0]) == pytest.approx(1.0)
    # crossing assignment must not be chosen: (0,0)->(0,3), (1,0)->(1,3)
    b = np.array([[1.0, 3.0], [0.0, 3.0]])
    assert wasserstein_assignment(np.array([[0.0, 0.0], [1.0, 0.0]]), b) == pytest.approx(3.0)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_wasserstein_assignment_equals_scipy_optimal_transport(seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 50, size=(9, 2)).astype(float)
    b = rng.normal(20, 8, size=(9, 2))
    assert wasserstein_assignment(a, b) == pytest.approx(wasserstein_distance_nd(a, b), rel=1e-9)


def test_wasserstein_exact_unequal_sizes_matches_scipy():
    rng = np.random.default_rng(5)
    a, b = rng.normal(size=(6, 2)), rng.normal(1.0, 1.0, size=(4, 2))
    assert wasserstein_exact(a, b) == pytest.approx(wasserstein_distance_nd(a, b), rel=1e-9)
    with pytest.raises(ValueError, match="equal size"):
        wasserstein_assignment(a, b)


def _kolmogorov_sf_series(d: float) -> float:
    return 2.0 * sum((-1) ** (k - 1) * math.exp(-2.0 * k * k * d * d) for k in range(1, 100))


def test_ks_statistic_and_p_value_by_hand():
    # Worked by hand: with either set as origins, after the 1/n correction D1 = D2 = 1, so D = 1.
    # Both samples lie on a line (r1 = r2 = 1), so r = 0 and d = D * sqrt(2*2/4) = 1.
    a = np.array([[0.0, 0.0], [1.0, 1.0]])
    b = np.array([[2.0, 2.0], [3.0, 3.0]])
    result = ks_2d_two_sample(a, b)
    assert result.statistic == pytest.approx(1.0)
    assert result.p_value == pytest.approx(_kolmogorov_sf_series(1.0), rel=1e-9)
    assert result.p_value == pytest.approx(0.2700, abs=1e-4)


def _ks_loop(a, b):
    """Independent, loop-based Fasano–Franceschini as described in protocol §4."""

    def maxdist(origins, other):
        n1 = len(origins)
        diffs = []
        for ox, oy in origins:
            quads = []
            for sample in (origins, other):
                counts = [0, 0, 0, 0]
                for x, y in sample:
                    left, low = x <= ox, y <= oy
                    counts[0 if left and low else 1 if left else 2 if low else 3] += 1
                quads.append([c / len(sample) for c in counts])
            diffs.append([quads[0][k] - quads[1][k] for k in range(4)])
        for row in diffs:
            row[0] -= 1 / n1
        return max(-min(min(r) for r in diffs), max(max(r) for r in diffs) + 1 / n1)

    def pearson(points):
        x, y = points[:, 0], points[:, 1]
        return float(np.corrcoef(x, y)[0, 1])

    big_d = (maxdist(a, b) + maxdist(b, a)) / 2
    n1, n2 = len(a), len(b)
    sqen = math.sqrt(n1 * n2 / (n1 + n2))
    r = math.sqrt(1 - 0.5 * (pearson(a) ** 2 + pearson(b) ** 2))
    d = big_d * sqen / (1 + r * (0.25 - 0.75 / sqen))
    return big_d, _kolmogorov_sf_series(d)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ks_matches_independent_loop_implementation_with_ties(seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 8, size=(15, 2)).astype(float)  # small integer grid: many ties
    b = rng.integers(2, 10, size=(11, 2)).astype(float)
    expected_d, expected_p = _ks_loop(a, b)
    result = ks_2d_two_sample(a, b)
    assert result.statistic == pytest.approx(expected_d)
    assert result.p_value == pytest.approx(expected_p, rel=1e-6, abs=1e-12)


def test_ks_is_nan_and_counts_as_different_when_a_coordinate_is_constant():
    a = np.array([[1.0, 0.0], [1.0, 2.0], [1.0, 5.0]])  # x constant -> Pearson r undefined
    b = np.array([[0.0, 0.0], [1.0, 2.0], [2.0, 4.0]])
    result = ks_2d_two_sample(a, b)
    assert math.isnan(result.p_value)
    assert result.same is False


def test_ks_separates_same_and_shifted_distributions():
    rng = np.random.default_rng(7)
    base = rng.normal(size=(60, 2))
    same = ks_2d_two_sample(base, rng.normal(size=(60, 2)))
    shifted = ks_2d_two_sample(base, rng.normal(2.0, 1.0, size=(60, 2)))
    assert same.p_value > 0.05 and same.same
    assert shifted.p_value < 1e-4 and not shifted.same


def test_nss_and_pde_by_hand():
    prob = np.array([[0.0, 0.0], [0.0, 4.0]])  # mean 1, std sqrt(3)
    clicks = np.array([[1.0, 1.0], [0.0, 0.0]])  # (x, y)
    assert normalized_scanpath_saliency(prob, clicks) == pytest.approx((3 - 1) / 2 / math.sqrt(3), rel=1e-6)
    assert probability_density_at_clicks(prob, clicks) == pytest.approx(0.5, rel=1e-6)


def test_map_metrics_clip_clicks_into_the_image():
    prob = np.array([[0.0, 0.0], [0.0, 4.0]])
    assert probability_density_at_clicks(prob, np.array([[9.0, 9.0]])) == pytest.approx(1.0, rel=1e-6)


def test_sample_click_sets_follows_the_map():
    prob = np.zeros((4, 5))
    prob[1, 3], prob[2, 0] = 1.0, 3.0
    sets = sample_click_sets(prob, n_clicks=4000, n_sets=2, rng=np.random.default_rng(0))
    assert sets.shape == (2, 4000, 2)
    at_x3 = np.mean(sets[..., 0] == 3)
    assert set(map(tuple, sets.reshape(-1, 2).astype(int))) == {(3, 1), (0, 2)}
    assert at_x3 == pytest.approx(0.25, abs=0.02)
    with pytest.raises(ValueError, match="sums to zero"):
        sample_click_sets(np.zeros((3, 3)), n_clicks=1, n_sets=1, rng=np.random.default_rng(0))


def test_task_generator_depends_on_task_not_on_order():
    first = task_generator(seed=42, task_id="GrabCut/banana1").random(3)
    task_generator(seed=42, task_id="GrabCut/other").random(10)
    again = task_generator(seed=42, task_id="GrabCut/banana1").random(3)
    other = task_generator(seed=42, task_id="GrabCut/banana2").random(3)
    assert np.array_equal(first, again)
    assert not np.array_equal(first, other)


def test_evaluate_click_map_with_a_point_mass_by_hand():
    gt = np.zeros((6, 8), dtype=bool)
    gt[0:4, 0:5] = True  # box 5 x 4, diagonal sqrt(41)
    prob = np.zeros((6, 8))
    prob[3, 0] = 1.0  # every sampled click lands on (x=0, y=3)
    real = np.array([[0.0, 0.0], [4.0, 0.0]])
    metrics = evaluate_click_map(prob, real, gt_mask=gt, rng=np.random.default_rng(0), n_sets=5)
    assert metrics.wd == pytest.approx((3 + 5) / 2 / math.sqrt(41))
    assert metrics.pl1 == pytest.approx(((0 + 3 / 4) + (4 / 5 + 3 / 4)) / 2)
    assert metrics.ks == 0.0  # sampled x constant: NaN p counts as different
    assert metrics.pde == pytest.approx(0.0)
    z_real = (0 - prob.mean()) / prob.std()
    assert metrics.nss == pytest.approx(z_real, rel=1e-6)


def test_evaluate_click_map_true_map_beats_uniform():
    rng = np.random.default_rng(3)
    height, width = 40, 50
    gt = np.zeros((height, width), dtype=bool)
    gt[5:35, 5:45] = True
    yy, xx = np.mgrid[0:height, 0:width]
    true_map = np.exp(-((xx - 12) ** 2 + (yy - 10) ** 2) / (2 * 3.0**2)) * gt
    real = sample_click_sets(true_map, n_clicks=40, n_sets=1, rng=rng)[0]
    good = evaluate_click_map(true_map, real, gt_mask=gt, rng=np.random.default_rng(1), n_sets=20)
    flat = evaluate_click_map(gt.astype(float), real, gt_mask=gt, rng=np.random.default_rng(1), n_sets=20)
    assert good.ks > flat.ks and good.pl1 < flat.pl1 and good.wd < flat.wd
    assert good.nss > flat.nss and good.pde > flat.pde


def test_compare_point_sets_identical_sets():
    points = np.array([[1.0, 2.0], [4.0, 7.0], [3.0, 3.0], [8.0, 1.0]])
    comparison = compare_point_sets(points, points.copy(), box=ObjectBox(10, 10))
    assert comparison.wd == 0.0
    assert comparison.ks_same
