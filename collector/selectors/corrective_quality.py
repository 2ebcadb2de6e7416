"""The quality ranking model Mr of seed 001 §4.2 for corrective campaigns (issues 17, 34): read by the study's
quality page, the researcher API and the campaign export (``exports.corrective``, ``--top-percent``).

Features of an instance's final mask (after round r), as the seed lists them, plus time:

* f1 ``last_round_clicks``: clicks of the last round with clicks;
* f2 ``round``: the round of the final mask;
* f3 ``delta_iou``: IoU between the final mask and the mask before it (how much the last update changed);
* f4 ``max_click_distance`` / f5 ``mean_click_distance``: the last round's clicks' distance to the boundary of the
  mask they corrected (0 on the boundary), as a fraction of the image diagonal;
* ``active_ms``, ``last_round_ms``: the worker's time on the instance and on its last round.

Training (``MODEL``, ``MODEL_PARAMETERS``, ``TARGET``): a scikit-learn ``RandomForestRegressor`` of the final
mask's IoU with the ground truth, fitted on a seeded random ``1 - holdout`` share of the finished instances with
ground truth and applied to every finished instance. Its quality is reported twice: the Spearman rank correlation
with the true IoU on the held-out share, and a repeated K-fold cross-validated Spearman over every instance with
ground truth (``CV_FOLDS`` folds, ``CV_REPEATS`` shuffles from the seed; per shuffle the Spearman of the pooled
out-of-fold predictions), as mean and standard deviation over the shuffles. Whether to trust it
(``QualityRanking.verdict``): with fewer than ``MIN_TRUSTED_INSTANCES`` instances, or a cross-validated Spearman
within the spread of a ranking that knows nothing (+-1.96 / sqrt(n - 1), the 95 % band of Spearman's rho under
independence), it says so plainly.

``top_items`` keeps the best N % by Mr's estimate: the nearest whole number of instances to N % of them (at least
one), ties broken by item id.

A finished instance never changes (its masks, clicks and times are final), so a fit is kept per process for the
same study, hold-out, seed and set of finished instances (``_FITS``, the last ``FITS_KEPT``): the quality page, its
zip download and the export in one process fit once, and every new finished instance fits again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import cv2
import numpy as np

from collector.models import CorrectiveClick, CorrectiveItem, CorrectiveMask

FEATURES = (
    "last_round_clicks",
    "round",
    "delta_iou",
    "max_click_distance",
    "mean_click_distance",
    "active_ms",
    "last_round_ms",
)
MODEL = "sklearn.ensemble.RandomForestRegressor"
#: Besides ``random_state`` (the seed). The seed finds Mr "robust to the hyper-parameters of the decision forest".
MODEL_PARAMETERS = {"n_estimators": 50, "min_samples_leaf": 2}
TARGET = "IoU of the instance's final mask with its ground-truth mask (the ignore band left out)"
#: Fewest finished instances with ground truth Mr is fitted on (MIN_TRAIN) and evaluated with (2 held out).
MIN_TRAIN = 4
MIN_INSTANCES = MIN_TRAIN + 2
CV_FOLDS = 5
CV_REPEATS = 3
#: Below this many instances with ground truth the figures are reported with a plain warning (at 30, a random
#: ranking's Spearman still reaches +-0.36 one time in 20).
MIN_TRUSTED_INSTANCES = 30
#: Below this many, whatever the figures, the verdict is that they cannot tell Mr from chance (5-fold folds of one
#: or two instances; a 2-instance hold-out's Spearman is +-1 by construction).
MIN_INDICATIVE_INSTANCES = 10
DEFAULT_HOLDOUT = 0.3
DEFAULT_SEED = 0
FITS_KEPT = 8


class QualityModelError(ValueError):
    """Mr cannot be fitted on this study (the message says why and what to do)."""


@dataclass(frozen=True)
class CrossValidation:
    folds: int
    repeats: int
    spearman_per_repeat: list[float | None]

    @property
    def defined(self) -> list[float]:
        return [value for value in self.spearman_per_repeat if value is not None]

    @property
    def mean(self) -> float | None:
        return float(np.mean(self.defined)) if self.defined else None

    @property
    def sd(self) -> float | None:
        return float(np.std(self.defined)) if self.defined else None


@dataclass(frozen=True)
class QualityRanking:
    predicted: dict[int, float]  # item id -> Mr's estimate of its IoU (every finished instance)
    true_iou: dict[int, float | None]  # None where the instance has no ground truth
    train: list[int]
    heldout: list[int]
    spearman: float | None  # on the held-out instances
    cv: CrossValidation
    importances: dict[str, float]
    holdout: float
    seed: int
    details: dict[int, dict] = field(default_factory=dict)  # item id -> instance, worker, state, mask round

    @property
    def n_train(self) -> int:
        return len(self.train)

    @property
    def n_with_truth(self) -> int:
        return sum(1 for value in self.true_iou.values() if value is not None)

    @property
    def chance_band(self) -> float:
        """The 95 % spread of a random ranking's Spearman on these instances (1.96 / sqrt(n - 1))."""
        return 1.96 / math.sqrt(max(self.n_with_truth - 1, 1))

    @property
    def trusted(self) -> bool:
        mean = self.cv.mean
        return self.n_with_truth >= MIN_TRUSTED_INSTANCES and mean is not None and mean > self.chance_band

    @property
    def verdict(self) -> str:
        """One plain sentence on whether Mr's figures can be trusted, and why."""
        n, band, mean = self.n_with_truth, self.chance_band, self.cv.mean
        if MIN_INDICATIVE_INSTANCES <= n < MIN_TRUSTED_INSTANCES and mean is not None and mean > band:
            return (
                f"Too few instances to trust fully: Mr was trained and checked on {n} instances with ground truth. "
                f"Its cross-validated Spearman {mean:.2f} ± {self.cv.sd:.2f} is beyond ±{band:.2f}, what a ranking "
                f"that knows nothing reaches one time in 20 on {n} instances, but on fewer than "
                f"{MIN_TRUSTED_INSTANCES} the figure itself is rough; collect at least {MIN_TRUSTED_INSTANCES} "
                "instances."
            )
        if n < MIN_TRUSTED_INSTANCES:
            return (
                f"Too few instances to trust: Mr was trained and checked on {n} instances with ground truth. On "
                f"{n} instances a ranking that knows nothing reaches a Spearman of ±{band:.2f} one time in 20, so "
                f"these figures cannot tell a useful ranking from a random one; collect at least "
                f"{MIN_TRUSTED_INSTANCES} instances."
            )
        if mean is None:
            return f"Mr cannot be judged: the true IoU does not vary over the {n} instances, so no rank correlation exists."
        if mean <= band:
            return (
                f"Mr ranks no better than chance here: its cross-validated Spearman {mean:.2f} ± {self.cv.sd:.2f} is "
                f"within ±{band:.2f}, the 95 % spread of a random ranking on {n} instances."
            )
        return (
            f"Mr ranks better than chance: cross-validated Spearman {mean:.2f} ± {self.cv.sd:.2f} on {n} instances "
            f"(a random ranking stays within ±{band:.2f} 19 times in 20)."
        )

    def ordered(self) -> list[int]:
        """Item ids, the best estimate first (ties by item id)."""
        return sorted(self.predicted, key=lambda item_id: (-self.predicted[item_id], item_id))

    def training(self) -> dict:
        """How Mr was trained and how well it ranks, JSON-ready (quality.json, the page, the API)."""
        import sklearn

        return {
            "model": MODEL,
            "scikit_learn": sklearn.__version__,
            "parameters": {**MODEL_PARAMETERS, "random_state": self.seed},
            "features": list(FEATURES),
            "target": TARGET,
            "split": {
                "method": f"seeded random hold-out: numpy default_rng({self.seed}).permutation of the finished "
                "instances with ground truth by item id; the first round(holdout * n) (at least 2) held out",
                "holdout": self.holdout,
                "seed": self.seed,
                "n_train": len(self.train),
                "n_heldout": len(self.heldout),
                "train_ids": list(self.train),
                "heldout_ids": list(self.heldout),
            },
            "spearman_heldout": self.spearman,
            "cross_validation": {
                "method": f"{self.cv.folds}-fold, {self.cv.repeats} shuffles (seeds {self.seed}..{self.seed + self.cv.repeats - 1}); "
                "per shuffle the Spearman of the pooled out-of-fold estimates with the true IoU",
                "folds": self.cv.folds,
                "repeats": self.cv.repeats,
                "spearman_mean": self.cv.mean,
                "spearman_sd": self.cv.sd,
                "spearman_per_repeat": self.cv.spearman_per_repeat,
            },
            "instances": len(self.predicted),
            "instances_with_ground_truth": self.n_with_truth,
            "chance_band_95": self.chance_band,
            "trusted": self.trusted,
            "verdict": self.verdict,
            "feature_importances": self.importances,
        }


