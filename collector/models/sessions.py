"""Workers, their sessions (one batch on one device), trials and clicks."""

from __future__ import annotations

from django.db import models

from .studies import Round, Study, Target


class Device(models.TextChoices):
    PC = "pc"
    MOBILE = "mobile"


#: The device classes a study collects for, in display order (PC first): the one list every module uses.
DEVICES: tuple[str, ...] = tuple(Device.values)


class Worker(models.Model):
    """A crowd worker. ``external_id`` is the platform's id and never leaves the database;
    exports use ``pseudonym`` (an HMAC of platform and id)."""

    platform = models.CharField(max_length=20)
    external_id = models.CharField(max_length=200)
    pseudonym = models.CharField(max_length=32, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    excluded = models.BooleanField(default=False)
    notes = models.TextField(blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["platform", "external_id"], name="worker_unique_external")
        ]

    def __str__(self) -> str:
        return self.pseudonym


class Session(models.Model):
    """One batch of trials by one worker on one device."""

    class Status(models.TextChoices):
        STARTED = "started"
        FINISHED = "finished"
        EXPIRED = "expired"

    class Validity(models.TextChoices):
        PENDING = "pending"
        COUNTED = "counted"
        REJECTED = "rejected"

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="sessions")
    round = models.ForeignKey(Round, on_delete=models.CASCADE, related_name="sessions")
    worker = models.ForeignKey(Worker, on_delete=models.PROTECT, related_name="sessions")
    device = models.CharField(max_length=10, choices=Device.choices)
    platform_device = models.CharField(
        max_length=20, blank=True, default="", help_text="Device the platform said."
    )
    detected_device = models.CharField(
        max_length=20, blank=True, default="", help_text="Device the browser said."
    )
    user_agent = models.TextField(blank=True, default="")
    client_info = models.JSONField(
        default=dict, blank=True, help_text="Viewport, DPR, refresh rate, pointer..."
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.STARTED)
    validity = models.CharField(max_length=10, choices=Validity.choices, default=Validity.PENDING)
    valid_clicks = models.PositiveSmallIntegerField(null=True, blank=True)
    quality_flags = models.JSONField(default=list, blank=True, help_text="[{code, detail}] readable reasons.")
    rejection_reason = models.TextField(blank=True, default="")
    problems = models.JSONField(
        default=list,
        blank=True,
        help_text="[{at, status, endpoint, message, position}] refusals the player showed the annotator (first 50).",
    )
    completion_code = models.CharField(max_length=40, blank=True, default="")
    platform_assignment_id = models.CharField(max_length=200, blank=True, default="", db_index=True)
    platform_batch_id = models.CharField(max_length=200, blank=True, default="")
    platform_state = models.JSONField(default=dict, blank=True)
    control_inside = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        help_text="Control clicks inside their object (issue 32 item 5); None: the batch had no control trials.",
    )
    control_passed = models.BooleanField(
        null=True,
        blank=True,
        help_text="Whether the control trials met the study's rule (None: no control trials, or not validated yet).",
    )
    is_qualification = models.BooleanField(
        default=False,
        help_text=(
            "A corrective campaign's qualification test (issue 17): ground-truth instances, scored, takes no "
            "quota and is left out of the study's progress."
        ),
    )
    is_bot = models.BooleanField(
        default=False,
        db_index=True,
        help_text="A simulated annotator's batch (issue 32 item 4): never in a quota or an export; removable.",
    )
    last_seen_at = models.DateTimeField(
        null=True, blank=True, help_text="Last heartbeat, click or report from the worker's player."
    )
    left_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text=(
            "When the player said the page was going away (pagehide: the tab closed, or a navigation); its "
            "unclicked trials give their slots back CLICKLAB_LEAVE_GRACE_S later unless heard from since."
        ),
    )
    page_loads = models.PositiveIntegerField(
        default=0,
        help_text=(
            "How many times the player page was served. The pagehide beacon names the page it came from: a "
            "beacon of an earlier page (a reload's, arriving after the new page was served) is ignored."
        ),
    )
    released_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When its unclicked trials gave their slots back (grace period passed, or a researcher released it).",
    )
    ended_by = models.CharField(
        max_length=20,
        blank=True,
        default="",
        help_text="Who ended an expired session: timeout or researcher (empty while running or finished).",
    )
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField()
    validated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at"]
        indexes = [models.Index(fields=["study", "status"]), models.Index(fields=["status", "expires_at"])]

    def __str__(self) -> str:
        return f"session {self.pk} ({self.worker}, {self.device})"


