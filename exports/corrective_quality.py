"""The quality ranking model Mr of seed 001 §4.2 for corrective campaigns (issue 17).

Features of an instance's final mask (after round r), as the seed lists them, plus time:

* f1 ``last_round_clicks``: clicks of the last round with clicks;
* f2 ``round``: the round of the final mask;
* f3 ``delta_iou``: IoU between the final mask and the mask before it (how much the last update changed);
* f4 ``max_click_distance_px`` / f5 ``mean_click_distance_px``: the last round's clicks' distance to the boundary
  of the mask they corrected (0 on the boundary), as a fraction of the image diagonal;
* ``active_ms``, ``last_round_ms``: the worker's time on the instance and on its last round.

A scikit-learn ``RandomForestRegressor`` predicts the final mask's IoU with ground truth. It is fitted on the
instances whose ground truth is used for training (a seeded ``1 - holdout`` share) and its Spearman rank
correlation with the true IoU is reported on the held-out rest; then it is applied to every finished instance,
so a researcher can keep the top N % by predicted quality (``exports.corrective.corrective_export(top_percent=)``).
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from collector.models import CorrectiveClick, CorrectiveItem, CorrectiveMask
from exports.selectors import ExportError

FEATURES = (
    "last_round_clicks",
    "round",
    "delta_iou",
    "max_click_distance",
    "mean_click_distance",
    "active_ms",
    "last_round_ms",
)
MIN_TRAIN = 4


@dataclass(frozen=True)
class QualityRanking:
    predicted: dict[int, float]  # item id -> predicted IoU (every finished instance)
    true_iou: dict[int, float]
    heldout: list[int]
    spearman: float | None  # on the held-out instances
    n_train: int
    importances: dict[str, float]


def _mask_iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.logical_or(a, b).sum()
    return float(np.logical_and(a, b).sum() / union) if union else 1.0


def item_features(
    item: CorrectiveItem, *, masks: list[CorrectiveMask], clicks: list[CorrectiveClick]
) -> dict:
    """The features above for one finished item (``masks`` by round, ``clicks`` its live clicks)."""
    from exports.corrective import read_mask

    final = masks[-1]
    image = item.trial.target.instance.image
    diagonal = float(np.hypot(image.width, image.height))
    rounds_with_clicks = sorted({c.round for c in clicks})
    last_round = rounds_with_clicks[-1] if rounds_with_clicks else None
    last_clicks = [c for c in clicks if c.round == last_round]
    delta_iou, distances = 1.0, []
    if len(masks) >= 2:
        before = read_mask(masks[-2].file.name)
        delta_iou = _mask_iou(read_mask(final.file.name), before)
        if last_clicks:
            boundary = before ^ cv2.erode(before.astype(np.uint8), np.ones((3, 3), np.uint8)).astype(bool)
            if boundary.any():
                distance = cv2.distanceTransform((~boundary).astype(np.uint8), cv2.DIST_L2, 3)
                h, w = distance.shape
                distances = [
                    float(distance[min(int(c.y), h - 1), min(int(c.x), w - 1)]) / diagonal
                    for c in last_clicks
                ]
    return {
        "last_round_clicks": float(len(last_clicks)),
        "round": float(final.round),
        "delta_iou": delta_iou,
        "max_click_distance": max(distances) if distances else 0.0,
        "mean_click_distance": float(np.mean(distances)) if distances else 0.0,
        "active_ms": float(item.active_ms),
        "last_round_ms": float((item.round_ms or {}).get(str(last_round), 0.0))
        if last_round is not None
        else 0.0,
    }


def quality_ranking(*, study_id: int, holdout: float = 0.3, seed: int = 0) -> QualityRanking:
    """Fit Mr on the study's finished instances (ground truth of the training share) and rank them all."""
    from scipy.stats import spearmanr
    from sklearn.ensemble import RandomForestRegressor

    items = list(
        CorrectiveItem.objects.filter(
            session__study_id=study_id,
            session__is_qualification=False,
            state__in=[CorrectiveItem.State.DONE, CorrectiveItem.State.SKIPPED],
        )
        .exclude(current_mask=None)
        .select_related("trial__target__instance__image", "current_mask")
        .order_by("pk")
    )
    masks: dict[int, list] = {}
    for mask in CorrectiveMask.objects.filter(item__in=items).order_by("item_id", "round"):
        masks.setdefault(mask.item_id, []).append(mask)
    clicks: dict[int, list] = {}
    for click in CorrectiveClick.objects.filter(item__in=items, undone=False).order_by("round", "order"):
        clicks.setdefault(click.item_id, []).append(click)
    rows, true_iou = [], {}
    for item in items:
        features = item_features(item, masks=masks[item.pk], clicks=clicks.get(item.pk, []))
        rows.append([features[name] for name in FEATURES])
        true_iou[item.pk] = float(item.current_mask.iou)
    if len(items) < MIN_TRAIN + 2:
        raise ExportError(
            f"study {study_id} has {len(items)} finished instance(s); the quality model needs at least {MIN_TRAIN + 2}."
        )
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(items))
    n_test = max(2, int(round(holdout * len(items))))
    test, train = order[:n_test], order[n_test:]
    x = np.asarray(rows, dtype=np.float64)
    y = np.asarray([true_iou[item.pk] for item in items])
    model = RandomForestRegressor(n_estimators=200, min_samples_leaf=2, random_state=seed)
    model.fit(x[train], y[train])
    predicted = model.predict(x)
    rho = spearmanr(predicted[test], y[test]).statistic if np.ptp(y[test]) > 0 else None
    return QualityRanking(
        predicted={item.pk: float(p) for item, p in zip(items, predicted)},
        true_iou=true_iou,
        heldout=[items[i].pk for i in test],
        spearman=None if rho is None or np.isnan(rho) else float(rho),
        n_train=len(train),
        importances=dict(zip(FEATURES, (float(v) for v in model.feature_importances_))),
    )


def top_items(ranking: QualityRanking, *, top_percent: float) -> set[int]:
    """Ids of the best ``top_percent`` % instances by predicted IoU (at least one)."""
    if not 0 < top_percent <= 100:
        raise ExportError(f"top_percent={top_percent} must be in (0, 100].")
    ordered = sorted(ranking.predicted, key=lambda item_id: -ranking.predicted[item_id])
    keep = max(1, int(round(len(ordered) * top_percent / 100)))
    return set(ordered[:keep])
