"""Evaluation keys, runs (a ClickSession's state machine stored in the database) and their report rows."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class EvaluationKey(models.Model):
    """A per-user key for the evaluation API. Only its SHA-256 is stored; the key is shown once."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="evaluation_keys"
    )
    name = models.CharField(max_length=100, blank=True, default="")
    prefix = models.CharField(max_length=12, help_text="First characters of the key, to tell keys apart.")
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"


class EvaluationRun(models.Model):
    """One remote ClickSession. ``state`` follows the local session's order of calls:

    ``preparing`` (the server computes the next clicks or scores a submission, maybe in Celery) ->
    ``ready`` (next interaction prepared) -> ``awaiting_mask`` (served by next) -> ``preparing`` ... ->
    ``finished``; ``expired`` once ``expires_at`` passed.
    """

    class State(models.TextChoices):
        PREPARING = "preparing"
        READY = "ready"
        AWAITING_MASK = "awaiting_mask"
        FINISHED = "finished"
        EXPIRED = "expired"
        FAILED = "failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="evaluation_runs"
    )
    key = models.ForeignKey(
        EvaluationKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )
    create_key = models.CharField(
        max_length=100, blank=True, default="", help_text="Idempotency key of the create."
    )
    dataset = models.ForeignKey("collector.Dataset", on_delete=models.PROTECT, related_name="evaluation_runs")
    benchmark = models.ForeignKey(
        "evaluation.PublishedBenchmark",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="runs",
        help_text="The published benchmark whose protocol the run follows (its leaderboard shows it).",
    )
    method = models.CharField(
        max_length=100, blank=True, default="", help_text="Name of the evaluated method."
    )
    session_id = models.CharField(max_length=32)
    # configuration (the local ClickSession's arguments)
    clicker = models.CharField(max_length=20, default="baseline")
    max_clicks = models.PositiveIntegerField(default=20)
    max_time_s = models.FloatField(null=True, blank=True)
    threshold = models.FloatField(default=0.5)
    target_ious = models.JSONField(default=list)
    stop_at_target = models.BooleanField(default=False)
    seed = models.BigIntegerField(default=0)
    shuffle = models.BooleanField(default=False)
    click_model = models.CharField(
        max_length=40,
        blank=True,
        default="",
        help_text="Clickability map of a clicker='group' run (e.g. dt).",
    )
    group_bounds = models.JSONField(
        default=list, blank=True, help_text="[[low, high], ...] mass fractions of the clicking groups G1..Gk."
    )
    units = models.JSONField(
        default=list,
        help_text="[[instance id, group, ...], ...] in visiting order (group runs: the group's index; "
        "replay: the click's x, y).",
    )
    # state machine
    state = models.CharField(max_length=20, choices=State.choices, default=State.PREPARING)
    unit_index = models.IntegerField(default=-1)
    round = models.PositiveIntegerField(default=0)
    clicks = models.JSONField(default=list, help_text="[[x, y, is_positive], ...] of the current sample.")
    last_clicks = models.JSONField(default=list)
    new_sample = models.BooleanField(default=False)
    unit_done = models.BooleanField(default=False)
    elapsed_s = models.FloatField(
        default=0.0,
        help_text="Method time of the current sample: the client's timing of each round, bounded by the server's.",
    )
    pred_png = models.BinaryField(null=True, blank=True, help_text="Last accepted prediction of the sample.")
    logits = models.BinaryField(
        null=True,
        blank=True,
        help_text="The logits sent with the last accepted prediction (benchmark.statecodec, never decoded "
        "here): what a resumed client passes as previous_logits.",
    )
    clicker_state = models.JSONField(
        null=True,
        blank=True,
        help_text="The group clicker's random-stream state after the sample's last round.",
    )
    interaction = models.PositiveIntegerField(default=0, help_text="Number of the interaction served last.")
    next_key = models.CharField(max_length=100, blank=True, default="")
    served_at = models.DateTimeField(null=True, blank=True)
    served = models.JSONField(null=True, blank=True, help_text="The payload of the interaction served last.")
    pending = models.JSONField(null=True, blank=True, help_text="Submission waiting to be scored.")
    pending_png = models.BinaryField(null=True, blank=True)
    pending_logits = models.BinaryField(null=True, blank=True)
    submit_key = models.CharField(max_length=100, blank=True, default="")
    last_result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    summary = models.JSONField(null=True, blank=True)
    instance_values = models.JSONField(
        null=True, blank=True, help_text="Per-instance, per-group NoC@85/90 and IoU-AuC (for ΔSB/ΔGR/ΔHH)."
    )
    scored_async = models.PositiveIntegerField(default=0, help_text="Submissions scored by a Celery worker.")
    server_seconds = models.FloatField(default=0.0, help_text="Server time spent scoring and preparing.")
    rows_written = models.PositiveIntegerField(
        null=True, blank=True, help_text="Report rows so far (null: a run created before it was counted)."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    expires_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "create_key"],
                condition=~models.Q(create_key=""),
                name="evalrun_unique_create_key",
            )
        ]

    def __str__(self) -> str:
        return f"run {self.id} ({self.method or 'unnamed'} on {self.dataset_id})"


