"""Reads of corrective-click campaigns (issue 17) for the researcher's study page and API."""

from __future__ import annotations

from django.db.models import Avg, Count

from collector.models import CorrectiveClick, CorrectiveItem, CorrectiveMask, Study

#: Failed updates listed on the study page (the newest first).
FAILED_SHOWN = 20


def study_corrective_summary(*, study: Study) -> dict | None:
    """Items by state, clicks, mean IoU per mask round, and the failed updates with their reasons; None for a
    timed study."""
    if not study.is_corrective:
        return None
    items = CorrectiveItem.objects.filter(session__study=study)
    states = dict(items.values_list("state").annotate(n=Count("id")).values_list("state", "n"))
    per_round = list(
        CorrectiveMask.objects.filter(item__session__study=study)
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
        "clicks": CorrectiveClick.objects.filter(item__session__study=study, undone=False).count(),
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
