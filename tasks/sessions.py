"""Periodic session housekeeping (run by Celery beat, see ``CELERY["beat_schedule"]``)."""

from __future__ import annotations

from celery import shared_task
from django.db import OperationalError


@shared_task(
    name="tasks.sessions.expire_sessions",
    acks_late=True,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=5,
)
def expire_sessions() -> int:
    """Expire sessions past their ``expires_at`` and release their targets; returns how many expired.

    Idempotent: a session is expired (and its slots released) once, in the transaction that changes its
    status, so overlapping runs or a redelivered message change nothing twice.
    """
    from collector.services.allocation import sessions_expire

    return sessions_expire()
