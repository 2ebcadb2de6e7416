"""Per-trajectory metrics: IoU with an ignore band, NoC, NoF, IoU-AuC and mIoU@k.

A trajectory is a float array ``ious`` of shape (n_clicks,), the IoU after each click
(``../shared/spec/rclicks-protocol.md`` §5.3, ``session-and-eval.md`` §2.3).

Deliberate choices:

* Thresholds are exact (IoU >= 0.90 counts at 0.90, compared in float64). RITM stores the IoUs of a
  trajectory as float32 (``np.array(ious, dtype=np.float32)``) and compares them with its
  ``np.arange(0.80, t + 0.001, 0.05)`` thresholds (0.8500000000000001, 0.9000000000000001); under
  NumPy 1.x value-based casting that comparison runs in float32, where both sides round to 0.85f/0.9f.
  So in RITM an IoU of exactly 0.85/0.90 *does* count, and so does any IoU within half a float32 ulp
  below it (IoU >= 0.8999999463558197 counts at 0.90). ``ritm_float_quirk=True`` reproduces exactly
  that float32 comparison.
* NoF follows RITM/RClicks: an instance fails when NoC == max_clicks, which also counts the
  instances that reach the threshold exactly at the last click. ``count_last_click_success=False``
  counts only the instances that never reach it.
* IoU of an empty prediction against an empty object (union empty) is 1.0, not NaN.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from benchmark.distance import mask_box

DEFAULT_MAX_CLICKS = 20


def iou(pred: np.ndarray, gt: np.ndarray, ignore: np.ndarray | None = None) -> float:
    """|P & G| / |P | G| over the pixels outside ``ignore`` (bool (H, W) arrays); 1.0 if the union is empty."""
    if pred.shape != gt.shape:
        raise ValueError(f"iou: prediction shape {pred.shape} differs from the GT shape {gt.shape}.")
    pred, gt = pred.astype(bool), gt.astype(bool)
    if ignore is not None:
        valid = ~ignore.astype(bool)
        pred, gt = pred & valid, gt & valid
    union = int(np.count_nonzero(pred | gt))
    if union == 0:
        return 1.0
    return int(np.count_nonzero(pred & gt)) / union


class InstanceIoU:
    """``iou(pred, gt, ignore)`` for many predictions of one instance, counted on the union's box only.

    The GT side (valid pixels, their box and count) is prepared once; each call finds the prediction's
    box (two ``any`` passes) and counts inside the union of both boxes: |P & G| and |P| there, and
    |P | G| = |P| + |G| - |P & G|. The counts are integers, so the value is the very float :func:`iou`
    returns.
    """

    def __init__(self, gt: np.ndarray, ignore: np.ndarray | None = None) -> None:
        gt = gt.astype(bool)
        self.shape = gt.shape
        self.valid = None if ignore is None else ~ignore.astype(bool)
        self.gt_valid = gt if self.valid is None else gt & self.valid
        self.gt_box = mask_box(self.gt_valid)
        self.gt_count = int(np.count_nonzero(self.gt_valid))

    def __call__(self, pred: np.ndarray) -> float:
        if pred.shape != self.shape:
            raise ValueError(f"iou: prediction shape {pred.shape} differs from the GT shape {self.shape}.")
        pred = pred.astype(bool, copy=False)
        box = mask_box(pred)
        if box is None and self.gt_box is None:
            return 1.0
        boxes = [b for b in (box, self.gt_box) if b is not None]
        y0, y1 = min(b[0] for b in boxes), max(b[1] for b in boxes)
        x0, x1 = min(b[2] for b in boxes), max(b[3] for b in boxes)
        p = pred[y0:y1, x0:x1]
        if self.valid is not None:
            p = p & self.valid[y0:y1, x0:x1]
        both = int(np.count_nonzero(p & self.gt_valid[y0:y1, x0:x1]))  # GT pixels are valid ones already
        union = int(np.count_nonzero(p)) + self.gt_count - both  # the union box holds every GT pixel
        if union == 0:
            return 1.0
        return both / union


def ritm_threshold(threshold: float) -> float:
    """RITM's float64 threshold: the last of ``np.arange(0.80, t + 0.001, 0.05)`` (e.g. 0.9000000000000001)."""
    steps = round((threshold - 0.80) / 0.05)
    if steps < 0 or abs(0.80 + steps * 0.05 - threshold) > 1e-9:
        raise ValueError(
            f"ritm_float_quirk only covers RITM's thresholds 0.80, 0.85, 0.90, 0.95; got {threshold}."
        )
    return float(np.arange(0.80, threshold + 0.001, 0.05)[-1])


