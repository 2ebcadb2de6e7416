"""#15.6: the cheaper per-click paths give the very same numbers as the plain full-image ones.

The distance transforms are compared with SciPy's exact full-frame ``distance_transform_edt``.
"""

from __future__ import annotations

import math
import sys
from concurrent.futures import ThreadPoolExecutor

import cv2
import numpy as np
import pytest
from scipy import ndimage

from benchmark import clickers, distance
from benchmark.clickability.click_model import load_click_model
from benchmark.clickers import (
    GroupClicker,
    deepest_point,
    error_regions,
    group_band,
    padded_distance,
    ritm_choice,
    sample_group_pixel,
    sample_sparse,
)
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


def _scipy_padded(mask):
    """The plain full-frame exact transform with RITM's 1-px zero border (SciPy, float64 -> float32)."""
    return ndimage.distance_transform_edt(np.pad(mask, 1))[1:-1, 1:-1].astype(np.float32)


def _masks(rng, count, *, max_side=90):
    """Random blob masks; some fill a border row/column or the whole image but one pixel."""
    for trial in range(count):
        height, width = (int(v) for v in rng.integers(2, max_side, 2))
        mask = _blobs(rng, height, width)
        if trial % 4 == 1:
            mask[:, -1] = True  # touches the right edge
        elif trial % 4 == 2:
            mask[0, :] |= rng.random(width) > 0.3  # the top edge
        elif trial % 8 == 3:
            mask[:] = True
            mask[int(rng.integers(height)), int(rng.integers(width))] = False
        yield mask


def test_padded_distance_is_scipys_exact_full_frame_transform():
    """OpenCV's DIST_MASK_PRECISE (the former padded_distance) is an ulp off on some of these masks."""
    rng = np.random.default_rng(11)
    for mask in _masks(rng, 200, max_side=300):
        assert np.array_equal(padded_distance(mask), _scipy_padded(mask))


def test_box_distance_equals_the_full_frame_transform_in_the_box_for_both_border_rules():
    rng = np.random.default_rng(12)
    masks = list(_masks(rng, 200))
    big = np.zeros((700, 820), bool)  # squared diagonal > 2**20: the SciPy path
    big[1:699, 3:800] = rng.random((698, 797)) > 0.001
    masks.append(big)
    for mask in masks:
        distance.clear_cache()
        box = distance.mask_box(mask)
        found = distance.box_distance(mask, border=True)
        if box is None:
            assert found is None
            continue
        y0, y1, x0, x1 = box
        dist, got_box = found
        assert got_box == box and not dist.flags.writeable
        assert np.array_equal(dist, _scipy_padded(mask)[y0:y1, x0:x1])
        if not mask.all():
            unpadded, _ = distance.box_distance(mask, border=False)
            expected = ndimage.distance_transform_edt(mask).astype(np.float32)[y0:y1, x0:x1]
            assert np.array_equal(unpadded, expected)
    with pytest.raises(ValueError, match=r"covers the whole 3x4 image"):
        distance.box_distance(np.ones((3, 4), bool), border=False)


def test_padded_transform_capped_from_the_unpadded_one_in_either_order():
    """On the image edge the padded transform is the unpadded one capped by the distance beyond the edge."""
    rng = np.random.default_rng(17)
    masks = [mask for mask in _masks(rng, 200) if mask.any() and not mask.all()]
    big = np.zeros(
        (700, 820), bool
    )  # touching the edge with a squared diagonal > 2**20: transformed directly
    big[0:699, 3:820] = rng.random((699, 817)) > 0.001
    full_ring = np.ones(
        (30, 40), bool
    )  # no pixel off the mask but one inside the image: transformed directly
    full_ring[29, 39] = False
    edge = [m for m in masks if distance.mask_box(m)[0] == 0 or distance.mask_box(m)[2] == 0]
    assert len(edge) > 50
    for mask in [*masks, big, full_ring]:
        y0, y1, x0, x1 = distance.mask_box(mask)
        padded = _scipy_padded(mask)[y0:y1, x0:x1]
        unpadded = ndimage.distance_transform_edt(mask).astype(np.float32)[y0:y1, x0:x1]
        for order in ((True, False), (False, True)):
            distance.clear_cache()
            for border in order:
                got, _ = distance.box_distance(mask, border=border)
                assert np.array_equal(got, padded if border else unpadded), (border, order)


