"""Budget estimate before launch: what collecting a study's quotas costs at the least.

The platform engineer's ``collector.services.launch.study_budget_estimate`` (platform fees, per-platform
rules) is used when it exists; :func:`budget_estimate` is our own platform-neutral lower bound, shown
beside it and used alone when it is missing.
"""

from __future__ import annotations

import importlib
import math
from decimal import Decimal

from collector.models import Instance, Study


def budget_estimate(
    *,
    targets: int,
    quota_pc: int,
    quota_mobile: int,
    batch_size: int,
    reward_per_batch: Decimal,
    currency: str = "USD",
) -> dict:
    """Lower bound of the first round's cost: batches = ceil(targets × quota / batch_size) per device
    (each batch yields at most ``batch_size`` valid clicks), cost = batches × reward_per_batch.

    Correction rounds (their targets are only known once round 1 is in) and platform fees are not
    included; rejected batches that a platform pays anyway raise the real cost."""
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size}: a batch needs at least one trial.")
    batches_pc = math.ceil(targets * quota_pc / batch_size)
    batches_mobile = math.ceil(targets * quota_mobile / batch_size)
    batches = batches_pc + batches_mobile
    reward = Decimal(reward_per_batch)
    return {
        "source": "clicklab lower bound: targets × quota / batch_size × reward (round 1, no platform fees)",
        "targets": targets,
        "clicks_pc": targets * quota_pc,
        "clicks_mobile": targets * quota_mobile,
        "batches_pc": batches_pc,
        "batches_mobile": batches_mobile,
        "batches": batches,
        "reward_per_batch": reward,
        "total": reward * batches,
        "currency": currency,
    }


def study_target_count(*, study: Study) -> int:
    """Round-1 targets of the study: its round 1 once published, else the dataset's instances."""
    round_1 = study.rounds.filter(number=1).first() if study.pk else None
    if round_1 is not None:
        return round_1.targets.count()
    return Instance.objects.filter(image__dataset_id=study.dataset_id).count()


def study_budget(*, study: Study) -> dict:
    """``{"estimate": <our lower bound>, "platform": <launch.study_budget_estimate(study=) or None>}``."""
    ours = budget_estimate(
        targets=study_target_count(study=study),
        quota_pc=study.quota_pc,
        quota_mobile=study.quota_mobile,
        batch_size=study.batch_size,
        reward_per_batch=study.reward_per_batch,
        currency=study.currency,
    )
    platform = None
    try:
        launch = importlib.import_module("collector.services.launch")
    except ModuleNotFoundError:
        launch = None
    estimate = getattr(launch, "study_budget_estimate", None)
    if estimate is not None and study.pk:
        platform = estimate(study=study)
    return {"estimate": ours, "platform": platform}
