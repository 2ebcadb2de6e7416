"""The budget: one estimate, one formula, used everywhere a cost is shown or checked.

The study form (live, before the study exists), the study page, the researcher API, ``launch_study`` and
the launch's ``max_budget`` check all call :func:`budget_estimate`, so a researcher never sees two figures.
Per device class (pc, mobile) with a quota::

    sessions    = ceil(targets × quota ÷ (batch_size × expected valid-click fraction))
    paid_batches = ceil(sessions ÷ expected counted fraction)
    cost        = (paid_batches × reward_per_batch + sessions × bonus_per_counted_session) × (1 + platform fee)

and the total is the sum over devices. The fractions default to 0.9 and 0.8 (planning values; a study
overrides them in ``platform_config`` as ``expected_valid_click_fraction`` / ``expected_counted_fraction``),
the fee is the platform's (``fee_fraction`` in ``platform_config`` overrides it; 0 for standalone links),
the bonus is ``platform_config["bonus_per_counted_session"]`` (default 0). ``targets`` is the current
round's target count (round 1: one per object); correction rounds are built from round 1's clicks and are
not known in advance, so they are not included. Money is Decimal, rounded to cents per device.
"""

from __future__ import annotations

import math
from decimal import Decimal

from collector.models import DEVICES, Instance, Study

DEFAULT_VALID_CLICK_FRACTION = 0.9
DEFAULT_COUNTED_FRACTION = 0.8
#: Below this a planning fraction would make the estimate explode; it is clamped here.
MIN_FRACTION = 0.05
CENT = Decimal("0.01")
NOTE = "current round only; correction rounds are built from its clicks and cost extra."


def _fraction(value, default: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return min(1.0, max(MIN_FRACTION, number))


def budget_estimate(
    *,
    targets: int,
    quota_pc: int,
    quota_mobile: int,
    batch_size: int,
    reward_per_batch: Decimal,
    currency: str = "USD",
    platform: str = "link",
    platform_config: dict | None = None,
) -> dict:
    """The estimate (see the module docstring for the formula) for these settings.

    Returns ``{"platform", "currency", "targets", "valid_click_fraction", "counted_fraction", "fee_fraction",
    "bonus_per_counted_session", "devices": {device: {"targets", "quota", "sessions_needed", "assignments",
    "reward", "cost"}}, "batches" (paid batches, all devices), "total", "formula", "note"}``; money values are
    Decimal strings with two decimals (``reward`` as given). Devices with quota 0, or left out of
    ``platform_config["devices"]``, are not recruited and not listed. Raises ValueError for batch_size < 1.
    """
    from collector.platforms import get_adapter

    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size}: a batch needs at least one trial.")
    config = platform_config or {}
    click_fraction = _fraction(config.get("expected_valid_click_fraction"), DEFAULT_VALID_CLICK_FRACTION)
    counted_fraction = _fraction(config.get("expected_counted_fraction"), DEFAULT_COUNTED_FRACTION)
    fee = Decimal(str(config.get("fee_fraction", get_adapter(platform).fee_fraction)))
    bonus = Decimal(str(config.get("bonus_per_counted_session", "0")))
    reward = Decimal(reward_per_batch)
    wanted = config.get("devices") or list(DEVICES)
    quotas = {"pc": quota_pc, "mobile": quota_mobile}
    per_device, total, paid_batches = {}, Decimal("0"), 0
    for device in DEVICES:
        if device not in wanted or quotas[device] <= 0:
            continue
        sessions = math.ceil(targets * quotas[device] / (batch_size * click_fraction))
        assignments = math.ceil(sessions / counted_fraction) if sessions else 0
        cost = ((assignments * reward + sessions * bonus) * (1 + fee)).quantize(CENT)
        per_device[device] = {
            "targets": targets,
            "quota": quotas[device],
            "sessions_needed": sessions,
            "assignments": assignments,
            "reward": str(reward),
            "cost": str(cost),
        }
        total += cost
        paid_batches += assignments
    formula = (
        f"per device: sessions = ⌈targets × quota ÷ (batch size {batch_size} × {click_fraction:g} valid clicks)⌉; "
        f"paid batches = ⌈sessions ÷ {counted_fraction:g} counted⌉; cost = (paid batches × {reward} "
        f"+ sessions × bonus {bonus}) × (1 + fee {fee})"
    )
    return {
        "platform": platform,
        "currency": currency,
        "targets": targets,
        "valid_click_fraction": click_fraction,
        "counted_fraction": counted_fraction,
        "fee_fraction": str(fee),
        "bonus_per_counted_session": str(bonus),
        "devices": per_device,
        "batches": paid_batches,
        "total": str(total.quantize(CENT)),
        "formula": formula,
        "note": NOTE,
    }


def study_target_count(*, study: Study) -> int:
    """Targets of the study's current round: its open round (else its latest round) once it has one, else
    the dataset's instances (what publishing makes round 1 of)."""
    if study.pk:
        from collector.services.studies import study_open_round

        current = study_open_round(study=study) or study.rounds.order_by("-number").first()
        if current is not None:
            return current.targets.count()
    return Instance.objects.filter(image__dataset_id=study.dataset_id).count()


def study_budget(*, study: Study) -> dict:
    """:func:`budget_estimate` for a saved study."""
    return budget_estimate(
        targets=study_target_count(study=study),
        quota_pc=study.quota_pc,
        quota_mobile=study.quota_mobile,
        batch_size=study.batch_size,
        reward_per_batch=study.reward_per_batch,
        currency=study.currency,
        platform=study.platform,
        platform_config=study.platform_config,
    )
