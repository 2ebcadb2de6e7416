"""Periodic session housekeeping (run by Celery beat, see ``beat_schedule`` in config/celery.py)."""

from __future__ import annotations

from django.db import OperationalError

from tasks import names
from tasks.base import clicklab_task


@clicklab_task(
    names.SESSIONS_EXPIRE_SESSIONS, autoretry_for=(OperationalError,), retry_backoff=True, max_retries=5
)
def expire_sessions() -> int:
    """Expire sessions past their ``expires_at`` and release their targets; returns how many expired.

    Idempotent: a session is expired (and its slots released) once, in the transaction that changes its
    status, so overlapping runs or a redelivered message change nothing twice.
    """
    from collector.services.allocation import sessions_expire

    return sessions_expire()