_FITS: dict[tuple, QualityRanking] = {}  # see the module docstring


def _mask_iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.logical_or(a, b).sum()
    return float(np.logical_and(a, b).sum() / union) if union else 1.0


def item_features(
    item: CorrectiveItem, *, masks: list[CorrectiveMask], clicks: list[CorrectiveClick]
) -> dict:
    """The features above for one finished item (``masks`` by round, ``clicks`` its live clicks)."""
    from collector.services.masks import read_mask

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


def _finished_items(study_id: int) -> list[CorrectiveItem]:
    return list(
        CorrectiveItem.objects.filter(
            session__study_id=study_id,
            session__is_qualification=False,
            state__in=[CorrectiveItem.State.DONE, CorrectiveItem.State.SKIPPED],
        )
        .exclude(current_mask=None)
        .select_related("trial__target__instance__image", "current_mask", "session__worker")
        .order_by("pk")
    )


def _spearman(predicted: np.ndarray, truth: np.ndarray) -> float | None:
    from scipy.stats import spearmanr

    if len(truth) < 2 or np.ptp(truth) == 0 or np.ptp(predicted) == 0:
        return None
    rho = float(spearmanr(predicted, truth).statistic)
    return None if math.isnan(rho) else rho


def _forest(seed: int):
    from sklearn.ensemble import RandomForestRegressor

    return RandomForestRegressor(**MODEL_PARAMETERS, random_state=seed)