def test_coarse_distance_bound_holds():
    rng = np.random.default_rng(18)
    for mask in _masks(rng, 300):
        box = distance.mask_box(mask)
        largest = _scipy_padded(mask).max(initial=0.0)
        for block_px in (1, 2, 3, 4, 8):
            assert largest <= distance.coarse_distance_bound(mask, box, block_px=block_px)
    mask = np.zeros((60, 60), bool)
    mask[10:50, 10:50] = True  # a 40-px square: largest padded distance 20
    assert 20 <= distance.coarse_distance_bound(mask, distance.mask_box(mask)) <= 20 * distance.BOUND_MARGIN


def test_distance_upper_bound_holds():
    rng = np.random.default_rng(13)
    for mask in _masks(rng, 300):
        assert _scipy_padded(mask).max(initial=0.0) <= distance.distance_upper_bound(
            mask, distance.mask_box(mask)
        )


def test_transform_cache_returns_the_same_array_and_sees_any_change():
    distance.clear_cache()
    mask = np.zeros((40, 50), bool)
    mask[5:20, 8:30] = True
    first, box = distance.box_distance(mask, border=True)
    again, _ = distance.box_distance(mask.copy(), border=True)  # equal content, another array
    assert again is first and distance.cache_stats() == (1, 1)
    # inside the image both border rules are one transform
    assert distance.box_distance(mask, border=False)[0] is first
    mask[10, 10] = False  # changed in place: a new transform
    changed, same_box = distance.box_distance(mask, border=True)
    assert same_box == box and changed is not first and not np.array_equal(changed, first)
    assert np.array_equal(changed, _scipy_padded(mask)[5:20, 8:30])
    mask[10, 10] = True
    assert distance.box_distance(mask, border=True)[0] is first  # still among the last 4
    edge = np.zeros((40, 50), bool)
    edge[0:10, 0:10] = True  # on the edge the rules differ: two entries
    assert not np.array_equal(
        distance.box_distance(edge, border=True)[0], distance.box_distance(edge, border=False)[0]
    )
    for shift in range(4):  # four newer transforms push the first one out
        other = np.zeros((40, 50), bool)
        other[2 + shift : 30, 3:40] = True
        distance.box_distance(other, border=True)
    hits, misses = distance.cache_stats()
    assert distance.box_distance(mask, border=True)[0] is not first
    assert distance.cache_stats() == (hits, misses + 1)
    with pytest.raises(ValueError, match="read-only"):
        first[0, 0] = 1.0


def test_ritm_choice_with_skipped_transforms_is_the_two_transform_rule():
    rng = np.random.default_rng(14)
    for trial in range(300):
        height, width = (int(v) for v in rng.integers(2, 70, 2))
        gt = _blobs(rng, height, width)
        pred = _blobs(rng, height, width) if trial % 5 else np.zeros((height, width), bool)
        ignore = rng.random((height, width)) > 0.95
        not_clicked = rng.random((height, width)) > 0.02
        fn, fp = error_regions(gt=gt, ignore=ignore, pred=pred)
        max_fn, at_fn = deepest_point(fn, not_clicked)
        max_fp, at_fp = deepest_point(fp, not_clicked)
        positive = bool(max_fn > max_fp)
        assert ritm_choice(fn, fp, not_clicked) == (positive, at_fn if positive else at_fp)


def _choice_is_the_two_transform_rule(
    fn: np.ndarray, fp: np.ndarray, not_clicked: np.ndarray
) -> tuple[int, float, float]:
    """Assert ``ritm_choice`` chooses as two full transforms do; (transforms it looked up, max fn, max fp)."""
    max_fn, at_fn = deepest_point(fn, not_clicked)
    max_fp, at_fp = deepest_point(fp, not_clicked)
    positive = bool(max_fn > max_fp)
    distance.clear_cache()
    assert ritm_choice(fn, fp, not_clicked) == (positive, at_fn if positive else at_fp)
    return sum(distance.cache_stats()), max_fn, max_fp


def test_ritm_choice_on_large_regions_skips_the_losers_transform_by_the_coarse_bound():
    """Regions above COARSE_MIN_PX: the same choice as the two-transform rule, and the coarse bound decides
    where the box-and-count bound does not (one transform looked up instead of two)."""
    rng = np.random.default_rng(19)
    decided_by_coarse = 0
    for _ in range(100):
        height, width = (int(v) for v in rng.integers(80, 160, 2))
        gt = _blobs(rng, height, width)
        pred = _blobs(rng, height, width)
        not_clicked = rng.random((height, width)) > 0.001
        fn, fp = error_regions(gt=gt, ignore=np.zeros_like(gt), pred=pred)
        lookups, max_fn, max_fp = _choice_is_the_two_transform_rule(fn, fp, not_clicked)
        crude_fn = distance.distance_upper_bound(fn, distance.mask_box(fn))
        crude_fp = distance.distance_upper_bound(fp, distance.mask_box(fp))
        crude_decides = max_fn > crude_fp if crude_fn >= crude_fp else max_fp >= crude_fn
        if lookups == 1 and not crude_decides:
            decided_by_coarse += 1
    assert decided_by_coarse >= 5  # 6 of these 100 (seeded); none without the coarse bound


