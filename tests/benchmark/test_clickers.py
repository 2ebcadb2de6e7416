from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import ndimage

from benchmark.clickers import (
    AnnotatorSimulator,
    BaselineClicker,
    ClickerError,
    GroupClicker,
    ReplayClicker,
    baseline_click,
    group_band,
    sample_group_pixel,
)
from segmenters.base import Click


def _square(shape=(6, 6), rows=(1, 5), cols=(1, 5)) -> np.ndarray:
    mask = np.zeros(shape, bool)
    mask[rows[0] : rows[1], cols[0] : cols[1]] = True
    return mask


def _ritm_reference(gt, ignore, pred, not_clicked) -> Click:
    """An independent statement of RITM's rule with SciPy's exact EDT (not our code path)."""
    valid = ~ignore
    fn = np.pad(gt & ~pred & valid, 1)
    fp = np.pad(~gt & pred & valid, 1)
    d_fn = ndimage.distance_transform_edt(fn)[1:-1, 1:-1] * not_clicked
    d_fp = ndimage.distance_transform_edt(fp)[1:-1, 1:-1] * not_clicked
    positive = d_fn.max() > d_fp.max()
    chosen = d_fn if positive else d_fp
    for y in range(chosen.shape[0]):
        for x in range(chosen.shape[1]):
            if np.isclose(chosen[y, x], chosen.max(), rtol=0, atol=1e-4):
                return Click(float(x), float(y), bool(positive))
    raise AssertionError("unreachable")


def test_first_click_is_first_deepest_pixel_in_row_major_order():
    gt = _square()
    none = np.zeros_like(gt)
    # Pixels (2,2), (2,3), (3,2), (3,3) all lie 2 px from the background; (x=2, y=2) comes first.
    click = baseline_click(gt=gt, ignore=none, pred=none, not_clicked=np.ones_like(gt))
    assert click == Click(2.0, 2.0, True)


def test_already_clicked_pixel_is_excluded_not_a_boundary():
    gt = _square()
    none = np.zeros_like(gt)
    not_clicked = np.ones_like(gt)
    not_clicked[2, 2] = False
    assert baseline_click(gt=gt, ignore=none, pred=none, not_clicked=not_clicked) == Click(3.0, 2.0, True)


def test_image_border_counts_as_boundary():
    gt = np.zeros((5, 5), bool)
    gt[:, :3] = True  # touches the top, bottom and left edges
    none = np.zeros_like(gt)
    # Unpadded, column 0 would be 3 px from the background; padded, (x=1, y=1) is the first 2-px pixel.
    assert baseline_click(gt=gt, ignore=none, pred=none, not_clicked=np.ones_like(gt)) == Click(
        1.0, 1.0, True
    )


def test_tie_between_fn_and_fp_gives_negative_click():
    gt = np.zeros((5, 9), bool)
    gt[1:4, 1:4] = True  # fn 3x3 block, centre (2, 2) is 2 px deep
    pred = np.zeros_like(gt)
    pred[1:4, 5:8] = True  # fp 3x3 block, centre (6, 2) is 2 px deep
    none = np.zeros_like(gt)
    assert baseline_click(gt=gt, ignore=none, pred=pred, not_clicked=np.ones_like(gt)) == Click(
        6.0, 2.0, False
    )


def test_ignore_band_is_excluded_from_the_error():
    gt = _square()
    ignore = np.zeros_like(gt)
    ignore[1:5, 1:3] = True
    none = np.zeros_like(gt)
    # The fn region is the 4x2 block at columns 3-4: every pixel is 1 px deep, first is (x=3, y=1).
    assert baseline_click(gt=gt, ignore=ignore, pred=none, not_clicked=np.ones_like(gt)) == Click(
        3.0, 1.0, True
    )


def test_no_error_gives_negative_click_at_origin_like_ritm():
    gt = _square()
    assert baseline_click(gt=gt, ignore=np.zeros_like(gt), pred=gt, not_clicked=np.ones_like(gt)) == Click(
        0.0, 0.0, False
    )