def _cross_validate(x: np.ndarray, y: np.ndarray, *, seed: int) -> CrossValidation:
    folds = min(CV_FOLDS, len(y))
    values: list[float | None] = []
    for repeat in range(CV_REPEATS):
        order = np.random.default_rng(seed + repeat).permutation(len(y))
        estimate = np.empty(len(y))
        for test in np.array_split(order, folds):
            train = np.setdiff1d(order, test)
            estimate[test] = _forest(seed).fit(x[train], y[train]).predict(x[test])
        values.append(_spearman(estimate, y))
    return CrossValidation(folds=folds, repeats=CV_REPEATS, spearman_per_repeat=values)


def quality_ranking(
    *, study_id: int, holdout: float = DEFAULT_HOLDOUT, seed: int = DEFAULT_SEED
) -> QualityRanking:
    """Fit Mr on the study's finished instances (ground truth of the training share) and rank them all."""
    if not 0 < holdout < 1:
        raise QualityModelError(f"holdout={holdout} must be between 0 and 1 (the held-out share).")
    items = _finished_items(study_id)
    # mask files have unique names (a uuid each): ids alone may come back after a rollback (SQLite)
    key = (study_id, holdout, seed, tuple((item.pk, item.current_mask.file.name) for item in items))
    if key not in _FITS:
        ranking = _fit(study_id, items, holdout=holdout, seed=seed)
        while len(_FITS) >= FITS_KEPT:
            _FITS.pop(next(iter(_FITS)))
        _FITS[key] = ranking
    return _FITS[key]


