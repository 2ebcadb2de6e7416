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


@clicklab_task(
    names.SESSIONS_RELEASE_STALE, autoretry_for=(OperationalError,), retry_backoff=True, max_retries=5
)
def release_stale() -> int:
    """Release running sessions not heard from for their study's ``reservation_grace_s``; returns how many.

    Idempotent: a trial's slot is given back once (``Trial.holds_slot``), so overlapping runs change nothing
    twice (``collector.services.reservations.sessions_release_stale``).
    """
    from collector.services.reservations import sessions_release_stale

    return sessions_release_stale()