@settings(max_examples=60, deadline=None)
@given(
    st.integers(min_value=0, max_value=2**32 - 1),
    st.integers(min_value=3, max_value=12),
    st.integers(min_value=3, max_value=12),
)
def test_matches_independent_ritm_rule_on_random_masks(seed, height, width):
    rng = np.random.default_rng(seed)
    gt = rng.random((height, width)) < 0.5
    pred = rng.random((height, width)) < 0.4
    ignore = rng.random((height, width)) < 0.1
    not_clicked = rng.random((height, width)) < 0.9
    ours = baseline_click(gt=gt, ignore=ignore, pred=pred, not_clicked=not_clicked)
    assert ours == _ritm_reference(gt, ignore, pred, not_clicked)


def test_baseline_clicker_never_repeats_a_pixel_while_error_remains():
    gt = _square(shape=(8, 8), rows=(1, 7), cols=(1, 7))
    clicker = BaselineClicker()
    clicker.start(image=np.zeros((8, 8, 3), np.uint8), gt=gt, ignore=np.zeros_like(gt))
    pred = np.zeros_like(gt)
    seen = [clicker.next_clicks(pred)[0] for _ in range(5)]
    assert len({(c.x, c.y) for c in seen}) == 5 and all(c.is_positive for c in seen)


def test_clicker_before_start_raises():
    with pytest.raises(ClickerError, match="before start"):
        BaselineClicker().next_clicks(np.zeros((2, 2), bool))


def test_group_band_worked_example():
    values = np.array([[0.0, 1.0, 2.0, 3.0, 4.0]])  # cumulative sums 0, 1, 3, 6, 10
    assert group_band(values, low=0.0, high=0.1).tolist() == [[True, True, True, False, False]]
    assert group_band(values, low=0.5, high=0.6).tolist() == [[False, False, False, True, True]]
    assert group_band(values, low=0.9, high=1.0).tolist() == [[False, False, False, False, True]]
    with pytest.raises(ValueError, match="low=0.6, high=0.5"):
        group_band(values, low=0.6, high=0.5)


def test_sampling_inside_group_is_weighted():
    weights = np.array([[0.0, 0.0, 1.0, 3.0]])
    rng = np.random.default_rng(0)
    draws = [sample_group_pixel(weights, low=0.0, high=1.0, rng=rng) for _ in range(4000)]
    share_of_heavy = sum(1 for d in draws if d == (3, 0)) / len(draws)
    assert abs(share_of_heavy - 0.75) < 0.03
    assert sample_group_pixel(np.zeros((2, 2)), low=0.0, high=1.0, rng=rng) is None


def test_group_clicker_reuses_round_one_map_and_falls_back_on_empty_map():
    gt = _square(shape=(10, 10), rows=(2, 8), cols=(2, 8))
    calls = []

    def zero_map(image, gt_mask, error):
        calls.append(error.sum())
        return np.zeros(error.shape)

    ramp = np.tile(np.arange(10, dtype=float), (10, 1))  # likelier to the right
    clicker = GroupClicker(
        map_fn=zero_map, low=0.9, high=1.0, rng=np.random.default_rng(1), first_round_map=ramp
    )
    clicker.start(image=np.zeros((10, 10, 3), np.uint8), gt=gt, ignore=np.zeros_like(gt))
    (first,) = clicker.next_clicks(np.zeros_like(gt))
    assert calls == [] and first.is_positive and first.x == 7.0  # the top 10 % of mass is column 7
    pred = gt.copy()
    pred[2:8, 2:5] = False  # fn block on the left, no fp
    (second,) = clicker.next_clicks(pred)
    assert calls == [18]  # map_fn got the 6x3 fn region
    # Zero map -> the baseline click of that error type: first deepest fn pixel.
    assert second == Click(3.0, 3.0, True)


