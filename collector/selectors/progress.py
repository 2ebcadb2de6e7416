"""Live progress of a study: quotas per round and device, sessions, batch times and money spent.

Everything here reads; nothing writes. Each function takes a saved study and runs a bounded number of
queries (no per-row queries), so the pages and the API can call them on every refresh.
"""

from __future__ import annotations

from collections import Counter
from decimal import Decimal

import numpy as np
from django.db.models import Count, F, Q, Sum
from django.db.models.functions import Least

from collector.models import Round, Session, Study, Target

DEVICES = ("pc", "mobile")

#: Values of a platform's review decision (``Session.platform_state["review"]``) that mean "paid".
PAID_REVIEW_STATES = frozenset({"accepted", "approved"})
#: Values that mean the platform did not pay for the assignment.
UNPAID_REVIEW_STATES = frozenset({"rejected", "returned", "expired", "skipped"})


def study_quota_progress(*, study: Study) -> list[dict]:
    """Per round and device: valid clicks collected against the quota.

    Returns one dict per round, ordered by number: ``{"round_id", "number", "state", "targets",
    "devices": {"pc": {...}, "mobile": {...}}}`` where each device dict holds ``quota_per_target``,
    ``quota_total`` (targets × quota), ``valid`` (valid clicks, each target capped at its quota),
    ``valid_raw`` (uncapped), ``inflight``, ``targets_full`` and ``fraction`` (valid / quota_total, 0..1)."""
    rounds = list(Round.objects.filter(study=study).order_by("number"))
    aggregates = {
        row["round_id"]: row
        for row in Target.objects.filter(round__study=study)
        .values("round_id")
        .annotate(
            targets=Count("id"),
            capped_pc=Sum(Least(F("valid_pc"), study.quota_pc)),
            capped_mobile=Sum(Least(F("valid_mobile"), study.quota_mobile)),
            raw_pc=Sum("valid_pc"),
            raw_mobile=Sum("valid_mobile"),
            flying_pc=Sum("inflight_pc"),
            flying_mobile=Sum("inflight_mobile"),
            full_pc=Count("id", filter=Q(valid_pc__gte=study.quota_pc)),
            full_mobile=Count("id", filter=Q(valid_mobile__gte=study.quota_mobile)),
        )
    }
    result = []
    for round_ in rounds:
        row = aggregates.get(round_.pk, {})
        targets = row.get("targets", 0)
        devices = {}
        for device in DEVICES:
            quota = study.quota_for(device)
            quota_total = targets * quota
            valid = row.get(f"capped_{device}") or 0
            devices[device] = {
                "quota_per_target": quota,
                "quota_total": quota_total,
                "valid": valid,
                "valid_raw": row.get(f"raw_{device}") or 0,
                "inflight": row.get(f"flying_{device}") or 0,
                "targets_full": row.get(f"full_{device}") or 0,
                "fraction": (valid / quota_total) if quota_total else 0.0,
            }
        result.append(
            {
                "round_id": round_.pk,
                "number": round_.number,
                "state": round_.state,
                "targets": targets,
                "devices": devices,
            }
        )
    return result


def study_session_summary(*, study: Study) -> dict:
    """Sessions started / finished / expired / counted / rejected / pending, overall and per device,
    and the rejection reasons (rejection_reason texts and quality-flag codes) with their counts."""
    counts = {}
    base = Session.objects.filter(study=study)
    for scope, queryset in [("all", base)] + [(device, base.filter(device=device)) for device in DEVICES]:
        counts[scope] = queryset.aggregate(
            started=Count("id"),
            in_progress=Count("id", filter=Q(status=Session.Status.STARTED)),
            finished=Count("id", filter=Q(status=Session.Status.FINISHED)),
            expired=Count("id", filter=Q(status=Session.Status.EXPIRED)),
            counted=Count("id", filter=Q(validity=Session.Validity.COUNTED)),
            rejected=Count("id", filter=Q(validity=Session.Validity.REJECTED)),
            pending=Count("id", filter=Q(validity=Session.Validity.PENDING, status=Session.Status.FINISHED)),
        )
    reasons: Counter[str] = Counter()
    flags: Counter[str] = Counter()
    for reason, quality_flags in base.filter(validity=Session.Validity.REJECTED).values_list(
        "rejection_reason", "quality_flags"
    ):
        reasons[reason.strip() or "(no reason recorded)"] += 1
        for flag in quality_flags or []:
            code = flag.get("code") if isinstance(flag, dict) else str(flag)
            flags[str(code or "unknown")] += 1
    return {
        "counts": counts,
        "rejection_reasons": [{"reason": r, "sessions": n} for r, n in reasons.most_common()],
        "rejected_flags": [{"code": c, "sessions": n} for c, n in flags.most_common()],
    }