def noc(
    ious: Sequence[float] | np.ndarray,
    threshold: float,
    *,
    max_clicks: int = DEFAULT_MAX_CLICKS,
    ritm_float_quirk: bool = False,
) -> int:
    """Number of clicks: 1-based index of the first IoU >= threshold, or ``max_clicks`` if none.

    ``ritm_float_quirk``: compare as RITM does, the IoUs cast to float32 against RITM's
    ``np.arange`` threshold cast to float32 (see the module docstring).
    """
    values = np.asarray(ious, dtype=np.float64)[:max_clicks]
    if ritm_float_quirk:
        reached = np.flatnonzero(values.astype(np.float32) >= np.float32(ritm_threshold(threshold)))
    else:
        reached = np.flatnonzero(values >= threshold)
    return int(reached[0]) + 1 if len(reached) else int(max_clicks)


def nof(
    noc_values: Sequence[int] | np.ndarray,
    *,
    max_clicks: int = DEFAULT_MAX_CLICKS,
    count_last_click_success: bool = True,
    ious: Sequence[np.ndarray] | None = None,
    threshold: float | None = None,
) -> int:
    """Number of failures over instances.

    Default (RITM): instances whose NoC equals ``max_clicks``. With
    ``count_last_click_success=False`` an instance that reaches the threshold exactly at click
    ``max_clicks`` is not a failure; that needs the ``ious`` arrays and the ``threshold``.
    """
    values = np.asarray(noc_values)
    if count_last_click_success:
        return int(np.count_nonzero(values >= max_clicks))
    if ious is None or threshold is None:
        raise ValueError("nof(count_last_click_success=False) needs ious=[...] and threshold=...")
    return int(sum(1 for series in ious if not np.any(np.asarray(series)[:max_clicks] >= threshold)))


def iou_auc(ious: Sequence[float] | np.ndarray) -> float:
    """Trapezoid area under the per-click IoU curve (unit spacing) over (n - 1); IoU itself if n == 1."""
    values = np.asarray(ious, dtype=np.float64)
    if values.size == 0:
        raise ValueError("iou_auc needs at least one IoU value.")
    if values.size == 1:
        return float(values[0])
    return float((values.sum() - 0.5 * (values[0] + values[-1])) / (values.size - 1))


def miou_curve(trajectories: Sequence[np.ndarray] | np.ndarray) -> np.ndarray:
    """Mean IoU per click index, float64 (k,), over trajectories cut to the shortest length k."""
    series = [np.asarray(t, dtype=np.float64) for t in trajectories]
    if not series:
        raise ValueError("miou_curve needs at least one trajectory.")
    shortest = min(len(t) for t in series)
    return np.mean(np.stack([t[:shortest] for t in series]), axis=0)


def miou_at(curve: np.ndarray, clicks: Sequence[int] = (1, 2, 3, 5, 10, 20)) -> dict[int, float]:
    """mIoU@k for the k of ``clicks`` that the curve reaches (k is 1-based)."""
    return {int(k): float(curve[k - 1]) for k in clicks if 1 <= k <= len(curve)}


def quality_time_curve(ious: np.ndarray, seconds: np.ndarray) -> dict:
    """mIoU against the method's time (DAVIS's quality-against-time curve, for clicks) and its AUC.

    ``ious`` and ``seconds``: (N, C) arrays, per trajectory the IoU after click k and the method's time that
    click took (NaN where a trajectory stopped: its last IoU and its time so far carry forward). The curve
    starts at (0 s, 0) and has a point per click: the mean over trajectories of the time spent up to click k
    and of the IoU after it. ``auc`` is the trapezoid area under it divided by its last time, the mean mIoU
    over the time span (in [0, 1]; NaN when no time was spent). Unlike DAVIS no point is appended at a time
    budget: the curve ends where the method's own time ends.
    """
    ious = np.asarray(ious, dtype=np.float64)
    seconds = np.asarray(seconds, dtype=np.float64)
    if ious.ndim != 2 or ious.shape != seconds.shape or ious.shape[0] == 0:
        raise ValueError(
            f"quality_time_curve needs two equal (N, C) arrays with N > 0; got {ious.shape}, {seconds.shape}."
        )
    carried = ious.copy()
    for k in range(carried.shape[1]):  # the last IoU carries forward (0 before any)
        previous = carried[:, k - 1] if k else np.zeros(carried.shape[0])
        carried[:, k] = np.where(np.isnan(carried[:, k]), previous, carried[:, k])
    cumulative = np.cumsum(np.nan_to_num(seconds, nan=0.0), axis=1)
    time_s = np.concatenate([[0.0], cumulative.mean(axis=0)])
    miou = np.concatenate([[0.0], carried.mean(axis=0)])
    span = float(time_s[-1])
    area = float(np.sum((time_s[1:] - time_s[:-1]) * (miou[1:] + miou[:-1]) / 2))
    return {
        "seconds": time_s.tolist(),
        "miou": miou.tolist(),
        "auc": area / span if span > 0 else float("nan"),
    }