def test_dt_click_model_is_the_normalised_exact_transform():
    model = load_click_model("dt")
    rng = np.random.default_rng(15)
    for mask in _masks(rng, 150):
        image = np.zeros(mask.shape + (3,), np.uint8)
        got = model(image, mask, mask)
        assert got.dtype == np.float32
        if mask.all():
            continue
        exact = ndimage.distance_transform_edt(mask).astype(np.float32)
        expected = exact / exact.max() if mask.any() else exact
        assert np.array_equal(got, expected)


def test_group_clickers_sharing_round_one_click_as_clickers_that_do_not():
    rng = np.random.default_rng(16)
    model = load_click_model("dt")
    for _ in range(20):
        height, width = (int(v) for v in rng.integers(10, 60, 2))
        gt = _blobs(rng, height, width)
        ignore = rng.random((height, width)) > 0.97
        image = np.zeros((height, width, 3), np.uint8)
        first_map = model(image, gt, gt & ~ignore)
        shared: dict = {}
        for low, high in ((0.0, 0.1), (0.5, 0.6), (0.9, 1.0), (0.0, 1.0)):
            seed = int(rng.integers(1 << 30))
            clicks = []
            for cache in (shared, None):
                clicker = GroupClicker(map_fn=model, low=low, high=high, rng=np.random.default_rng(seed),
                                       first_round_map=first_map, shared_cache=cache)  # fmt: skip
                clicker.start(image=image, gt=gt, ignore=ignore)
                pred = np.zeros((height, width), bool)
                trajectory = []
                for _ in range(3):
                    (click,) = clicker.next_clicks(pred)
                    trajectory.append(click)
                    pred = pred.copy()
                    pred[int(click.y), int(click.x)] ^= True
                clicks.append(trajectory)
            assert clicks[0] == clicks[1]
        assert "round1_step" in shared


def test_deepest_point_on_the_box_is_the_full_image_argmax():
    rng = np.random.default_rng(4)
    for _ in range(100):
        height, width = (int(v) for v in rng.integers(4, 90, 2))
        mask = _blobs(rng, height, width) if rng.random() > 0.1 else np.zeros((height, width), bool)
        not_clicked = rng.random((height, width)) > 0.03
        values = _scipy_padded(mask) * not_clicked
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


def test_mask_box_by_hand():
    """One box helper serves the clickers, the IoU, the object box and the crops: exclusive ends, (y0, y1, x0, x1)."""
    mask = np.zeros((6, 8), bool)
    mask[1:4, 2:7] = True
    mask[1, 2] = False  # a hole at a corner leaves the box as it is
    assert distance.mask_box(mask) == (1, 4, 2, 7)
    single = np.zeros((6, 8), bool)
    single[5, 7] = True
    assert distance.mask_box(single) == (5, 6, 7, 8)
    assert distance.mask_box(np.zeros((6, 8), bool)) is None


def test_chessboard_distance_bound_holds_and_is_tight_on_scattered_holes():
    rng = np.random.default_rng(20)
    for mask in _masks(rng, 300):
        box = distance.mask_box(mask)
        assert _scipy_padded(mask).max(initial=0.0) <= distance.chessboard_distance_bound(mask, box)
    holes = rng.random((120, 160)) > 0.1  # every 4x4 block holds a mask pixel: the coarse bound is loose
    box = distance.mask_box(holes)
    exact = float(_scipy_padded(holes).max())
    assert (
        distance.chessboard_distance_bound(holes, box)
        <= 1.5 * exact
        < distance.coarse_distance_bound(holes, box)
    )