def _duration_stats(seconds: list[float]) -> dict:
    if not seconds:
        return {"batches": 0, "mean_s": None, "median_s": None, "p10_s": None, "p90_s": None}
    values = np.asarray(seconds, dtype=np.float64)
    return {
        "batches": int(values.size),
        "mean_s": float(values.mean()),
        "median_s": float(np.median(values)),
        "p10_s": float(np.percentile(values, 10)),
        "p90_s": float(np.percentile(values, 90)),
    }


def study_batch_durations_s(*, study: Study) -> dict[str, list[float]]:
    """Seconds from session start to finish of every finished batch, by device."""
    durations: dict[str, list[float]] = {device: [] for device in DEVICES}
    rows = Session.objects.filter(study=study, finished_at__isnull=False).values_list(
        "device", "started_at", "finished_at"
    )
    for device, started_at, finished_at in rows:
        durations.setdefault(device, []).append((finished_at - started_at).total_seconds())
    return durations


def study_batch_times(*, study: Study) -> dict:
    """Time per batch (start → finish of finished sessions) in seconds: overall and per device."""
    durations = study_batch_durations_s(study=study)
    result = {"all": _duration_stats([s for values in durations.values() for s in values])}
    for device in DEVICES:
        result[device] = _duration_stats(durations.get(device, []))
    return result


def session_payment_state(*, validity: str, platform_state: dict | None) -> str:
    """How a session stands with money: ``paid``, ``unpaid`` or ``owed``.

    The rule (documented in the researcher area): a platform's recorded review decision wins —
    ``platform_state["review"]`` accepted/approved = paid, rejected/returned/expired/skipped = unpaid
    (``platform_state["paid"]`` true/false is honoured the same way). Without a recorded decision a
    counted session is ``owed`` (it will be paid when the platform sync accepts it, or by the
    researcher for standalone links) and every other session is unpaid."""
    state = platform_state or {}
    if isinstance(state.get("paid"), bool):
        return "paid" if state["paid"] else "unpaid"
    review = str(state.get("review") or state.get("status") or "").strip().lower()
    if review in PAID_REVIEW_STATES:
        return "paid"
    if review in UNPAID_REVIEW_STATES:
        return "unpaid"
    return "owed" if validity == Session.Validity.COUNTED else "unpaid"


def _decimal(value) -> Decimal:
    try:
        return Decimal(str(value))
    except (ArithmeticError, ValueError):
        return Decimal(0)


def study_money_spent(*, study: Study) -> dict:
    """Money spent and owed, in ``study.currency``, following :func:`session_payment_state`.

    ``spent`` = reward_per_batch × paid sessions + bonuses (``platform_state["bonus"]``, a decimal
    string) of paid sessions; ``owed`` = reward_per_batch × counted sessions not yet paid;
    ``paid_counted``/``paid_rejected`` split paid sessions by our validity (a rejected session is paid
    when the platform accepted it anyway). Platform fees are not included."""
    reward = study.reward_per_batch
    paid_counted = paid_rejected = paid_pending = owed = 0
    bonuses = Decimal(0)
    rows = Session.objects.filter(study=study).exclude(status=Session.Status.STARTED)
    for validity, platform_state in rows.values_list("validity", "platform_state"):
        payment = session_payment_state(validity=validity, platform_state=platform_state)
        if payment == "paid":
            if validity == Session.Validity.COUNTED:
                paid_counted += 1
            elif validity == Session.Validity.REJECTED:
                paid_rejected += 1
            else:
                paid_pending += 1
            bonuses += _decimal((platform_state or {}).get("bonus", 0))
        elif payment == "owed":
            owed += 1
    paid = paid_counted + paid_rejected + paid_pending
    return {
        "currency": study.currency,
        "reward_per_batch": reward,
        "paid_sessions": paid,
        "paid_counted": paid_counted,
        "paid_rejected": paid_rejected,
        "bonuses": bonuses,
        "spent": reward * paid + bonuses,
        "owed_sessions": owed,
        "owed": reward * owed,
    }


def study_progress(*, study: Study) -> dict:
    """Everything the live-progress panel shows, in one dict."""
    return {
        "study_id": study.pk,
        "state": study.state,
        "rounds": study_quota_progress(study=study),
        "sessions": study_session_summary(study=study),
        "batch_times": study_batch_times(study=study),
        "money": study_money_spent(study=study),
    }
