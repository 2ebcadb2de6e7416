from __future__ import annotations

import numpy as np
import pytest

from benchmark.metrics import iou, iou_auc, miou_at, miou_curve, noc, nof, ritm_threshold


def test_iou_excludes_the_ignore_band():
    gt = np.array([[1, 1, 1, 0]], bool)
    pred = np.array([[1, 1, 0, 1]], bool)
    assert iou(pred, gt) == pytest.approx(2 / 4)
    ignore = np.array([[0, 0, 0, 1]], bool)  # the fp pixel is in the band
    assert iou(pred, gt, ignore) == pytest.approx(2 / 3)
    assert iou(np.zeros((2, 2), bool), np.zeros((2, 2), bool)) == 1.0
    with pytest.raises(ValueError, match=r"\(1, 3\) differs from the GT shape \(1, 4\)"):
        iou(pred[:, :3], gt)


def test_noc_exact_threshold_and_ritm_float_quirk():
    gt = np.zeros((1, 10), bool)
    gt[0, :9] = True
    exactly_090 = iou(np.ones((1, 10), bool), gt)  # 9 / 10
    assert exactly_090 == 0.9
    ious = [0.5, exactly_090, 0.95]
    assert noc(ious, 0.90) == 2
    assert noc(ious, 0.90, ritm_float_quirk=True) == 2  # float32: 0.9f >= float32(0.9000000000000001)
    just_below = [0.5, 0.89999995, 0.8999999, 0.95]  # the first rounds to 0.9f in float32, the second not
    assert noc(just_below, 0.90) == 4
    assert noc(just_below, 0.90, ritm_float_quirk=True) == 2
    assert noc([0.5, 0.85], 0.85, ritm_float_quirk=True) == 2
    # RITM's own arithmetic: a float32 IoU array against the np.arange threshold, compared in float32
    ritm_ious = np.array(just_below, dtype=np.float32)
    ritm_thr = np.float32(np.arange(0.80, 0.90 + 0.001, 0.05)[-1])
    assert int(np.argmax(ritm_ious >= ritm_thr)) + 1 == 2
    assert noc([0.5, 0.6], 0.85) == 20
    assert noc([0.5, 0.6], 0.85, max_clicks=2) == 2
    assert ritm_threshold(0.85) == 0.8500000000000001
    with pytest.raises(ValueError, match="got 0.87"):
        ritm_threshold(0.87)


def test_nof_counts_ritm_failures_and_the_strict_variant():
    trajectories = [np.r_[np.full(19, 0.5), 0.95], np.full(20, 0.5), np.r_[0.95, np.full(19, 0.95)]]
    nocs = [noc(t, 0.9) for t in trajectories]
    assert nocs == [20, 20, 1]
    assert nof(nocs) == 2  # RITM: success exactly at click 20 is a failure too
    assert nof(nocs, count_last_click_success=False, ious=trajectories, threshold=0.9) == 1
    with pytest.raises(ValueError, match="needs ious"):
        nof(nocs, count_last_click_success=False)


def test_iou_auc_and_miou_curve_by_hand():
    assert iou_auc([0.5, 0.7, 0.9]) == pytest.approx((0.25 + 0.7 + 0.45) / 2)
    assert iou_auc([0.4]) == 0.4
    curve = miou_curve([np.array([0.2, 0.4, 0.6]), np.array([0.4, 0.8])])
    np.testing.assert_allclose(curve, [0.3, 0.6])
    assert miou_at(curve, (1, 2, 3)) == {1: pytest.approx(0.3), 2: pytest.approx(0.6)}


def test_quality_time_curve_by_hand():
    from benchmark.metrics import quality_time_curve

    ious = np.array([[0.5, 0.9, np.nan], [0.1, 0.3, 0.7]])  # the first trajectory stopped after 2 clicks
    seconds = np.array([[2.0, 1.0, np.nan], [1.0, 1.0, 1.0]])
    curve = quality_time_curve(ious, seconds)
    assert curve["seconds"] == [0.0, 1.5, 2.5, 3.0]
    assert curve["miou"] == pytest.approx([0.0, 0.3, 0.6, 0.8])
    area = 1.5 * 0.15 + 1.0 * 0.45 + 0.5 * 0.7
    assert curve["auc"] == pytest.approx(area / 3.0)
    assert np.isnan(quality_time_curve(ious, np.zeros_like(ious))["auc"])
    with pytest.raises(ValueError, match="equal"):
        quality_time_curve(ious, seconds[:, :2])
