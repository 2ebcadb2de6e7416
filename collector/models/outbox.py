"""The transactional outbox: Celery tasks to send, written in the transaction of the state change.

A service that must start background work (validate a finished session, build or render a round, sync a
platform) adds a :class:`TaskIntent` row inside its own transaction instead of talking to the broker.
The row commits with the change or not at all, so the database never holds a change whose task is lost
and a request never fails because the broker is down. ``collector.services.outbox`` sends the intent
right after the commit (fast path) and a relay sends whatever is still pending, with retries
(``tasks.outbox.relay_task_intents`` on beat, ``manage.py outbox_relay``, and a thread in each worker).
Every task sent this way is idempotent, so the rare double send (the fast path and the relay racing) is
harmless.
"""

from __future__ import annotations

from django.db import models


class TaskIntent(models.Model):
    task_name = models.CharField(
        max_length=200, help_text="Celery task name, e.g. tasks.validation.validate_session."
    )
    args = models.JSONField(default=list, blank=True, help_text="Positional arguments (ids only).")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    sent_at = models.DateTimeField(
        null=True, blank=True, help_text="When the broker accepted the message; empty while pending."
    )
    attempts = models.PositiveIntegerField(default=0, help_text="Failed sends so far.")
    last_error = models.TextField(blank=True, default="", help_text="Why the last send failed.")

    class Meta:
        indexes = [
            models.Index(
                fields=["created_at"], name="taskintent_pending", condition=models.Q(sent_at__isnull=True)
            )
        ]

    def __str__(self) -> str:
        state = "sent" if self.sent_at else "pending"
        return f"{self.task_name}{self.args} ({state})"
