"""Problem reports: the refusals the player showed the annotator, kept on the session and logged."""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from collector.models import Session

logger = logging.getLogger(__name__)


MAX_PROBLEMS = 50


def session_problem_record(
    *, session: Session, status: int, endpoint: str, message: str, position: int | None = None
) -> None:
    """Keep a refusal the player showed the annotator (a 4xx it stopped retrying): appended to
    ``session.problems`` (the first MAX_PROBLEMS, so a looping client cannot grow the row) and logged with
    the session id, so a researcher or an operator can see why a worker got stuck. ``message`` is the
    server's message as the player showed it, on one line, at most 500 characters."""
    text = " ".join(str(message).split())[:500]
    entry = {
        "at": timezone.now().isoformat(),
        "status": status,
        "endpoint": endpoint,
        "message": text,
        "position": position,
    }
    with transaction.atomic():
        locked = Session.objects.select_for_update(no_key=True).only("id", "problems").get(pk=session.pk)
        problems = list(locked.problems or [])
        if len(problems) < MAX_PROBLEMS:
            locked.problems = [*problems, entry]
            locked.save(update_fields=["problems"])
    logger.warning(
        "annotator shown a refusal",
        extra={
            "session_id": session.pk,
            "study_id": session.study_id,
            "endpoint": endpoint,
            "status": status,
            "position": position,
            "problem": text,
        },
    )
