"""The study page's session monitor (issue 32 item 3): the running sessions with what they hold."""

from __future__ import annotations

from django.db.models import Count, Q

from collector.models import Session, Study, Trial

#: At most this many running sessions in the table (the newest); the sessions page lists them all.
MONITOR_ROWS = 100


def study_running_sessions(*, study: Study, limit: int = MONITOR_ROWS) -> list[dict]:
    """The study's running sessions, newest first: ``session_id``, ``worker`` (pseudonym), ``worker_id``,
    ``worker_excluded``, ``device``, ``started_at``, ``last_seen_at`` (None: never heard from since the
    start), ``expires_at``, ``released_at``, ``clicked`` / ``trials`` (task trials), ``holds`` (slots still
    held), ``is_bot``. One query."""
    task = Q(trials__role=Trial.Role.TASK)
    rows = (
        Session.objects.filter(study=study, status=Session.Status.STARTED, is_qualification=False)
        .annotate(
            n_trials=Count("trials", filter=task),
            n_clicked=Count("trials", filter=task & Q(trials__click__isnull=False)),
            n_holds=Count("trials", filter=task & Q(trials__holds_slot=True)),
        )
        .select_related("worker")
        .order_by("-started_at", "-pk")[:limit]
    )
    return [
        {
            "session_id": session.pk,
            "worker": session.worker.pseudonym,
            "worker_id": session.worker_id,
            "worker_excluded": session.worker.excluded,
            "device": session.device,
            "started_at": session.started_at,
            "last_seen_at": session.last_seen_at,
            "expires_at": session.expires_at,
            "released_at": session.released_at,
            "trials": session.n_trials,
            "clicked": session.n_clicked,
            "holds": session.n_holds,
            "is_bot": session.is_bot,
        }
        for session in rows
    ]