def test_restored_group_clicker_with_the_streams_state_continues_as_if_never_stopped():
    gt = _square(shape=(12, 12), rows=(1, 11), cols=(1, 11))
    ignore = np.zeros_like(gt)
    image = np.zeros((12, 12, 3), np.uint8)
    preds = [np.zeros_like(gt), gt & (np.arange(12)[None, :] < 6), gt & (np.arange(12)[:, None] < 7), gt]
    make = lambda rng: GroupClicker(map_fn=_uniform_map, low=0.2, high=0.9, rng=rng)  # noqa: E731

    whole = make(np.random.default_rng(3))
    whole.start(image=image, gt=gt, ignore=ignore)
    expected = [whole.next_clicks(pred)[0] for pred in preds]

    rng = np.random.default_rng(3)
    first = make(rng)
    first.start(image=image, gt=gt, ignore=ignore)
    clicks = [first.next_clicks(pred)[0] for pred in preds[:2]]
    state = rng.bit_generator.state  # what the evaluation server stores with the clicks
    again = np.random.default_rng(99)
    again.bit_generator.state = state
    restored = make(again)
    restored.restore(image=image, gt=gt, ignore=ignore, clicks=clicks)
    assert clicks + [restored.next_clicks(pred)[0] for pred in preds[2:]] == expected
    assert len(set((c.x, c.y) for c in expected)) == 4  # restored: the clicked pixels stay excluded


def _uniform_map(image, gt, error):
    return error.astype(float)


def test_replay_clicker_replays_each_click_once_clipped_without_touching_input():
    recorded = np.array([[3.0, 4.0], [-5.0, 50.0]])
    clicker = ReplayClicker(recorded)
    image, gt = np.zeros((10, 20, 3), np.uint8), np.ones((10, 20), bool)
    clicker.start(image=image, gt=gt, ignore=~gt)
    assert clicker.next_clicks(~gt) == [Click(3.0, 4.0, True)]
    assert clicker.next_clicks(~gt) == []
    clicker.start(image=image, gt=gt, ignore=~gt)
    assert clicker.next_clicks(~gt) == [Click(0.0, 9.0, True)]
    assert recorded.tolist() == [[3.0, 4.0], [-5.0, 50.0]]
    with pytest.raises(ClickerError, match="only 2 recorded clicks"):
        clicker.start(image=image, gt=gt, ignore=~gt)


def _simulator(**kw) -> AnnotatorSimulator:
    kw.setdefault("rng", np.random.default_rng(0))
    return AnnotatorSimulator(**kw)


def test_annotator_center_click_without_noise():
    gt = _square(shape=(9, 9), rows=(2, 7), cols=(2, 7))
    sim = _simulator(noise_sigma_px=0.0, clicks_per_round=1)
    sim.start(image=np.zeros((9, 9, 3), np.uint8), gt=gt, ignore=np.zeros_like(gt))
    assert sim.next_clicks(np.zeros_like(gt)) == [Click(4.0, 4.0, True)]


def test_annotator_ignores_small_regions_and_splits_a_region_among_its_clicks():
    gt = np.zeros((5, 40), bool)
    gt[1:4, 1:39] = True  # one long 3x38 region
    sim = _simulator(noise_sigma_px=0.0, clicks_per_round=2)
    sim.start(image=np.zeros((5, 40, 3), np.uint8), gt=gt, ignore=np.zeros_like(gt))
    clicks = sim.next_clicks(np.zeros_like(gt))
    assert sorted(c.x < 20 for c in clicks) == [False, True]  # one click per half
    small = _simulator(noise_sigma_px=0.0, min_region_px=200)
    small.start(image=np.zeros((5, 40, 3), np.uint8), gt=gt, ignore=np.zeros_like(gt))
    assert small.next_clicks(np.zeros_like(gt)) == []


def test_annotator_picks_regions_in_proportion_to_area_and_marks_sign():
    gt = np.zeros((20, 40), bool)
    gt[2:8, 2:8] = True  # 36 px fn region
    pred = np.zeros_like(gt)
    pred[2:20, 20:26] = True  # 108 px fp region
    sim = _simulator(noise_sigma_px=0.0, clicks_per_round=1, rng=np.random.default_rng(3))
    signs = []
    for _ in range(600):
        sim.start(image=np.zeros((20, 40, 3), np.uint8), gt=gt, ignore=np.zeros_like(gt))
        (click,) = sim.next_clicks(pred)
        signs.append(click.is_positive)
        assert gt[int(click.y), int(click.x)] == click.is_positive
    assert abs(np.mean(signs) - 36 / 144) < 0.05


