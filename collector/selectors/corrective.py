"""Reads of corrective-click campaigns (issue 17) for the researcher's study page and API."""

from __future__ import annotations

from django.db.models import Avg, Count

from collector.models import CorrectiveClick, CorrectiveItem, CorrectiveMask, CorrectiveQualification, Study

#: Failed updates listed on the study page (the newest first).
FAILED_SHOWN = 20


def study_corrective_summary(*, study: Study) -> dict | None:
    """Items by state, clicks, mean IoU per mask round, and the failed updates with their reasons; None for a
    timed study."""
    if not study.is_corrective:
        return None
    # qualification tests (their own table, study_qualification_results) stay out of the campaign's figures
    items = CorrectiveItem.objects.filter(session__study=study, session__is_qualification=False)
    states = dict(items.values_list("state").annotate(n=Count("id")).values_list("state", "n"))
    per_round = list(
        CorrectiveMask.objects.filter(item__session__study=study, item__session__is_qualification=False)
        .values("round")
        .annotate(masks=Count("id"), mean_iou=Avg("iou"), mean_ms=Avg("compute_ms"))
        .order_by("round")
    )
    failed = list(
        items.filter(state=CorrectiveItem.State.FAILED)
        .select_related("trial__target__instance__image")
        .order_by("-finished_at")[:FAILED_SHOWN]
    )
    return {
        "states": {state: states.get(state, 0) for state in CorrectiveItem.State.values},
        "items": sum(states.values()),
        "clicks": CorrectiveClick.objects.filter(
            item__session__study=study, item__session__is_qualification=False, undone=False
        ).count(),
        "per_round": per_round,
        "failed": [
            {
                "item_id": item.pk,
                "session_id": item.session_id,
                "instance": str(item.trial.target.instance),
                "round": item.round,
                "error": item.error,
                "at": item.finished_at,
            }
            for item in failed
        ],
    }


def study_qualification_results(*, study: Study) -> dict | None:
    """The qualification test's settings and one row per tested worker (pseudonym, passed, placement, gain
    per click, clicks, when, platform sent); None when the study has no test."""
    if not (study.is_corrective and study.qualification_enabled):
        return None
    rows = (
        CorrectiveQualification.objects.filter(study=study).select_related("worker").order_by("-created_at")
    )
    results = [
        {
            "worker": row.worker.pseudonym,
            "passed": row.passed,
            "placement": row.placement,
            "gain_per_click": row.gain_per_click,
            "clicks": row.clicks,
            "reason": (row.details or {}).get("reason", ""),
            "created_at": row.created_at,
            "platform_sent_at": row.platform_sent_at,
            "platform_error": row.platform_error,
            "session_id": row.session_id,
        }
        for row in rows
    ]
    return {
        "instances": study.qualification_instances,
        "min_placement": study.qualification_min_placement,
        "min_gain": study.qualification_min_gain,
        "passed": sum(1 for r in results if r["passed"]),
        "failed": sum(1 for r in results if not r["passed"]),
        "results": results,
    }
