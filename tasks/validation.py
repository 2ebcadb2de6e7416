"""Validation of finished sessions (sent by ``session_finish`` after its commit)."""

from __future__ import annotations

from django.db import OperationalError

from tasks import names
from tasks.base import clicklab_task


@clicklab_task(
    names.VALIDATION_VALIDATE_SESSION,
    autoretry_for=(OperationalError, OSError),
    retry_backoff=True,
    retry_backoff_max=300,
    max_retries=8,
)
def validate_session(session_id: int) -> str:
    """Validate session ``session_id`` once (the service guards on ``validated_at``), so a redelivered or
    retried message is harmless. Returns the session's validity, or "missing" when the row is gone.

    Retries on database hiccups (deadlock, lost connection) and unreadable files; a missing mask raises
    ``collector.services.validation.ValidationError`` after the retries, leaving the session pending.
    """
    # Imported here: this module is imported while the Celery app loads, before Django's apps are ready.
    from collector.services.validation import ValidationError, session_validate

    try:
        session = session_validate(session_id=session_id)
    except ValidationError as exc:
        raise validate_session.retry(exc=exc, countdown=60, max_retries=3) from exc
    return session.validity if session is not None else "missing"


@clicklab_task(names.VALIDATION_REQUEUE_PENDING_VALIDATIONS)
def requeue_pending_validations() -> int:
    """Beat task: send validation again for sessions finished long ago and still unvalidated (lost
    messages); returns how many were sent."""
    from collector.services.validation import validations_requeue

    return len(validations_requeue())
