"""What a study looks like on its crowd platform: the campaign, its pools per device, the task batches
handed to the platform, and the submissions we synced, decided and paid.

Every effect on the platform (accept, reject, bonus, skill) is recorded here before it is applied and
marked when it was, so a sync that dies half-way is finished by the next one without doing anything twice.
"""

from __future__ import annotations

import uuid
from decimal import Decimal

from django.db import models

from .sessions import Session
from .studies import Study


class PlatformCampaign(models.Model):
    """One study's presence on its platform (a Toloka project and skill, an MTurk/Prolific account)."""

    class State(models.TextChoices):
        LAUNCHING = "launching"
        OPEN = "open"
        PAUSED = "paused"
        CLOSED = "closed"

    study = models.OneToOneField(Study, on_delete=models.CASCADE, related_name="platform_campaign")
    platform = models.CharField(max_length=20)
    state = models.CharField(max_length=20, choices=State.choices, default=State.LAUNCHING)
    external_project_id = models.CharField(max_length=200, blank=True, default="")
    external_skill_id = models.CharField(
        max_length=200,
        blank=True,
        default="",
        help_text="Toloka skill / MTurk qualification: 'did this study'.",
    )
    external_qualification_skill_id = models.CharField(
        max_length=200,
        blank=True,
        default="",
        help_text="Toloka skill of the corrective qualification test (100 passed, 0 failed).",
    )
    budget_estimate = models.JSONField(default=dict, blank=True, help_text="study_budget_estimate at launch.")
    launched_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    last_synced_at = models.DateTimeField(null=True, blank=True)
    last_sync_error = models.TextField(blank=True, default="")

    def __str__(self) -> str:
        return f"{self.platform} campaign of {self.study}"


class PlatformPool(models.Model):
    """The platform unit that recruits one device class: a Toloka pool, an MTurk HIT, a Prolific study."""

    campaign = models.ForeignKey(PlatformCampaign, on_delete=models.CASCADE, related_name="pools")
    device = models.CharField(max_length=10, help_text="pc | mobile (our device classes).")
    external_id = models.CharField(max_length=200, blank=True, default="")
    external_status = models.CharField(max_length=20, blank=True, default="")
    reward_per_assignment = models.DecimalField(max_digits=8, decimal_places=4)
    assignments_planned = models.PositiveIntegerField(default=0)
    entry_url = models.CharField(max_length=1000, blank=True, default="")
    settings_sent = models.JSONField(default=dict, blank=True, help_text="What we asked the platform for.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["campaign_id", "device"]
        constraints = [
            models.UniqueConstraint(fields=["campaign", "device"], name="platform_pool_unique_device")
        ]

    def __str__(self) -> str:
        return f"{self.campaign.platform} pool {self.external_id or '(not created)'} [{self.device}]"


class PlatformTaskBatch(models.Model):
    """A ticket the platform hands to workers (a Toloka task suite with one task): overlap = how many
    workers take it. ``operation_id`` is created before the platform call so a retry cannot duplicate it."""

    pool = models.ForeignKey(PlatformPool, on_delete=models.CASCADE, related_name="batches")
    index = models.PositiveIntegerField()
    overlap = models.PositiveIntegerField()
    operation_id = models.UUIDField(default=uuid.uuid4, unique=True)
    external_id = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["pool_id", "index"]
        constraints = [models.UniqueConstraint(fields=["pool", "index"], name="platform_batch_unique_index")]


class PlatformSubmission(models.Model):
    """A submitted assignment as synced from the platform, our decision on it, and what was applied."""

    class Decision(models.TextChoices):
        PENDING = "pending", "waiting for validation"
        ACCEPT = "accept"
        REJECT = "reject"

    pool = models.ForeignKey(PlatformPool, on_delete=models.CASCADE, related_name="submissions")
    external_assignment_id = models.CharField(max_length=200)
    external_worker_id = models.CharField(max_length=200, blank=True, default="")
    completion_code = models.CharField(max_length=200, blank=True, default="")
    submitted_at = models.DateTimeField(null=True, blank=True)
    session = models.OneToOneField(
        Session,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="platform_submission",
        help_text="The session the code was issued for (one submission per session: a reused code fails).",
    )
    decision = models.CharField(max_length=10, choices=Decision.choices, default=Decision.PENDING)
    public_comment = models.TextField(
        blank=True, default="", help_text="Shown to the worker by the platform."
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_applied_at = models.DateTimeField(null=True, blank=True)
    reward = models.DecimalField(max_digits=8, decimal_places=4, default=Decimal("0"))
    bonus_amount = models.DecimalField(max_digits=8, decimal_places=4, null=True, blank=True)
    bonus_operation_id = models.UUIDField(null=True, blank=True)
    external_bonus_id = models.CharField(max_length=200, blank=True, default="")
    bonus_applied_at = models.DateTimeField(null=True, blank=True)
    worker_marked_at = models.DateTimeField(null=True, blank=True, help_text="'did this study' skill set.")
    attempts = models.PositiveIntegerField(default=0, help_text="Platform calls that failed so far.")
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["pool_id", "external_assignment_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["pool", "external_assignment_id"], name="platform_submission_unique_assignment"
            )
        ]
        indexes = [models.Index(fields=["pool", "decision_applied_at"])]

    def __str__(self) -> str:
        return f"submission {self.external_assignment_id} ({self.decision})"
