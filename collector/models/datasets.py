"""Datasets as imported: images and their instances (objects), with files under MEDIA_ROOT."""

from __future__ import annotations

from django.db import models


class Dataset(models.Model):
    LAYOUTS = [(name, name) for name in ("grabcut", "berkeley", "davis", "coco_mval", "tetris", "folder")]

    name = models.CharField(
        max_length=100, unique=True, help_text="RClicks dataset name (GrabCut, COCO, ...)."
    )
    layout = models.CharField(max_length=20, choices=LAYOUTS)
    source_path = models.CharField(max_length=1000, help_text="Folder the dataset was imported from.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Image(models.Model):
    """One image. ``width``/``height`` are the canonical frame all coordinates use (the benchmark
    loader's size: for TETRIS the long side is capped at 2048); ``original_*`` are the file's size."""

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="images")
    stem = models.CharField(max_length=255)
    file = models.FileField(max_length=500)
    file_size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64, db_index=True)
    width = models.PositiveIntegerField()
    height = models.PositiveIntegerField()
    original_width = models.PositiveIntegerField()
    original_height = models.PositiveIntegerField()

    class Meta:
        ordering = ["dataset_id", "stem"]
        constraints = [models.UniqueConstraint(fields=["dataset", "stem"], name="image_unique_stem")]

    def __str__(self) -> str:
        return f"{self.dataset.name}/{self.stem}"

    @property
    def diagonal_px(self) -> float:
        return (self.width**2 + self.height**2) ** 0.5


class Instance(models.Model):
    """One object of an image. ``mask_file``: 8-bit PNG 0/255 at the image's canonical size;
    ``ignore_file``: the same for the ignore band (GrabCut/Berkeley value 128), empty when there is none."""

    image = models.ForeignKey(Image, on_delete=models.CASCADE, related_name="instances")
    object_stem = models.CharField(
        max_length=100, blank=True, default="", help_text="Empty for single-object masks."
    )
    object_id = models.PositiveBigIntegerField(default=1, help_text="Value of the object in the source mask.")
    mask_file = models.FileField(max_length=500)
    mask_sha256 = models.CharField(max_length=64)
    source_mask_file = models.FileField(max_length=500, help_text="The mask file as imported.")
    source_mask_size = models.BigIntegerField()
    source_mask_sha256 = models.CharField(max_length=64)
    ignore_file = models.FileField(max_length=500, blank=True, default="")
    ignore_area = models.PositiveIntegerField(default=0)
    area = models.PositiveIntegerField()
    bbox_x0 = models.PositiveIntegerField()
    bbox_y0 = models.PositiveIntegerField()
    bbox_x1 = models.PositiveIntegerField(help_text="Inclusive.")
    bbox_y1 = models.PositiveIntegerField(help_text="Inclusive.")
    text_description = models.TextField(blank=True, default="", help_text="Shown in Text Description mode.")
    category = models.CharField(max_length=100, blank=True, default="")

    class Meta:
        ordering = ["image_id", "object_stem"]
        constraints = [
            models.UniqueConstraint(fields=["image", "object_stem"], name="instance_unique_object")
        ]

    def __str__(self) -> str:
        return f"{self.image}{'/' + self.object_stem if self.object_stem else ''}"

    @property
    def first_round_full_stem(self) -> str:
        """RClicks full_stem of the first-round task: seven underscores before an object id."""
        if self.object_stem:
            return f"{self.image.stem}_______{self.object_stem}"
        return self.image.stem


class DatasetImport(models.Model):
    """One import asked for in the researcher area (an uploaded archive or a folder under the import root), run
    by ``tasks.datasets.import_dataset`` through the outbox; its row is the progress and the result page."""

    class Source(models.TextChoices):
        ARCHIVE = "archive", "uploaded archive"
        FOLDER = "folder", "folder under the import root"

    class State(models.TextChoices):
        PENDING = "pending", "waiting for a worker"
        RUNNING = "running", "running"
        DONE = "done", "done"
        FAILED = "failed", "failed"

    source = models.CharField(max_length=10, choices=Source.choices)
    #: the upload as stored under MEDIA_ROOT (removed once the import ends) and its name on the researcher's disk
    archive = models.FileField(max_length=500, blank=True)
    archive_name = models.CharField(max_length=255, blank=True)
    archive_size = models.BigIntegerField(default=0)
    #: the folder chosen, relative to settings.DATASET_IMPORT_ROOT
    folder = models.CharField(max_length=1000, blank=True)
    layout = models.CharField(max_length=20, blank=True, help_text="Empty: detected from the folder.")
    name = models.CharField(max_length=100, blank=True, help_text="Empty: the layout's RClicks name.")
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    stage = models.CharField(max_length=200, blank=True)
    done = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    messages = models.JSONField(default=list, blank=True)
    dataset = models.ForeignKey(
        Dataset, null=True, blank=True, on_delete=models.SET_NULL, related_name="imports"
    )
    detected_layout = models.CharField(max_length=20, blank=True)
    images = models.PositiveIntegerField(default=0)
    instances = models.PositiveIntegerField(default=0)
    ignore_bands = models.PositiveIntegerField(default=0)
    unchanged = models.BooleanField(default=False)
    created_by = models.ForeignKey(
        "auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="dataset_imports"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"import {self.pk} ({self.archive_name or self.folder})"

    @property
    def finished(self) -> bool:
        return self.state in (self.State.DONE, self.State.FAILED)

    @property
    def what(self) -> str:
        return self.archive_name if self.source == self.Source.ARCHIVE else self.folder