def test_windowed_maximum_is_the_exact_maximum_over_every_pixel_that_can_reach_the_target():
    """Against SciPy's full-frame transform: the returned maximum decides `max < target` and `max <= target`
    exactly as the full transform's maximum does, and equals it whenever it reaches the target."""
    rng = np.random.default_rng(21)
    windowed = 0
    masks = [m for m in _masks(rng, 200, max_side=120) if m.any()]
    one = np.zeros((50, 60), bool)
    one[20, 30] = True  # one pixel
    corner = np.zeros((50, 60), bool)
    corner[:30, :25] = True  # touches two image edges
    full = np.ones((40, 40), bool)  # the whole image: the image edge is the only boundary
    for mask in [*masks, one, corner, full]:
        box = distance.mask_box(mask)
        not_clicked = rng.random(mask.shape) > 0.01
        exact = _scipy_padded(mask) * not_clicked
        largest = float(exact.max())
        coarse = distance.coarse_distance_map(mask, box)
        for target in (
            0.0,
            1.0,
            largest / 2,
            largest * 0.9,
            largest,
            np.nextafter(largest, 0),
            largest + 0.5,
        ):
            target = float(target)
            top = distance.windowed_maximum(mask, box, not_clicked, coarse, target)
            if top is None:
                continue
            windowed += 1
            assert (top < target) == (largest < target) and (top <= target) == (largest <= target)
            if largest >= target:
                assert top == largest
    assert windowed >= 20  # 25 here (seeded); the others exceed the window limit


def test_ritm_choice_on_scattered_and_solid_regions_is_the_two_transform_rule():
    """Large regions where the coarse bound is loose (scattered holes) or close to the winner's maximum:
    the chessboard bound and the windowed maximum skip transforms and choose as the two-transform rule."""
    rng = np.random.default_rng(22)
    skipped = 0
    for trial in range(60):
        height, width = (int(v) for v in rng.integers(90, 200, 2))
        gt = _blobs(rng, height, width)
        if trial % 2:
            pred = rng.random((height, width)) > rng.uniform(0.2, 0.8)  # a random-init model's speckle
        else:
            pred = _blobs(rng, height, width)
        not_clicked = rng.random((height, width)) > 0.001
        fn, fp = error_regions(gt=gt, ignore=np.zeros_like(gt), pred=pred)
        skipped += _choice_is_the_two_transform_rule(fn, fp, not_clicked)[0] == 1
    assert skipped >= 30


def _mass_maps(rng):
    """Positive float32 value sets: DT-like, random, ties, one value, subnormals, and wide ranges (not exact)."""
    for trial in range(120):
        size = int(rng.integers(1, 5000))
        kind = trial % 8
        if kind == 0:  # the DT click model's values: sqrt of integers over the maximum
            distances = np.sqrt(rng.integers(1, 40_000, size).astype(np.float32))
            values = distances / distances.max()
        elif kind == 1:
            values = rng.random(size).astype(np.float32) + np.float32(1e-3)
        elif kind == 2:  # heavy ties
            values = rng.integers(1, 5, size).astype(np.float32) / np.float32(4)
        elif kind == 3:
            values = np.full(size, np.float32(0.37))
        elif kind == 4:  # float32 subnormals only: exact, with a tiny quantum
            values = rng.integers(1, 1000, size).astype(np.float32) * np.float32(1e-42)
        elif kind == 5:  # 1e-9 .. 1: a smallest value too small for exact sums
            values = np.exp(rng.uniform(np.log(1e-9), 0, size)).astype(np.float32)
        elif kind == 6:  # a bucket boundary's neighbours: consecutive float32 values
            values = np.nextafter(np.float32(0.5), np.float32(1), dtype=np.float32) * np.ones(
                size, np.float32
            )
            values[::3] = np.float32(0.5)
            values[::7] = np.nextafter(np.float32(0.5), np.float32(0), dtype=np.float32)
        else:
            values = np.float32(1 + rng.random(size) * 1000)
        yield kind, np.ascontiguousarray(values, np.float32)


