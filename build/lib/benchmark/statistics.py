"""RClicks benchmark statistics over instances and clicking groups (protocol §5.5).

Inputs are per-dataset arrays: ``groups`` of shape (I, G) holds a per-instance, per-group value
(NoC@90 or IoU-AuC) with the G groups ordered G1 (least likely clicks) .. G10 (most likely);
``base`` of shape (I,) the same value under the baseline clicker. When several trajectories are
sampled per group, the engine averages them into one value per (instance, group) first.
Every std is the population std (ddof = 0).

Two ΔHH variants:

* *paired* (the reference notebook): mean over i and k = 1..G/2 of a comparison of G_k with G_{k+G/2};
* *merged* (the paper's wording): the two 50 %-mass halves [0, 0.5] and [0.5, 1] are clicking
  groups of their own, sampled separately (``python -m benchmark run --halves``), and compared as
  ΔGR compares G1 with G10.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

NSR_EPS = 1e-9


def _as_groups(groups: np.ndarray) -> np.ndarray:
    values = np.asarray(groups, dtype=np.float64)
    if values.ndim != 2 or values.shape[0] == 0 or values.shape[1] == 0:
        raise ValueError(f"groups must be a non-empty (instances, groups) array; got shape {values.shape}.")
    return values


def _as_base(base: np.ndarray, instances: int) -> np.ndarray:
    values = np.asarray(base, dtype=np.float64)
    if values.shape != (instances,):
        raise ValueError(
            f"base must have shape ({instances},) like the groups' instances; got {values.shape}."
        )
    return values


def _halves(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    count = values.shape[1]
    if count % 2:
        raise ValueError(f"ΔHH pairs G_k with G_(k+G/2) and needs an even number of groups; got {count}.")
    return values[:, : count // 2], values[:, count // 2 :]


def sample_mean(groups: np.ndarray) -> float:
    """Sample value: mean over instances of the mean over groups."""
    return float(_as_groups(groups).mean(axis=1).mean())


def sample_std(groups: np.ndarray) -> float:
    """Sample STD ('±'): mean over instances of the population std over groups."""
    return float(_as_groups(groups).std(axis=1).mean())


def delta_sb_relative(groups: np.ndarray, base: np.ndarray) -> float:
    """ΔSB in %: 100 · mean_i[(mean_g x_{g,i} − b_i) / b_i] (mean of per-instance ratios)."""
    values = _as_groups(groups)
    reference = _as_base(base, values.shape[0])
    return float(100.0 * np.mean((values.mean(axis=1) - reference) / reference))


def delta_gr_relative(groups: np.ndarray) -> float:
    """ΔGR in %: 100 · mean_i[(x_{1,i} − x_{G,i}) / x_{G,i}] (first vs last group)."""
    values = _as_groups(groups)
    return float(100.0 * np.mean((values[:, 0] - values[:, -1]) / values[:, -1]))


def delta_hh_paired_relative(groups: np.ndarray) -> float:
    """ΔHH in %, paired as the reference: 100 · mean_{i,k}[(x_k − x_{k+G/2}) / x_{k+G/2}]."""
    low, high = _halves(_as_groups(groups))
    return float(100.0 * np.mean((low - high) / high))


def delta_hh_merged_relative(low_half: np.ndarray, high_half: np.ndarray) -> float:
    """ΔHH in %, merged halves: 100 · mean_i[(x_{[0,.5],i} − x_{[.5,1],i}) / x_{[.5,1],i}]."""
    low = np.asarray(low_half, dtype=np.float64)
    high = _as_base(high_half, low.shape[0])
    return float(100.0 * np.mean((low - high) / high))


def delta_sb_absolute(groups: np.ndarray, base: np.ndarray) -> float:
    """ΔSB as a plain difference (IoU-AuC): mean_i(mean_g x_{g,i} − b_i)."""
    values = _as_groups(groups)
    return float(np.mean(values.mean(axis=1) - _as_base(base, values.shape[0])))


def delta_gr_absolute(groups: np.ndarray) -> float:
    """ΔGR as a plain difference (IoU-AuC): mean_i(x_{1,i} − x_{G,i})."""
    values = _as_groups(groups)
    return float(np.mean(values[:, 0] - values[:, -1]))


def delta_hh_paired_absolute(groups: np.ndarray) -> float:
    """ΔHH as a plain difference (IoU-AuC), paired: mean_{i,k}(x_k − x_{k+G/2})."""
    low, high = _halves(_as_groups(groups))
    return float(np.mean(low - high))


def delta_hh_merged_absolute(low_half: np.ndarray, high_half: np.ndarray) -> float:
    """ΔHH as a plain difference (IoU-AuC), merged halves: mean_i(x_{[0,.5],i} − x_{[.5,1],i})."""
    low = np.asarray(low_half, dtype=np.float64)
    return float(np.mean(low - _as_base(high_half, low.shape[0])))


def sample_nsr(groups: np.ndarray) -> float:
    """Sample NSR IoU@20: mean_i[std_g AuC_{g,i} / mean_g AuC_{g,i}] (no ε, as the reference)."""
    values = _as_groups(groups)
    return float(np.mean(values.std(axis=1) / values.mean(axis=1)))


def nof_statistics(nof_per_group: Sequence[int] | np.ndarray, nof_base: int) -> dict[str, float]:
    """NoF variants from per-group failure counts (G,): sample, std, ΔSB, ΔGR, ΔHH (paired)."""
    counts = np.asarray(nof_per_group, dtype=np.float64)
    if counts.ndim != 1 or counts.size == 0:
        raise ValueError(f"nof_per_group must be a non-empty (groups,) array; got shape {counts.shape}.")
    result = {
        "sample": float(counts.mean()),
        "std": float(counts.std()),
        "delta_sb": float(counts.mean() - nof_base),
        "delta_gr": float(counts[0] - counts[-1]),
    }
    if counts.size % 2 == 0:
        half = counts.size // 2
        result["delta_hh"] = float(np.mean(counts[:half] - counts[half:]))
    return result


def first_click_statistics(per_instance_ious: Sequence[np.ndarray]) -> dict[str, float]:
    """IoU@1 over real (User) or sampled first clicks.

    ``per_instance_ious``: one float array per instance, the IoU after each single first click.
    Instances without clicks are left out (and counted in ``instances_without_clicks``).
    Returns mean = mean_i mean_j u, std = mean_i std_j u, nsr = mean_i[std_j u / (mean_j u + 1e-9)].
    """
    arrays = [np.asarray(values, dtype=np.float64) for values in per_instance_ious]
    used = [values for values in arrays if values.size]
    if not used:
        nan = float("nan")
        return {"mean": nan, "std": nan, "nsr": nan, "instances": 0, "instances_without_clicks": len(arrays)}
    means = np.array([values.mean() for values in used])
    stds = np.array([values.std() for values in used])
    return {
        "mean": float(means.mean()),
        "std": float(stds.mean()),
        "nsr": float(np.mean(stds / (means + NSR_EPS))),
        "instances": len(used),
        "instances_without_clicks": len(arrays) - len(used),
    }
