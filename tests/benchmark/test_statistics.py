from __future__ import annotations

import numpy as np
import pytest

from benchmark import statistics as S

NOC = np.array([[2, 4, 2, 4], [1, 1, 3, 1]], float)  # 2 instances x 4 groups
BASE = np.array([2, 1], float)


def test_sample_mean_and_std():
    assert S.sample_mean(NOC) == pytest.approx((3 + 1.5) / 2)
    # instance 1: std of 2,4,2,4 = 1; instance 2: std of 1,1,3,1 = sqrt(0.75)
    assert S.sample_std(NOC) == pytest.approx((1 + 0.75**0.5) / 2)


def test_relative_deltas_by_hand():
    assert S.delta_sb_relative(NOC, BASE) == pytest.approx(100 * ((3 - 2) / 2 + (1.5 - 1) / 1) / 2)
    assert S.delta_gr_relative(NOC) == pytest.approx(100 * ((2 - 4) / 4 + 0) / 2)
    # pairs (G1,G3), (G2,G4): 0, 0 | (1-3)/3, 0
    assert S.delta_hh_paired_relative(NOC) == pytest.approx(100 * (-2 / 3) / 4)
    assert S.delta_hh_merged_relative(np.array([3.0, 2.0]), np.array([2.0, 2.0])) == pytest.approx(25.0)
    with pytest.raises(ValueError, match="even number of groups; got 3"):
        S.delta_hh_paired_relative(NOC[:, :3])
    with pytest.raises(ValueError, match=r"base must have shape \(2,\)"):
        S.delta_sb_relative(NOC, np.array([1.0]))


def test_absolute_deltas_and_nsr():
    auc = np.array([[0.5, 0.5, 0.7, 0.3], [0.2, 0.6, 0.2, 0.6]])
    base = np.array([0.4, 0.5])
    assert S.delta_sb_absolute(auc, base) == pytest.approx(((0.5 - 0.4) + (0.4 - 0.5)) / 2)
    assert S.delta_gr_absolute(auc) == pytest.approx(((0.5 - 0.3) + (0.2 - 0.6)) / 2)
    assert S.delta_hh_paired_absolute(auc) == pytest.approx((-0.2 + 0.2 + 0 + 0) / 4)
    assert S.delta_hh_merged_absolute(np.array([0.5, 0.1]), np.array([0.3, 0.3])) == pytest.approx(0.0)
    # instance 1: mean 0.5, std sqrt(0.02); instance 2: mean 0.4, std 0.2
    assert S.sample_nsr(auc) == pytest.approx((0.02**0.5 / 0.5 + 0.2 / 0.4) / 2)


def test_nof_statistics_by_hand():
    result = S.nof_statistics([3, 1, 2, 0], 1)
    assert result["sample"] == 1.5
    assert result["std"] == pytest.approx((5 / 4) ** 0.5)
    assert result["delta_sb"] == 0.5 and result["delta_gr"] == 3 and result["delta_hh"] == 1


def test_first_click_statistics_skip_instances_without_clicks():
    result = S.first_click_statistics([np.array([0.5, 0.7]), np.array([]), np.array([0.9])])
    assert result["mean"] == pytest.approx(0.75)
    assert result["std"] == pytest.approx(0.05)
    assert result["nsr"] == pytest.approx((0.1 / 0.6) / 2, rel=1e-6)
    assert (result["instances"], result["instances_without_clicks"]) == (2, 1)