def test_group_mass_band_limits_and_sums_are_the_sorted_cumulative_sums():
    """The bucketed exact path (no sort) gives the same total, band limits and band sums as
    ``np.cumsum(np.sort(values))`` and the full-size pairwise ``np.sum`` (and says when it is not exact)."""
    rng = np.random.default_rng(31)
    exact_kinds: set[int] = set()
    fallback_kinds: set[int] = set()
    for kind, narrow in _mass_maps(rng):
        values = narrow.astype(np.float64)
        rng.shuffle(values)
        narrow = values.astype(np.float32)
        ordered = np.sort(values)
        cumulative = np.cumsum(ordered)
        for mass in (clickers._GroupMass(values, narrow), clickers._GroupMass(values)):
            (exact_kinds if mass.exact else fallback_kinds).add(kind)
            assert mass.total == cumulative[-1]
            assert (mass.min_value, mass.max_value) == (ordered[0], ordered[-1])
            for fraction in (0.0, 1e-9, 0.1, 0.3, 0.5, 0.77, 0.9, 1.0, *rng.random(3)):
                target = float(fraction) * mass.total
                for side in ("left", "right"):
                    expected = ordered[
                        min(int(np.searchsorted(cumulative, target, side=side)), len(ordered) - 1)
                    ]
                    assert mass.value_at(target, side) == expected, (kind, fraction, side)
            size = values.size + int(rng.integers(0, 3000))
            positions = np.sort(rng.choice(size, values.size, replace=False))
            keep = rng.random(values.size) > 0.4
            layout = np.zeros(size)
            layout[positions[keep]] = values[keep]
            assert mass.band_sum(positions[keep], values[keep], size) == layout.sum()
    assert exact_kinds == {0, 1, 2, 3, 4, 6, 7} and fallback_kinds == {5}


def test_exactness_rule_holds_sums_in_any_order_are_the_exact_sum():
    rng = np.random.default_rng(32)
    checked = 0
    for _, narrow in _mass_maps(rng):
        if not clickers._sums_are_exact(narrow):
            continue
        values = narrow.astype(np.float64)
        exact = math.fsum(values)
        assert (
            values.sum() == exact and np.cumsum(values)[-1] == exact and np.cumsum(values[::-1])[-1] == exact
        )
        checked += 1
    assert checked > 80
    worst_640x480 = np.ones(
        640 * 480, np.float32
    )  # a DT map: every pixel at the 800-px diagonal but one at 1 px
    worst_640x480[0] = np.float32(1) / np.float32(800)
    assert clickers._sums_are_exact(worst_640x480)
    assert not clickers._sums_are_exact(np.concatenate([worst_640x480, np.ones(1920 * 1080, np.float32)]))
    assert not clickers._sums_are_exact(np.array([1e-20, 1.0], np.float32))
    assert not clickers._sums_are_exact(np.array([0.0, 1.0], np.float32))
    assert not clickers._sums_are_exact(np.array([1.0, np.inf], np.float32))


def test_group_sampling_on_float32_maps_draws_what_the_full_image_choice_draws():
    """The engine's path: float32 maps (exact and not) through sample_sparse with a shared mass."""
    rng = np.random.default_rng(33)
    paths = set()
    for trial in range(120):
        height, width = (int(v) for v in rng.integers(4, 90, 2))
        mask = _blobs(rng, height, width)
        if trial % 2:
            base = ndimage.distance_transform_edt(mask).astype(np.float32)
            base /= max(float(base.max()), 1.0)
        else:  # spanning 1e-12 .. 1: the sorted path
            base = np.exp(rng.uniform(np.log(1e-12), 0, (height, width))).astype(np.float32)
        weights = (base * mask).astype(np.float32)
        positions = np.flatnonzero(weights > 0)
        if positions.size == 0:
            continue
        narrow = weights.ravel()[positions]
        values = narrow.astype(np.float64)
        mass = clickers._GroupMass(values, narrow)
        paths.add(mass.exact)
        for low, high in ((0.0, 0.1), (0.3, 0.4), (0.9, 1.0), (0.0, 1.0), (0.0, 0.0), (1.0, 1.0)):
            seed = int(rng.integers(1 << 30))
            first, second = np.random.default_rng(seed), np.random.default_rng(seed)
            drawn = sample_sparse(
                positions, values, weights.size, low=low, high=high, rng=first, group_mass=mass
            )
            expected = _plain_sample(weights, low, high, second)
            assert (None if drawn is None else (drawn % width, drawn // width)) == expected
            assert first.random() == second.random()
    assert paths == {True, False}


def test_full_layout_sums_in_threads_at_once_are_the_serial_sums():
    """The reused zero buffer of the full-layout sum is per thread (a shared one mixes the threads' values)."""
    rng = np.random.default_rng(34)
    size = 120_000
    jobs = []
    for _ in range(8):
        positions = np.sort(rng.choice(size, 50_000, replace=False))
        jobs.append((positions, rng.random(positions.size)))

    def sums(job):
        positions, values = job
        return [clickers._full_sum(positions, values, size) for _ in range(40)]

    serial = [sums(job) for job in jobs]
    assert all(len(set(row)) == 1 for row in serial)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often: a shared buffer fails every run here
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            concurrent = list(pool.map(sums, jobs))
    finally:
        sys.setswitchinterval(interval)
    assert concurrent == serial
