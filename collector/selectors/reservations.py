"""What the study page says about reservations and rejected work (issue 32 item 2)."""

from __future__ import annotations

from collector.models import Session, Study


def study_reservations_summary(*, study: Study) -> dict:
    """The study's grace period and policies, with what they did: ``released_sessions`` (batches whose
    unclicked images were given back at least once: grace period or researcher), ``rejected_counted``
    (counted batches whose platform assignment was rejected), ``rejected_clicks_released`` (their valid clicks
    given back to the quotas under the ``release`` policy) and ``rejected_clicks_kept`` (under ``count``)."""
    sessions = Session.objects.filter(study=study, is_bot=False)
    rejected = list(
        sessions.filter(platform_state__has_key="rejected").values_list("platform_state", "valid_clicks")
    )
    released_clicks = sum(int(state["rejected"].get("released") or 0) for state, _valid in rejected)
    kept_clicks = sum(valid or 0 for state, valid in rejected if state["rejected"].get("policy") == "count")
    return {
        "grace_s": study.reservation_grace_s,
        "short_batches": study.get_short_batches_display(),
        "rejected_work": study.get_rejected_work_display(),
        "released_sessions": sessions.filter(released_at__isnull=False).count(),
        "rejected_counted": len(rejected),
        "rejected_clicks_released": released_clicks,
        "rejected_clicks_kept": kept_clicks,
    }