class EvaluationRow(models.Model):
    """One report row (sample x click), the columns of ``benchmark.session.REPORT_COLUMNS``."""

    run = models.ForeignKey(EvaluationRun, on_delete=models.CASCADE, related_name="rows")
    position = models.PositiveIntegerField()
    sample_id = models.CharField(max_length=300)
    image_stem = models.CharField(max_length=255)
    object_stem = models.CharField(max_length=100, blank=True, default="")
    group = models.CharField(max_length=30)
    click_index = models.PositiveIntegerField()
    x = models.FloatField()
    y = models.FloatField()
    is_positive = models.BooleanField()
    iou = models.FloatField(null=True, help_text="Null when the submission timed out.")
    timing_s = models.FloatField(
        help_text="Method time: the client-reported time, bounded by server_timing_s (the network never counts)."
    )
    server_timing_s = models.FloatField(
        help_text="Server-measured time from serving the clicks to the submission."
    )
    status = models.CharField(max_length=20)
    round = models.PositiveIntegerField()

    class Meta:
        ordering = ["run_id", "position"]
        constraints = [models.UniqueConstraint(fields=["run", "position"], name="evalrow_unique_position")]


def ten_equal_groups() -> list[list[float]]:
    """G1..G10 of equal probability mass, the RClicks groups (``benchmark.cli.equal_mass_groups(10)``)."""
    return [[k / 10, (k + 1) / 10] for k in range(10)]


def both_clickers() -> list[str]:
    return ["baseline", "group"]


class PublishedBenchmark(models.Model):
    """A benchmark an operator publishes: a dataset, a protocol every run on it follows, and a leaderboard of the
    runs of every participant (public, read-only, at ``/eval/b/<slug>/``).

    The protocol fields are fixed: a run created with ``benchmark=<slug>`` takes them, and a value the client
    sends that differs from one of them is refused, naming it (``evaluation.services.protocol_conflicts``).
    """

    slug = models.SlugField(max_length=80, unique=True)
    title = models.CharField(max_length=200)
    dataset = models.ForeignKey(
        "collector.Dataset", on_delete=models.CASCADE, related_name="published_benchmarks"
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="published_benchmarks"
    )
    clickers = models.JSONField(
        default=both_clickers, help_text="The clickers a run may use: baseline (RITM) and/or group (RClicks)."
    )
    max_clicks = models.PositiveIntegerField(default=20)
    max_time_s = models.FloatField(
        null=True, blank=True, help_text="Method time per sample (seconds); empty: no time limit."
    )
    seed = models.BigIntegerField(default=42, help_text="Seed of the clicking groups' random streams.")
    click_model = models.CharField(
        max_length=40, default="dt", help_text="The group clicker's clickability map."
    )
    group_bounds = models.JSONField(
        default=ten_equal_groups, help_text="[[low, high], ...] of the groups G1..Gk."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.title

    def protocol(self) -> dict:
        """The fixed values, as a run's configuration names them."""
        return {"clickers": list(self.clickers), "max_clicks": self.max_clicks, "max_time_s": self.max_time_s,
                "seed": self.seed, "click_model": self.click_model, "group_bounds": self.group_bounds,
                "stop_at_target": False}  # fmt: skip


class Participant(models.Model):
    """How a user appears on the leaderboards (their display name; the username until they choose one)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="participant"
    )
    display_name = models.CharField(max_length=60)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return self.display_name


class LocalRun(models.Model):
    """A ``python -m benchmark run`` result a participant published (``python -m benchmark publish`` or the
    leaderboard's upload): shown as "local, unverified", with its provenance. Nothing of it was computed here."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="local_runs")
    key = models.ForeignKey(
        EvaluationKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="local_runs"
    )
    benchmark = models.ForeignKey(
        PublishedBenchmark, null=True, blank=True, on_delete=models.SET_NULL, related_name="local_runs"
    )
    method = models.CharField(max_length=100)
    dataset_name = models.CharField(max_length=100)
    dataset_hash = models.CharField(max_length=64, help_text="benchmark.datasets.dataset_content_hash")
    summary = models.JSONField(help_text="The run's summary.json as published.")
    timing = models.JSONField(null=True, blank=True, help_text="Its timing.json (wall times), if published.")
    provenance = models.JSONField(
        default=dict, help_text="dataset_hash, checkpoint_sha256, model_ids, seed, code_version, config."
    )
    content_sha256 = models.CharField(
        max_length=64, help_text="Of what was published: a repeat is the same run."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["owner", "content_sha256"], name="localrun_unique_content")
        ]

    def __str__(self) -> str:
        return f"local run {self.method} on {self.dataset_name}"
