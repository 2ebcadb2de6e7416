"""Sessions of a study for the researcher: the list, and one session's trials, clicks, reviews and money.

Workers appear by pseudonym only. A session's platform assignment id is shown (the researcher needs it to
find the work on the platform); the worker's platform id is not.
"""

from __future__ import annotations

from django.db.models import Count, OuterRef, Q, QuerySet, Subquery

from collector.models import PlatformSubmission, Session, SessionReview, Study, Trial

from .progress import session_payment_state
from .timing import phase_durations_from_onsets

SESSION_FILTERS = {
    "running": Q(status=Session.Status.STARTED),
    "pending": Q(status=Session.Status.FINISHED, validity=Session.Validity.PENDING),
    "counted": Q(validity=Session.Validity.COUNTED),
    "rejected": Q(validity=Session.Validity.REJECTED),
    "expired": Q(status=Session.Status.EXPIRED),
    "reviewed": Q(reviews__isnull=False),
}


def study_sessions(*, study: Study, show: str = "") -> QuerySet[Session]:
    """Sessions of ``study``, newest first, optionally only those of one ``SESSION_FILTERS`` key, with
    ``worker`` joined and ``n_trials``, ``n_clicks``, ``n_flagged`` and ``review_decision`` (the latest
    manual review, or None) annotated."""
    latest_review = SessionReview.objects.filter(session=OuterRef("pk")).order_by("-reviewed_at", "-id")
    queryset = Session.objects.filter(study=study)
    if show in SESSION_FILTERS:
        queryset = queryset.filter(SESSION_FILTERS[show]).distinct()
    return (
        queryset.select_related("worker", "round")
        .annotate(
            n_trials=Count("trials", distinct=True),
            n_clicks=Count("trials__click", distinct=True),
            n_flagged=Count("trials", filter=~Q(trials__flags=[]), distinct=True),
            review_decision=Subquery(latest_review.values("decision")[:1]),
        )
        .order_by("-started_at", "-pk")
    )


def session_detail(*, study: Study, session_id: int) -> dict:
    """Everything the session page shows. Raises ``Session.DoesNotExist`` for a session of another study.

    ``{"session", "trials": [{position, role, target, phases_ms {A,B,C}, presentations, flags, blocked_clicks,
    click (or None)}], "task_trials", "filler_trials", "control_trials" (counts by role), "reviews": [SessionReview, newest first], "submission": PlatformSubmission | None,
    "payment": paid | owed | unpaid}``."""
    session = Session.objects.select_related("worker", "round", "study").get(pk=session_id, study=study)
    trials = []
    for trial in (
        Trial.objects.filter(session=session)
        .select_related("target__instance__image", "click")
        .order_by("position")
    ):
        trials.append(
            {
                "position": trial.position,
                "role": trial.role,
                "target": trial.target,
                "phases_ms": phase_durations_from_onsets(trial.phase_onsets_ms),
                "presentations": len(trial.presentations or []),
                "flags": trial.flags or [],
                "blocked_clicks": trial.blocked_clicks,
                "click": getattr(trial, "click", None),
            }
        )
    reviews = list(SessionReview.objects.filter(session=session).select_related("reviewed_by"))
    submission = PlatformSubmission.objects.filter(session=session).select_related("pool__campaign").first()
    payment = session_payment_state(
        validity=session.validity,
        platform_state=session.platform_state,
        submission=(
            {"decision": submission.decision, "applied": submission.decision_applied_at is not None}
            if submission
            else None
        ),
        review=reviews[0].decision if reviews else None,
    )
    return {
        "session": session,
        "trials": trials,
        "task_trials": sum(1 for trial in trials if trial["role"] == Trial.Role.TASK),
        "filler_trials": sum(1 for trial in trials if trial["role"] == Trial.Role.FILLER),
        "control_trials": sum(1 for trial in trials if trial["role"] == Trial.Role.CONTROL),
        "reviews": reviews,
        "submission": submission,
        "payment": payment if session.status != Session.Status.STARTED else "running",
    }
