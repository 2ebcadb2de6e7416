"""Studies, their rounds, and the targets a trial asks a worker to click."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from .datasets import Dataset, Instance


class DisplayMode(models.TextChoices):
    """How the target is shown in phase B (names as RClicks writes them in previews.csv)."""

    TEXT_DESCRIPTION = "Text_Description", "Text Description"
    OBJECT_CUTOUT = "Object_CutOut", "Object CutOut"
    SHIFTED_CUTOUT = "Shifted_CutOut", "Shifted CutOut"
    SILHOUETTE_MASK = "Silhouette_Mask", "Silhouette Mask"
    HIGHLIGHTED_INSTANCE = "Highlighted_Instance", "Highlighted Instance"


class Platform(models.TextChoices):
    LINK = "link", "Standalone signed links"
    TOLOKA = "toloka", "Toloka"
    PROLIFIC = "prolific", "Prolific"
    MTURK = "mturk", "Amazon Mechanical Turk"


class StudyKind(models.TextChoices):
    TIMED = "timed", "Timed click study"
    CORRECTIVE = "corrective", "Corrective-click campaign"


class BatchRule(models.TextChoices):
    """Which clicks the batch rule counts (issue 32 item 7). The RClicks paper counts a batch when "at least 7
    out of the 10 clicks in a batch were within the object mask"; a click is *valid* when it is inside the target
    or within one click radius of its border. Both readings are defensible: a study names the one it used."""

    VALID = "valid", "valid clicks (inside the target or within the click radius of its border)"
    INSIDE = "inside", "clicks inside the object mask (the RClicks paper's wording)"


class ShortBatchPolicy(models.TextChoices):
    """What a worker is offered when fewer than a full batch of targets is left for them (issue 32 item 2)."""

    PAD = (
        "pad",
        "full batches, filled up at a round's tail with images already done (their clicks count only for the batch rule)",
    )
    FULL_ONLY = "full_only", "only full batches of wanted images (a round's tail waits for a full batch)"
    TAIL = "tail", "shorter batches at a round's tail, never counted below the batch rule"


class RejectedWorkPolicy(models.TextChoices):
    """Whether a batch counted here whose platform assignment was rejected still fills the quotas (issue 32 item 2)."""

    RELEASE = "release", "given back: its clicks stop counting toward the quotas"
    COUNT = "count", "kept: its clicks still count toward the quotas"


class CorrectiveInit(models.TextChoices):
    BOX = "box", "Box (GrabCut from the object's bounding box)"
    FIRST_CLICK = "first_click", "The worker's first click"


#: Longest consent or instructions text a study may give per language (characters).
SCREEN_TEXT_MAX_CHARS = 5000
#: Most practice and control trials a batch may hold.
SCREEN_TRIALS_MAX = 5


def validate_screen_texts(value) -> None:
    """A study's consent or instructions texts: ``{language code: text}`` for languages the site serves
    (``settings.LANGUAGES``), each text at most ``SCREEN_TEXT_MAX_CHARS`` characters. An empty text (or a
    language left out) shows the shipped default in that language."""
    codes = [code for code, _ in settings.LANGUAGES]
    if not isinstance(value, dict):
        raise ValidationError(
            f'must be an object of language code to text, e.g. {{"en": "...", "ru": "..."}}; got {value!r:.60}.'
        )
    for code, text in value.items():
        if code not in codes:
            raise ValidationError(
                f"language {code!r} is not one the site serves; use one of {', '.join(codes)} (settings.LANGUAGES)."
            )
        if not isinstance(text, str):
            raise ValidationError(f"the {code!r} text must be a string, not {type(text).__name__}.")
        if len(text) > SCREEN_TEXT_MAX_CHARS:
            raise ValidationError(
                f"the {code!r} text has {len(text)} characters; shorten it to at most {SCREEN_TEXT_MAX_CHARS}."
            )


def validate_segmenter_key(value: str) -> None:
    """A study's next-round segmenter must be one the site can run: ``embedded``, a key of
    ``settings.SEGMENTER_CHECKPOINTS``, a predictor name or ``predictor:variant`` (segmenters/checkpoints.py)."""
    if not value:
        return
    from segmenters.base import SegmenterError
    from segmenters.checkpoints import segmenter_choice

    try:
        segmenter_choice(value, settings.SEGMENTER_CHECKPOINTS)
    except SegmenterError as error:
        raise ValidationError(str(error)) from None


class Study(models.Model):
    class State(models.TextChoices):
        DRAFT = "draft"
        PUBLISHED = "published"
        PAUSED = "paused"
        CLOSED = "closed"

    name = models.CharField(max_length=200)
    dataset = models.ForeignKey(Dataset, on_delete=models.PROTECT, related_name="studies")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="studies", null=True, blank=True
    )
    researchers = models.ManyToManyField(
        settings.AUTH_USER_MODEL,
        related_name="shared_studies",
        blank=True,
        help_text="Others who may see it.",
    )
    state = models.CharField(max_length=20, choices=State.choices, default=State.DRAFT)
    display_mode = models.CharField(
        max_length=40, choices=DisplayMode.choices, default=DisplayMode.OBJECT_CUTOUT
    )
    # Phase durations (ms): A image, B target, C image with clicking blocked; D lasts until the click.
    image_ms = models.PositiveIntegerField(default=1500)
    target_ms = models.PositiveIntegerField(
        default=2000, help_text="Phase B for every mode but Text Description."
    )
    text_ms = models.PositiveIntegerField(default=2500, help_text="Phase B in Text Description mode.")
    blocked_ms = models.PositiveIntegerField(default=1500)
    batch_size = models.PositiveSmallIntegerField(default=10, validators=[MinValueValidator(1)])
    quota_pc = models.PositiveIntegerField(default=25, help_text="Valid PC clicks wanted per target.")
    quota_mobile = models.PositiveIntegerField(default=25, help_text="Valid mobile clicks wanted per target.")
    radius_fraction = models.FloatField(
        default=0.01,
        validators=[MinValueValidator(0.0), MaxValueValidator(0.5)],
        help_text="Click radius as a fraction of the image diagonal (a click this close to the region counts).",
    )
    min_valid_per_session = models.PositiveSmallIntegerField(
        default=7, help_text="Valid clicks a batch needs."
    )
    min_batch_size = models.PositiveSmallIntegerField(
        default=1,
        validators=[MinValueValidator(1)],
        help_text=(
            "Fewest trials a batch may have when fewer than batch_size images are left for the worker, with "
            "short_batches tail (or pad, when too few images are left to fill a batch up); never below "
            "min_valid_per_session, which a batch needs whatever its length."
        ),
    )
    min_reaction_ms = models.PositiveIntegerField(
        default=150, help_text="Reaction times below are a quality flag."
    )
    session_timeout_s = models.PositiveIntegerField(
        default=1800, help_text="Unfinished sessions expire after."
    )
    display_long_side = models.PositiveIntegerField(
        default=1280, help_text="Long side of display images (px)."
    )
    min_error_area_px = models.PositiveIntegerField(
        default=100, help_text="Smaller error regions are dropped."
    )
    max_rounds = models.PositiveSmallIntegerField(
        default=2, help_text="Round 1 (first clicks) + corrections."
    )
    next_round_segmenter = models.CharField(
        max_length=200,
        blank=True,
        default="",
        validators=[validate_segmenter_key],
        help_text=(
            "Model, variant and checkpoint that make the previous masks of the next rounds: embedded or a key of "
            "the site's SEGMENTER_CHECKPOINTS (e.g. sam:vit_b). Empty: the site default (NEXT_ROUND_SEGMENTERS)."
        ),
    )
    # --- study kind (issue 17): timed first clicks (RClicks) or corrective-click campaigns (seed 001) ---
    kind = models.CharField(
        max_length=20,
        choices=StudyKind.choices,
        default=StudyKind.TIMED,
        help_text="Timed: one timed click per target. Corrective: workers correct a model's mask round by round.",
    )
    corrective_init = models.CharField(
        max_length=20,
        choices=CorrectiveInit.choices,
        default=CorrectiveInit.BOX,
        help_text="Corrective studies: the initial mask comes from the object's box or from the worker's first click.",
    )
    corrective_rounds = models.PositiveSmallIntegerField(
        default=3,
        validators=[MinValueValidator(1), MaxValueValidator(20)],
        help_text="Corrective studies: rounds of clicks per instance (a model update after each).",
    )
    corrective_clicks_per_round = models.PositiveSmallIntegerField(
        default=4,
        validators=[MinValueValidator(1), MaxValueValidator(50)],
        help_text="Corrective studies: most clicks a worker may place in one round.",
    )
    # --- qualification test of corrective campaigns (issue 17 item 4, seed 001 §4) ---
    qualification_enabled = models.BooleanField(
        default=False,
        help_text=(
            "Corrective studies: a worker's first session is a scored test on ground-truth instances; only "
            "workers who pass get real tasks."
        ),
    )
    qualification_instances = models.PositiveSmallIntegerField(
        default=3,
        validators=[MinValueValidator(1), MaxValueValidator(20)],
        help_text="Corrective studies: instances (with ground truth) in the qualification test.",
    )
    qualification_min_placement = models.FloatField(
        default=0.75,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text=(
            "Corrective studies: least share of test clicks that obey the placement rules (positive on a missed "
            "part of the object, negative on a wrongly covered part, within the click radius)."
        ),
    )
    qualification_min_gain = models.FloatField(
        default=-0.05,
        validators=[MinValueValidator(-1.0), MaxValueValidator(1.0)],
        help_text=(
            "Corrective studies: least mean IoU gain per test click (IoU after the test minus IoU of the "
            "initial masks, over the clicks). Below 0 on purpose: the embedded segmenter may lose a little IoU "
            "on a good click (docs/corrective.md)."
        ),
    )
    # --- the screens a worker sees (issue 32 item 5): consent, instructions, practice and control trials ---
    consent_enabled = models.BooleanField(
        default=False,
        help_text="Timed studies: a consent screen before the instructions; the batch starts only after “I agree”.",
    )
    consent_texts = models.JSONField(
        default=dict,
        blank=True,
        validators=[validate_screen_texts],
        help_text='Consent text per language ({"en": ..., "ru": ...}); a language without one shows the default.',
    )
    instructions_texts = models.JSONField(
        default=dict,
        blank=True,
        validators=[validate_screen_texts],
        help_text=(
            'Instructions per language ({"en": ..., "ru": ...}); a language without one shows the default '
            "steps for the display mode and timings."
        ),
    )
    practice_trials = models.PositiveSmallIntegerField(
        default=0,
        validators=[MaxValueValidator(SCREEN_TRIALS_MAX)],
        help_text=(
            "Timed studies: practice trials at the start of a worker's first batch, with the study's own phases; "
            "never data (no quota, not in the RClicks export)."
        ),
    )
    control_trials = models.PositiveSmallIntegerField(
        default=0,
        validators=[MaxValueValidator(SCREEN_TRIALS_MAX)],
        help_text=(
            "Timed studies: control trials mixed into every batch (objects with known masks, as Toloka's control "
            "tasks); never data, but they decide whether the batch counts."
        ),
    )
    control_min_inside = models.PositiveSmallIntegerField(
        default=1,
        help_text="Control clicks of a batch that must land inside their object for the batch to count.",
    )
    batch_rule = models.CharField(
        max_length=10,
        choices=BatchRule.choices,
        default=BatchRule.VALID,
        help_text="Which clicks the batch rule counts: valid ones (inside or within the click radius) or inside ones.",
    )
    short_batches = models.CharField(
        max_length=10,
        choices=ShortBatchPolicy.choices,
        default=ShortBatchPolicy.PAD,
        help_text=(
            "What a worker gets when fewer wanted images than the batch size are left for them: a full batch "
            "filled up with images whose quotas are met (pad), a full batch or nothing (full_only), or a shorter "
            "batch (tail)."
        ),
    )
    rejected_work = models.CharField(
        max_length=10,
        choices=RejectedWorkPolicy.choices,
        default=RejectedWorkPolicy.RELEASE,
        help_text="A counted batch whose platform assignment was rejected: its clicks given back to the quotas or kept.",
    )
    reservation_grace_s = models.PositiveIntegerField(
        default=120,
        validators=[MinValueValidator(30)],
        help_text=(
            "A running batch not heard from for this long (no heartbeat: tab closed, phone locked) gives its "
            "unclicked images back; the worker who returns continues on what is still wanted."
        ),
    )
    platform = models.CharField(max_length=20, choices=Platform.choices, default=Platform.LINK)
    platform_config = models.JSONField(default=dict, blank=True)
    reward_per_batch = models.DecimalField(max_digits=8, decimal_places=4, default=Decimal("0.02"))
    currency = models.CharField(max_length=3, default="USD")
    created_at = models.DateTimeField(auto_now_add=True)
    published_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "studies"

    def __str__(self) -> str:
        return self.name

    def phase_b_ms(self) -> int:
        return self.text_ms if self.display_mode == DisplayMode.TEXT_DESCRIPTION else self.target_ms

    @property
    def is_corrective(self) -> bool:
        return self.kind == StudyKind.CORRECTIVE

    def quota_for(self, device: str) -> int:
        return self.quota_pc if device == "pc" else self.quota_mobile


class Round(models.Model):
    class State(models.TextChoices):
        OPEN = "open"
        BUILDING = "building", "building next round"
        CLOSED = "closed"

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="rounds")
    number = models.PositiveSmallIntegerField(help_text="1 = first clicks; 2.. = corrections.")
    state = models.CharField(max_length=20, choices=State.choices, default=State.OPEN)
    created_at = models.DateTimeField(auto_now_add=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    build_error = models.TextField(
        blank=True,
        default="",
        help_text="Why building the next round from this round failed (empty unless it failed); shown to researchers.",
    )
    build_failed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["study_id", "number"]
        constraints = [models.UniqueConstraint(fields=["study", "number"], name="round_unique_number")]

    def __str__(self) -> str:
        return f"{self.study} round {self.number}"


class Target(models.Model):
    """What one trial asks a worker to click: an instance (round 1) or an error region of a previous
    mask (fn/fp). Quota counters are per device: ``valid_*`` count clicks of counted sessions,
    ``inflight_*`` the trials of sessions still running (allocation keeps both under quota)."""

    class ClickType(models.TextChoices):
        FIRST = "first"
        FN = "fn"
        FP = "fp"

    round = models.ForeignKey(Round, on_delete=models.CASCADE, related_name="targets")
    instance = models.ForeignKey(Instance, on_delete=models.PROTECT, related_name="targets")
    click_type = models.CharField(max_length=5, choices=ClickType.choices, default=ClickType.FIRST)
    model_type = models.CharField(
        max_length=20, blank=True, default="", help_text="Segmenter of the previous mask."
    )
    # Provenance of the previous mask (segmenters.provenance.MaskProvenance): which weights made it.
    model_id = models.CharField(
        max_length=300,
        blank=True,
        default="",
        help_text="Predictor.model_id of the previous mask's segmenter.",
    )
    model_variant = models.CharField(max_length=100, blank=True, default="")
    checkpoint_sha256 = models.CharField(
        max_length=64, blank=True, default="", help_text="sha256 of its checkpoint file (empty: no weights)."
    )
    full_stem = models.CharField(max_length=400, help_text="RClicks task key (see rclicks-protocol §1.1).")
    previous_mask_file = models.FileField(max_length=500, blank=True, default="")
    error_mask_file = models.FileField(
        max_length=500, blank=True, default="", help_text="fn/fp region, 0/255 PNG."
    )
    error_area = models.PositiveIntegerField(default=0)
    previous_iou = models.FloatField(null=True, blank=True)
    source_click = models.ForeignKey(
        "collector.Click", on_delete=models.SET_NULL, null=True, blank=True, related_name="derived_targets"
    )
    source_device = models.CharField(max_length=10, blank=True, default="")
    source_index = models.PositiveIntegerField(
        null=True, blank=True, help_text="k of the _<device>_<k> suffix."
    )
    stimuli = models.JSONField(default=dict, blank=True, help_text="Rendered stimulus files by kind.")
    valid_pc = models.PositiveIntegerField(default=0)
    valid_mobile = models.PositiveIntegerField(default=0)
    inflight_pc = models.PositiveIntegerField(default=0)
    inflight_mobile = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["round_id", "id"]
        constraints = [models.UniqueConstraint(fields=["round", "full_stem"], name="target_unique_full_stem")]
        indexes = [models.Index(fields=["round", "valid_pc"]), models.Index(fields=["round", "valid_mobile"])]

    def __str__(self) -> str:
        return self.full_stem

    @property
    def display_name(self) -> str:
        """A name for people (the pages), from the explicit columns, never by cutting ``full_stem`` apart:
        ``coins · coin-left`` for a first click, ``coins · coin-left · fn of sam (pc click 3)`` for a
        correction. Files keep ``full_stem`` (the RClicks key). Reads ``instance.image``: select it."""
        instance = self.instance
        name = instance.image.stem + (f" · {instance.object_stem}" if instance.object_stem else "")
        if self.click_type == self.ClickType.FIRST:
            return name
        name += f" · {self.click_type}" + (f" of {self.model_type}" if self.model_type else "")
        if self.source_device and self.source_index is not None:
            name += f" ({self.source_device} click {self.source_index})"
        return name

    def valid_for(self, device: str) -> int:
        return self.valid_pc if device == "pc" else self.valid_mobile

    def inflight_for(self, device: str) -> int:
        return self.inflight_pc if device == "pc" else self.inflight_mobile