def test_annotator_boundary_mode_and_noise_scale():
    gt = _square(shape=(60, 60), rows=(10, 50), cols=(10, 50))
    sim = _simulator(noise_sigma_px=0.0, mode="boundary", clicks_per_round=4)
    sim.start(image=np.zeros((60, 60, 3), np.uint8), gt=gt, ignore=np.zeros_like(gt))
    for click in sim.next_clicks(np.zeros_like(gt)):
        x, y = int(click.x), int(click.y)
        assert gt[y, x] and x in (10, 49) or y in (10, 49)
    noisy = _simulator(noise_sigma_px=3.0, clicks_per_round=1, rng=np.random.default_rng(5))
    offsets = []
    for _ in range(400):
        noisy.start(image=np.zeros((60, 60, 3), np.uint8), gt=gt, ignore=np.zeros_like(gt))
        (click,) = noisy.next_clicks(np.zeros_like(gt))
        offsets.append((click.x - 29.0, click.y - 29.0))  # noiseless centre is (29, 29)
    assert abs(np.std(np.array(offsets)) - 3.0) < 0.3
    with pytest.raises(ValueError, match="mode='edge'"):
        _simulator(mode="edge")


def test_annotator_clicks_the_largest_region_first():
    # seed 001 §5.2.1: annotators click the largest error region first, then the smaller ones.
    gt = np.zeros((40, 80), bool)
    gt[2:8, 2:8] = True  # 36 px missed region (fn)
    pred = np.zeros_like(gt)
    pred[10:40, 40:70] = True  # 900 px wrongly included region (fp)
    orders = set()
    for seed in range(40):
        sim = _simulator(noise_sigma_px=0.0, clicks_per_round=4, rng=np.random.default_rng(seed))
        sim.start(image=np.zeros((40, 80, 3), np.uint8), gt=gt, ignore=np.zeros_like(gt))
        signs = [click.is_positive for click in sim.next_clicks(pred)]
        assert signs == sorted(signs), f"the large fp region's clicks come first: {signs}"
        orders.add(tuple(signs))
    assert (False, False, False, True) in orders, "the small region gets a click now and then, last"


def test_annotator_uniform_mode_spreads_clicks_inside_the_region_parts():
    # seed 001 §4.1: the campaign's annotators clicked near-uniformly inside the error regions.
    gt = _square(shape=(60, 60), rows=(10, 50), cols=(10, 50))
    sim = _simulator(noise_sigma_px=0.0, mode="uniform", clicks_per_round=1, rng=np.random.default_rng(2))
    points = []
    for _ in range(300):
        sim.start(image=np.zeros((60, 60, 3), np.uint8), gt=gt, ignore=np.zeros_like(gt))
        (click,) = sim.next_clicks(np.zeros_like(gt))
        assert gt[int(click.y), int(click.x)] and click.is_positive
        points.append((click.x, click.y))
    xs, ys = np.array(points).T
    # uniform over columns/rows 10..49: mean 29.5, sd 40 / sqrt(12) = 11.5 (the centre mode gives sd 0)
    assert abs(xs.mean() - 29.5) < 2 and abs(ys.mean() - 29.5) < 2
    assert 10 < xs.std() < 13 and 10 < ys.std() < 13


def test_seed_001_annotator_has_the_seeds_numbers():
    sim = AnnotatorSimulator.seed_001(rng=np.random.default_rng(0))
    assert (sim.noise_sigma_px, sim.min_region_px, sim.clicks_per_round, sim.mode) == (3.0, 100, 4, "center")
    gt = np.zeros((40, 40), bool)
    gt[5:14, 5:16] = True  # 99 px: under the seed's 10 x 10 px, left alone
    sim.start(image=np.zeros((40, 40, 3), np.uint8), gt=gt, ignore=np.zeros_like(gt))
    assert sim.next_clicks(np.zeros_like(gt)) == []