def _fit(study_id: int, items: list[CorrectiveItem], *, holdout: float, seed: int) -> QualityRanking:
    masks: dict[int, list] = {}
    for mask in CorrectiveMask.objects.filter(item__in=items).order_by("item_id", "round"):
        masks.setdefault(mask.item_id, []).append(mask)
    clicks: dict[int, list] = {}
    for click in CorrectiveClick.objects.filter(item__in=items, undone=False).order_by("round", "order"):
        clicks.setdefault(click.item_id, []).append(click)
    rows = np.asarray(
        [[item_features(item, masks=masks[item.pk], clicks=clicks.get(item.pk, []))[name] for name in FEATURES]
         for item in items],
        dtype=np.float64,
    ).reshape(len(items), len(FEATURES))  # fmt: skip
    true_iou = {item.pk: item.current_mask.iou for item in items}
    known = np.asarray([i for i, item in enumerate(items) if true_iou[item.pk] is not None], dtype=int)
    if len(known) < MIN_INSTANCES:
        raise QualityModelError(
            f"study {study_id} has {len(known)} finished instance(s) with ground truth; the quality model needs at "
            f"least {MIN_INSTANCES} ({MIN_TRAIN} to learn from, 2 to check it on). Finish more instances first."
        )
    order = known[np.random.default_rng(seed).permutation(len(known))]
    n_test = max(2, round(holdout * len(known)))
    test, train = order[:n_test], order[n_test:]
    y = np.asarray([true_iou[item.pk] if true_iou[item.pk] is not None else np.nan for item in items])
    model = _forest(seed).fit(rows[train], y[train])
    predicted = model.predict(rows)
    return QualityRanking(
        predicted={item.pk: float(p) for item, p in zip(items, predicted)},
        true_iou={pk: (None if v is None else float(v)) for pk, v in true_iou.items()},
        train=sorted(items[i].pk for i in train),
        heldout=sorted(items[i].pk for i in test),
        spearman=_spearman(predicted[test], y[test]),
        cv=_cross_validate(rows[known], y[known], seed=seed),
        importances=dict(zip(FEATURES, (float(v) for v in model.feature_importances_))),
        holdout=holdout,
        seed=seed,
        details={item.pk: _item_details(item) for item in items},
    )


def _item_details(item: CorrectiveItem) -> dict:
    instance = item.trial.target.instance
    name = f"{instance.image.stem}_{instance.object_stem}" if instance.object_stem else instance.image.stem
    return {
        "instance": name,
        "session_id": item.session_id,
        "worker": item.session.worker.pseudonym,
        "state": item.state,
        "mask_round": item.current_mask.round,
    }


def kept_count(total: int, top_percent: float) -> int:
    """How many of ``total`` instances "the top ``top_percent`` %" keeps: the nearest whole number (halves up),
    at least one."""
    if not 0 < top_percent <= 100:
        raise QualityModelError(
            f"top_percent={top_percent:g} must be above 0 and at most 100 (the share of instances to keep, in %)."
        )
    return max(1, math.floor(total * top_percent / 100 + 0.5))


def top_items(ranking: QualityRanking, *, top_percent: float) -> list[int]:
    """Ids of the best ``top_percent`` % instances by Mr's estimate (``kept_count`` of them), the best first."""
    return ranking.ordered()[: kept_count(len(ranking.predicted), top_percent)]


def ranking_rows(ranking: QualityRanking) -> list[dict]:
    """The study page's table: one row per finished instance, the best estimate first."""
    role = {**{pk: "train" for pk in ranking.train}, **{pk: "held out" for pk in ranking.heldout}}
    return [
        {
            "rank": rank,
            "item_id": item_id,
            **ranking.details.get(item_id, {}),
            "predicted_iou": ranking.predicted[item_id],
            "true_iou": ranking.true_iou.get(item_id),
            "role": role.get(item_id, "ranked only"),
        }
        for rank, item_id in enumerate(ranking.ordered(), start=1)
    ]
