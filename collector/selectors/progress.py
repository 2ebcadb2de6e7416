"""Live progress of a study: quotas per round and device, sessions, batch times and money spent.

Everything here reads; nothing writes. Each function takes a saved study and runs a bounded number of
queries (no per-row queries), so the pages and the API can call them on every refresh.
"""

from __future__ import annotations

from collections import Counter
from decimal import Decimal

import numpy as np
from django.db.models import Count, F, Q, QuerySet, Sum
from django.db.models.functions import Least

from collector.models import DEVICES, Round, Session, Study, Target

#: Values of a platform's review decision (``Session.platform_state["review"]``) that mean "paid".
PAID_REVIEW_STATES = frozenset({"accepted", "approved"})
#: Values that mean the platform did not pay for the assignment.
UNPAID_REVIEW_STATES = frozenset({"rejected", "returned", "expired", "skipped"})


def study_quota_progress(*, study: Study) -> list[dict]:
    """Per round and device: valid clicks collected against the quota.

    Returns one dict per round, ordered by number: ``{"round_id", "number", "state", "targets",
    "devices": {"pc": {...}, "mobile": {...}}, "build_error", "build_failed_at"}`` (why building the next
    round from this one failed, "" and None unless it did) where each device dict holds ``quota_per_target``,
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
                "build_error": round_.build_error,
                "build_failed_at": round_.build_failed_at,
            }
        )
    return result


def session_counts(queryset: QuerySet[Session]) -> dict[str, int]:
    """The sessions of ``queryset`` by status and verdict, in one query: ``started`` (all of them, whatever
    became of them), ``in_progress`` (still running), ``finished``, ``expired`` (timed out, released and
    abandoned, or ended by the researcher), ``counted``, ``rejected`` and ``pending`` (finished, not validated
    yet). The progress table, the simulated annotators' card and the API's session counts all read these."""
    return queryset.aggregate(
        started=Count("id"),
        in_progress=Count("id", filter=Q(status=Session.Status.STARTED)),
        finished=Count("id", filter=Q(status=Session.Status.FINISHED)),
        expired=Count("id", filter=Q(status=Session.Status.EXPIRED)),
        counted=Count("id", filter=Q(validity=Session.Validity.COUNTED)),
        rejected=Count("id", filter=Q(validity=Session.Validity.REJECTED)),
        pending=Count("id", filter=Q(validity=Session.Validity.PENDING, status=Session.Status.FINISHED)),
    )


def study_session_summary(*, study: Study) -> dict:
    """Sessions by :func:`session_counts`, overall and per device, and the rejection reasons (rejection_reason
    texts and quality-flag codes) with their counts."""
    # A corrective campaign's qualification tests take no quota and are not batches: counted apart.
    base = Session.objects.filter(study=study, is_qualification=False, is_bot=False)
    counts = {"all": session_counts(base)}
    for device in DEVICES:
        counts[device] = session_counts(base.filter(device=device))
    reasons: Counter[str] = Counter()
    flags: Counter[str] = Counter()
    for reason, quality_flags in base.filter(validity=Session.Validity.REJECTED).values_list(
        "rejection_reason", "quality_flags"
    ):
        reasons[reason.strip() or "(no reason recorded)"] += 1
        for flag in quality_flags or []:
            code = flag.get("code") if isinstance(flag, dict) else str(flag)
            flags[str(code or "unknown")] += 1
    tests = Session.objects.filter(study=study, is_qualification=True).aggregate(
        running=Count("id", filter=Q(status=Session.Status.STARTED)),
        expired=Count("id", filter=Q(status=Session.Status.EXPIRED)),
        passed=Count("id", filter=Q(status=Session.Status.FINISHED, validity=Session.Validity.COUNTED)),
        failed=Count("id", filter=Q(status=Session.Status.FINISHED, validity=Session.Validity.REJECTED)),
    )
    return {
        "counts": counts,
        "qualification": tests,
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
    rows = Session.objects.filter(
        study=study, finished_at__isnull=False, is_qualification=False, is_bot=False
    ).values_list("device", "started_at", "finished_at")
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


def session_payment_state(
    *, validity: str, platform_state: dict | None, submission: dict | None = None, review: str | None = None
) -> str:
    """How a session stands with money: ``paid``, ``unpaid`` or ``owed``.

    The rule (documented in the researcher area), first match wins:

    1. the crowd platform's submission of the session, as our sync recorded it (``submission``:
       ``{"decision": accept|reject|pending, "applied": bool}``): accepted and applied = paid, accepted but
       not yet applied = owed, rejected = unpaid (pending: go on);
    2. a platform decision recorded on the session (``platform_state["paid"]`` true/false, or
       ``platform_state["review"]`` accepted/approved = paid, rejected/returned/expired/skipped = unpaid);
    3. the researcher's manual review (``review``: approve = owed, reject = unpaid);
    4. our validation: a counted session is ``owed`` (paid when the platform sync accepts it, or by the
       researcher for standalone links); every other session is unpaid."""
    if submission and submission.get("decision") == "accept":
        return "paid" if submission.get("applied") else "owed"
    if submission and submission.get("decision") == "reject":
        return "unpaid"
    state = platform_state or {}
    if isinstance(state.get("paid"), bool):
        return "paid" if state["paid"] else "unpaid"
    status = str(state.get("review") or state.get("status") or "").strip().lower()
    if status in PAID_REVIEW_STATES:
        return "paid"
    if status in UNPAID_REVIEW_STATES:
        return "unpaid"
    if review == "approve":
        return "owed"
    if review == "reject":
        return "unpaid"
    return "owed" if validity == Session.Validity.COUNTED else "unpaid"


def _decimal(value) -> Decimal:
    try:
        return Decimal(str(value))
    except (ArithmeticError, ValueError):
        return Decimal(0)


def study_money_spent(*, study: Study) -> dict:
    """Money spent and owed, in ``study.currency``, following :func:`session_payment_state`.

    ``spent`` = what paid sessions cost: the platform's reward of each accepted submission (else
    ``reward_per_batch``) plus bonuses paid (applied platform bonuses, or ``platform_state["bonus"]``);
    ``owed`` = reward_per_batch × sessions owed; ``spent_with_fee`` adds the platform's fee (the fee of
    the budget estimate). ``paid_counted``/``paid_rejected`` split paid sessions by our validity (a
    rejected session is paid when the platform or the researcher accepted it anyway)."""
    from collector.models import PlatformSubmission, SessionReview
    from collector.platforms import get_adapter

    reward = study.reward_per_batch
    submissions = {
        row["session_id"]: row
        for row in PlatformSubmission.objects.filter(session__study=study).values(
            "session_id", "decision", "decision_applied_at", "reward", "bonus_amount", "bonus_applied_at"
        )
    }
    reviews: dict[int, str] = {}
    for session_id, decision in (
        SessionReview.objects.filter(session__study=study)
        .order_by("session_id", "-reviewed_at", "-id")
        .values_list("session_id", "decision")
    ):
        reviews.setdefault(session_id, decision)
    paid_counted = paid_rejected = paid_pending = owed = 0
    spent = bonuses = Decimal(0)
    rows = Session.objects.filter(study=study, is_qualification=False, is_bot=False).exclude(
        status=Session.Status.STARTED
    )
    for session_id, validity, platform_state in rows.values_list("pk", "validity", "platform_state"):
        row = submissions.get(session_id)
        submission = (
            {"decision": row["decision"], "applied": row["decision_applied_at"] is not None} if row else None
        )
        payment = session_payment_state(
            validity=validity,
            platform_state=platform_state,
            submission=submission,
            review=reviews.get(session_id),
        )
        if payment == "paid":
            if validity == Session.Validity.COUNTED:
                paid_counted += 1
            elif validity == Session.Validity.REJECTED:
                paid_rejected += 1
            else:
                paid_pending += 1
            if row and row["decision"] == "accept":
                spent += _decimal(row["reward"]) or reward
                bonus = _decimal(row["bonus_amount"]) if row["bonus_applied_at"] else Decimal(0)
            else:
                spent += reward
                bonus = _decimal((platform_state or {}).get("bonus", 0))
            spent += bonus
            bonuses += bonus
        elif payment == "owed":
            owed += 1
    config = study.platform_config or {}
    fee = _decimal(config.get("fee_fraction", get_adapter(study.platform).fee_fraction))
    return {
        "currency": study.currency,
        "reward_per_batch": reward,
        "paid_sessions": paid_counted + paid_rejected + paid_pending,
        "paid_counted": paid_counted,
        "paid_rejected": paid_rejected,
        "bonuses": bonuses,
        "spent": spent,
        "fee_fraction": fee,
        "spent_with_fee": (spent * (1 + fee)).quantize(Decimal("0.0001")),
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


def studies_progress_summary(*, study_ids: list[int]) -> dict[int, dict]:
    """For the study list: per study, its current round (the open one, else the latest) and the valid
    clicks collected there against the quota, both devices together (each target capped at its quota),
    plus sessions running. A bounded number of queries whatever the number of studies.

    ``{study_id: {"round": number | None, "round_state", "valid", "quota_total", "fraction" (0..1),
    "running"}}``; studies without rounds get round None and zeros."""
    current: dict[int, Round] = {}
    for round_ in Round.objects.filter(study_id__in=study_ids).order_by("study_id", "number"):
        held = current.get(round_.study_id)
        if held is None or held.state != Round.State.OPEN or round_.state == Round.State.OPEN:
            current[round_.study_id] = round_
    totals = {
        row["round_id"]: row
        for row in Target.objects.filter(round_id__in=[r.pk for r in current.values()])
        .values("round_id")
        .annotate(
            targets=Count("id"),
            valid_pc=Sum(Least(F("valid_pc"), F("round__study__quota_pc"))),
            valid_mobile=Sum(Least(F("valid_mobile"), F("round__study__quota_mobile"))),
        )
    }
    quotas = dict(Study.objects.filter(pk__in=study_ids).values_list("pk", F("quota_pc") + F("quota_mobile")))
    running = dict(
        Session.objects.filter(study_id__in=study_ids, status=Session.Status.STARTED, is_bot=False)
        .values("study_id")
        .annotate(n=Count("id"))
        .values_list("study_id", "n")
    )
    summary = {}
    for study_id in study_ids:
        round_ = current.get(study_id)
        row = totals.get(round_.pk, {}) if round_ else {}
        quota_total = row.get("targets", 0) * quotas.get(study_id, 0)
        valid = (row.get("valid_pc") or 0) + (row.get("valid_mobile") or 0)
        summary[study_id] = {
            "round": round_.number if round_ else None,
            "round_state": round_.state if round_ else "",
            "valid": valid,
            "quota_total": quota_total,
            "fraction": valid / quota_total if quota_total else 0.0,
            "running": running.get(study_id, 0),
        }
    return summary
