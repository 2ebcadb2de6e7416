"""Corrective-click campaigns (issue 17, seed 001): per-instance state, its masks and its clicks.

A session of a corrective study allocates its targets like a timed session (round 1's ``first`` targets, one
per instance); each trial then becomes a :class:`CorrectiveItem`: an initial mask (from the object's box or
the worker's first click), then ``Study.corrective_rounds`` rounds of up to ``corrective_clicks_per_round``
clicks, with a model update on the ``models`` queue after each round. Every mask is a
:class:`CorrectiveMask` row with the model id and checkpoint sha256 that made it; every click a
:class:`CorrectiveClick` (undone clicks stay in the log, flagged).
"""

from __future__ import annotations

from django.db import models

from .sessions import Session, Trial


class CorrectiveItem(models.Model):
    """One instance of a corrective session: where it is in its rounds.

    ``round``: the round whose clicks the worker places now (0 = the initial first click when the study
    starts from a first click; 1..R = correction rounds). ``current_mask``: the latest stored mask (None
    before the first one). ``state``: ``updating`` while the model runs, ``clicking`` while the worker may
    click, then ``done`` / ``skipped`` (mask accepted as it is) / ``failed`` (update failed; ``error`` says
    why, shown to the researcher)."""

    class State(models.TextChoices):
        UPDATING = "updating", "model updating"
        CLICKING = "clicking"
        DONE = "done"
        SKIPPED = "skipped", "skipped (mask is fine)"
        FAILED = "failed"

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="corrective_items")
    trial = models.OneToOneField(Trial, on_delete=models.CASCADE, related_name="corrective_item")
    position = models.PositiveSmallIntegerField()
    round = models.PositiveSmallIntegerField(default=0)
    state = models.CharField(max_length=10, choices=State.choices, default=State.UPDATING)
    current_mask = models.ForeignKey(
        "CorrectiveMask", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    finish_after_update = models.BooleanField(
        default=False, help_text="The worker pressed done with clicks pending: done once they are applied."
    )
    error = models.TextField(blank=True, default="", help_text="Why the last model update failed.")
    update_attempts = models.PositiveSmallIntegerField(default=0)
    shown_at = models.DateTimeField(null=True, blank=True, help_text="First time the worker saw it.")
    finished_at = models.DateTimeField(null=True, blank=True)
    active_ms = models.FloatField(default=0.0, help_text="Time the worker spent on it (client clock).")
    round_ms = models.JSONField(default=dict, blank=True, help_text="{round: ms the worker spent}.")

    class Meta:
        ordering = ["session_id", "position"]
        constraints = [
            models.UniqueConstraint(fields=["session", "position"], name="corrective_item_unique_position")
        ]

    def __str__(self) -> str:
        return f"corrective item {self.position} of session {self.session_id}"

    @property
    def is_finished(self) -> bool:
        return self.state in (self.State.DONE, self.State.SKIPPED, self.State.FAILED)


class CorrectiveMask(models.Model):
    """A mask of an item after ``round`` (0 = initial mask), with who made it and its IoU vs ground truth."""

    item = models.ForeignKey(CorrectiveItem, on_delete=models.CASCADE, related_name="masks")
    round = models.PositiveSmallIntegerField()
    file = models.FileField(max_length=500)
    predictor = models.CharField(max_length=100, default="")
    model_id = models.CharField(max_length=300, blank=True, default="")
    model_variant = models.CharField(max_length=100, blank=True, default="")
    checkpoint_sha256 = models.CharField(max_length=64, blank=True, default="")
    iou = models.FloatField(
        null=True, blank=True, help_text="IoU with the instance's mask (ignore band left out)."
    )
    area = models.PositiveIntegerField(default=0)
    clicks_used = models.PositiveSmallIntegerField(default=0)
    compute_ms = models.FloatField(null=True, blank=True, help_text="Model time of this update.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["item_id", "round"]
        constraints = [models.UniqueConstraint(fields=["item", "round"], name="corrective_mask_unique_round")]

    def __str__(self) -> str:
        return f"mask r{self.round} of {self.item}"


class CorrectiveClick(models.Model):
    """One click of a corrective round (x = column, y = row, canonical image pixels, floats).

    ``order``: 0.. within the round, in upload order; ``undone``: the worker undid it (kept for the log,
    not given to the model); ``item_ms``: time since the item was first shown (client clock)."""

    item = models.ForeignKey(CorrectiveItem, on_delete=models.CASCADE, related_name="clicks")
    round = models.PositiveSmallIntegerField()
    order = models.PositiveSmallIntegerField()
    idempotency_key = models.CharField(max_length=64, unique=True)
    x = models.FloatField()
    y = models.FloatField()
    is_positive = models.BooleanField()
    pointer_type = models.CharField(max_length=10, blank=True, default="")
    item_ms = models.FloatField(null=True, blank=True)
    undone = models.BooleanField(default=False)
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["item_id", "round", "order"]
        constraints = [
            models.UniqueConstraint(fields=["item", "round", "order"], name="corrective_click_unique_order")
        ]

    def __str__(self) -> str:
        return f"{'+' if self.is_positive else '-'}click ({self.x:.1f}, {self.y:.1f}) r{self.round} of {self.item}"


class CorrectiveQualification(models.Model):
    """The result of a worker's qualification test on a corrective campaign (seed 001 §4): one per study and
    worker; a failed worker cannot take the test again.

    ``placement``: share of the test clicks obeying the placement rules (0..1); ``gain_per_click``: IoU
    gained over the test (last mask minus initial mask, summed over the instances) per click (None without
    clicks); ``details``: per item {position, instance, clicks, placed_ok, iou_start, iou_end} and the
    thresholds used. ``platform_sent_at``: when the result reached the platform (Toloka skill)."""

    study = models.ForeignKey("collector.Study", on_delete=models.CASCADE, related_name="qualifications")
    worker = models.ForeignKey("collector.Worker", on_delete=models.PROTECT, related_name="qualifications")
    session = models.OneToOneField(
        Session, on_delete=models.SET_NULL, null=True, blank=True, related_name="qualification"
    )
    passed = models.BooleanField()
    placement = models.FloatField(null=True, blank=True)
    gain_per_click = models.FloatField(null=True, blank=True)
    clicks = models.PositiveIntegerField(default=0)
    details = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    platform_sent_at = models.DateTimeField(null=True, blank=True)
    platform_error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["study_id", "-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["study", "worker"], name="corrective_qualification_unique_worker")
        ]

    def __str__(self) -> str:
        return f"qualification of {self.worker} on study {self.study_id}: {'passed' if self.passed else 'failed'}"
