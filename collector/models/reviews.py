"""Manual reviews: a researcher's approve/reject of a session, recorded with who and when.

Append-only: every decision is a new row and the latest one is in force, so the history of a session's
reviews stays readable. A review decides what the worker is paid and what the crowd platform is told
(accept/reject); which clicks enter the dataset stays the validation's decision (the valid-click rule),
so quotas, rounds and exports never change behind the researcher's back.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from .sessions import Session


class SessionReview(models.Model):
    class Decision(models.TextChoices):
        APPROVE = "approve"
        REJECT = "reject"

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="reviews")
    decision = models.CharField(max_length=10, choices=Decision.choices)
    reason = models.TextField(help_text="Why; for a platform the comment the worker sees.")
    reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="session_reviews"
    )
    reviewed_at = models.DateTimeField(auto_now_add=True)
    platform_outcome = models.TextField(
        blank=True, default="", help_text="What the crowd platform said when the decision was sent."
    )

    class Meta:
        ordering = ["session_id", "-reviewed_at", "-id"]
        indexes = [models.Index(fields=["session", "-reviewed_at"])]

    def __str__(self) -> str:
        return f"{self.decision} of session {self.session_id} by {self.reviewed_by_id}"