class Trial(models.Model):
    """One target shown at one position of a session. ``phase_onsets_ms``: PRESENTED onsets of phases A-D
    (the rAF timestamp of the first frame each phase's picture was on screen; performance.now() ms, session
    clock); ``scheduled_onsets_ms``: the onsets the player scheduled (same clock); ``load_wait_ms``: how
    long the trial waited for its pictures before phase A; ``flags``: reasons the trial is invalid."""

    class Role(models.TextChoices):
        """What a trial is for (issue 32 items 2 and 5). Only ``task`` trials are data: practice, control and
        filler trials take no quota slot, never count toward a quota and stay out of the RClicks export and the
        next rounds; the full export keeps them. A filler trial (``Study.short_batches`` ``pad``) completes a
        batch at a round's tail with an image whose quota is met; its click counts for the batch rule as a task
        click would."""

        TASK = "task"
        PRACTICE = "practice", "practice (never data)"
        CONTROL = "control", "control (known answer, decides whether the batch counts)"
        FILLER = (
            "filler",
            "filler (an image already done, filling up a batch at a round's tail; counts for the batch rule only)",
        )

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="trials")
    target = models.ForeignKey(Target, on_delete=models.PROTECT, related_name="trials")
    position = models.PositiveSmallIntegerField()
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.TASK)
    phase_onsets_ms = models.JSONField(default=dict, blank=True)
    scheduled_onsets_ms = models.JSONField(
        default=dict, blank=True, help_text="Onsets the player scheduled (phase_onsets_ms: as presented)."
    )
    load_wait_ms = models.FloatField(
        default=0.0, help_text="Time the trial waited for its pictures to decode before phase A."
    )
    blocked_clicks = models.PositiveSmallIntegerField(default=0, help_text="Clicks tried during phases A-C.")
    flags = models.JSONField(default=list, blank=True)
    refresh_hz = models.FloatField(null=True, blank=True)
    presentations = models.JSONField(
        default=list,
        blank=True,
        help_text="[{id, at}] each time the player reported showing this trial (more than one: a replay).",
    )
    holds_slot = models.BooleanField(
        default=True,
        help_text=(
            "A task trial still holding one in-flight slot of its target (False once a release gave it back: "
            "grace period passed or a researcher released the session)."
        ),
    )

    class Meta:
        ordering = ["session_id", "position"]
        constraints = [models.UniqueConstraint(fields=["session", "position"], name="trial_unique_position")]

    def __str__(self) -> str:
        return f"trial {self.position} of session {self.session_id}"


class Click(models.Model):
    """The one click of a trial, in canonical image pixels (x = column, y = row, floats).

    ``idempotency_key`` makes retried uploads store the click exactly once."""

    class InvalidReason(models.TextChoices):
        NONE = "", "valid"
        OUTSIDE_REGION = "outside_region", "farther than the click radius from the target region"
        OUTSIDE_IMAGE = "outside_image", "outside the image"
        IGNORE_BAND = "ignore_band", "in the ignore band, away from the region"
        TRIAL_FLAGGED = "trial_flagged", "the trial was interrupted (tab hidden, focus lost, resize)"

    trial = models.OneToOneField(Trial, on_delete=models.CASCADE, related_name="click")
    idempotency_key = models.CharField(max_length=64, unique=True)
    x = models.FloatField()
    y = models.FloatField()
    shown_width = models.FloatField(help_text="CSS px width of the image as displayed.")
    shown_height = models.FloatField()
    pointer_type = models.CharField(max_length=10, blank=True, default="")
    reaction_ms = models.FloatField(
        null=True, blank=True, help_text="From the onset of phase D to the click."
    )
    event_timestamp_ms = models.FloatField(null=True, blank=True)
    received_at = models.DateTimeField(auto_now_add=True)
    is_valid = models.BooleanField(null=True, blank=True)
    distance_px = models.FloatField(null=True, blank=True, help_text="Distance to the region (0 inside).")
    invalid_reason = models.CharField(max_length=20, choices=InvalidReason.choices, blank=True, default="")

    class Meta:
        ordering = ["trial_id"]

    def __str__(self) -> str:
        return f"click ({self.x:.1f}, {self.y:.1f}) of {self.trial}"
