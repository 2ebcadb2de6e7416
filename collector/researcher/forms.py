"""The study set-up form and the dataset import forms."""

from __future__ import annotations

import math
import re
from decimal import Decimal

from django import forms
from django.conf import settings
from django.core.validators import RegexValidator

from collector.models import Dataset, Image, Study
from collector.models.studies import SCREEN_TEXT_MAX_CHARS, StudyKind
from collector.selectors.segmenters import segmenter_options
from collector.services.study_rules import (
    KIND_ONLY_FIELDS,
    RESERVATION_FIELDS,
    SCREEN_FIELDS,
    fields_not_for_kind,
    study_rules_for,
    study_values_for_kind,
)

#: The corrective-campaign fields (their own fieldset in the form), last in the study's field list.
CORRECTIVE_FORM_FIELDS = ("kind", *KIND_ONLY_FIELDS[StudyKind.CORRECTIVE])
#: The screens a worker sees before a timed batch (issue 32 item 5). The form shows the two texts as one box
#: per language (``consent_text_<code>``, ``instructions_text_<code>``); the API takes them as objects.
SCREEN_FORM_FIELDS = SCREEN_FIELDS
SCREEN_TEXT_FIELDS = ("consent_texts", "instructions_texts")
DEFAULTED_SCREEN_FIELDS = ("practice_trials", "control_trials", "control_min_inside", "batch_rule")
#: RClicks' batch: 10 trials, a batch counting with 7 valid clicks. A smaller dataset gets a smaller default
#: batch (a batch never shows an image twice) with the same share of valid clicks, rounded up.
RCLICKS_BATCH_SIZE = 10
RCLICKS_VALID_SHARE = 0.7
STUDY_FORM_FIELDS = (
    "name",
    "dataset",
    "display_mode",
    "image_ms",
    "target_ms",
    "text_ms",
    "blocked_ms",
    "batch_size",
    "quota_pc",
    "quota_mobile",
    "radius_fraction",
    "min_valid_per_session",
    "batch_rule",
    "min_reaction_ms",
    "session_timeout_s",
    *RESERVATION_FIELDS,
    "platform",
    "reward_per_batch",
    "currency",
    "next_round_segmenter",
    *SCREEN_FORM_FIELDS,
    *CORRECTIVE_FORM_FIELDS,
)


def batch_defaults(*, images: int, screen_trials: int = 0) -> dict[str, int]:
    """The batch a dataset with ``images`` images with objects can give (``screen_trials`` practice and
    control trials take images of their own): RClicks' 10 trials when it has them, else as many as there
    are, and the valid clicks it needs in RClicks' share, rounded up (10 → 7, 5 → 4, 3 → 3)."""
    batch = max(1, min(RCLICKS_BATCH_SIZE, images - screen_trials))
    return {"batch_size": batch, "min_valid_per_session": math.ceil(RCLICKS_VALID_SHARE * batch - 1e-9)}


def dataset_images(dataset: Dataset) -> int:
    """Images of ``dataset`` with at least one object (what a batch is drawn from)."""
    return Image.objects.filter(dataset=dataset, instances__isnull=False).distinct().count()


def _languages() -> list[tuple[str, str]]:
    return [(code, str(name)) for code, name in settings.LANGUAGES]


def screen_text_field(field: str, code: str) -> str:
    """The form field of one language's text: ``consent_text_en`` for (``consent_texts``, ``en``)."""
    return f"{field.removesuffix('s')}_{code}"


class PlatformSettingsForm(forms.Form):
    """The crowd-platform settings a researcher sets from the study page (``Study.platform_config``); the
    fields offered depend on the platform. Each refusal names the field and value and says what to do."""

    CODE = RegexValidator(
        r"^[A-Za-z0-9]{1,40}$",
        "Completion code: %(value)r is not a code Prolific issues; copy the code (letters and digits only, "
        "at most 40) from the study's completion settings on Prolific.",
    )
    PROLIFIC_ID = RegexValidator(
        r"^[A-Za-z0-9]{1,64}$",
        "Prolific study id: %(value)r is not a Prolific id; copy the id (letters and digits) from the study's "
        "address on Prolific, or leave it empty to accept entries from any Prolific study.",
    )

    prolific_completion_code = forms.CharField(
        label="Completion code",
        required=False,
        validators=[CODE],
        help_text="The code configured on your Prolific study; finished participants are sent back with it.",
    )
    prolific_study_id = forms.CharField(
        label="Prolific study id",
        required=False,
        validators=[PROLIFIC_ID],
        help_text="Entries from other Prolific studies are turned away. Empty: any.",
    )
    languages = forms.CharField(
        label="Worker languages",
        required=False,
        help_text="Two-letter codes separated by commas (e.g. EN, DE). Empty: any language.",
    )
    pool_days = forms.IntegerField(label="Open for (days)", required=False, min_value=1, max_value=365)
    review_days = forms.IntegerField(
        label="Accepted automatically after (days)", required=False, min_value=1, max_value=30
    )
    max_budget = forms.DecimalField(
        label="Budget limit",
        required=False,
        min_value=0,
        max_digits=10,
        decimal_places=2,
        help_text="A launch whose budget estimate exceeds it is refused. Empty: no limit.",
    )
    bonus_per_counted_session = forms.DecimalField(
        label="Bonus per counted batch",
        required=False,
        min_value=0,
        max_digits=8,
        decimal_places=4,
    )

    FIELDS_BY_PLATFORM = {
        "prolific": (
            "prolific_completion_code",
            "prolific_study_id",
            "max_budget",
            "bonus_per_counted_session",
        ),
        "toloka": ("languages", "pool_days", "review_days", "max_budget", "bonus_per_counted_session"),
        "mturk": ("pool_days", "review_days", "max_budget", "bonus_per_counted_session"),
    }

    def __init__(self, *args, study, **kwargs):
        config = study.platform_config or {}
        initial = {name: config.get(name) for name in self.base_fields}
        if isinstance(languages := initial.get("languages"), list):
            initial["languages"] = ", ".join(languages)
        super().__init__(*args, initial=initial, **kwargs)
        kept = self.FIELDS_BY_PLATFORM.get(study.platform, ())
        for name in list(self.fields):
            if name not in kept:
                del self.fields[name]
        if "pool_days" in self.fields:
            self.fields[
                "pool_days"
            ].help_text = f"How long the {study.get_platform_display()} pools stay open. Empty: 30."
        if "review_days" in self.fields:
            self.fields["review_days"].help_text = "Submissions not reviewed by then are accepted. Empty: 7."
        for name in ("max_budget", "bonus_per_counted_session"):
            self.fields[name].label += f" ({study.currency})"

    def clean_languages(self):
        raw = self.cleaned_data.get("languages", "")
        codes = [part.strip().upper() for part in raw.replace(";", ",").split(",") if part.strip()]
        wrong = [code for code in codes if len(code) != 2 or not code.isascii() or not code.isalpha()]
        if wrong:
            raise forms.ValidationError(
                f"Worker languages: {', '.join(repr(code) for code in wrong)} is not a two-letter language code; "
                "write codes such as EN, DE, RU separated by commas, or leave it empty for any language."
            )
        return codes

    def config_values(self) -> dict:
        """The cleaned values as ``platform_config`` holds them (decimals as strings, empty as None)."""
        values = {}
        for name, value in self.cleaned_data.items():
            values[name] = str(value) if isinstance(value, Decimal) else value
        return values


class StudyForm(forms.ModelForm):
    """Every setting a researcher chooses before publishing; labels say the units.

    Only the chosen kind's settings apply (``collector.services.study_rules.KIND_ONLY_FIELDS``): the page
    shows only them, and those of the other kind are not validated and keep their model defaults. An unbound
    form starts with the batch the first dataset can give (``batch_defaults``)."""

    class Meta:
        model = Study
        fields = tuple(name for name in STUDY_FORM_FIELDS if name not in SCREEN_TEXT_FIELDS)
        labels = {
            "image_ms": "Phase A: image (ms)",
            "target_ms": "Phase B: target (ms)",
            "text_ms": "Phase B in Text Description mode (ms)",
            "blocked_ms": "Phase C: image, clicking blocked (ms)",
            "batch_size": "Trials per batch",
            "quota_pc": "Valid PC clicks per target",
            "quota_mobile": "Valid mobile clicks per target",
            "radius_fraction": "Click radius (fraction of the image diagonal)",
            "min_valid_per_session": "Valid clicks a batch needs",
            "batch_rule": "Batch rule counts",
            "min_reaction_ms": "Fast-click threshold (ms)",
            "session_timeout_s": "Session timeout (s)",
            "reward_per_batch": "Reward per batch",
            "next_round_segmenter": "Segmenter of the next rounds",
            "kind": "Study kind",
            "corrective_init": "Initial mask",
            "corrective_rounds": "Rounds per instance",
            "corrective_clicks_per_round": "Clicks per round",
            "qualification_enabled": "Qualification test before the campaign",
            "qualification_instances": "Qualification: instances in the test",
            "qualification_min_placement": "Qualification: least share of well-placed clicks (0-1)",
            "qualification_min_gain": "Qualification: least IoU gain per click",
            "consent_enabled": "Consent screen before the instructions",
            "practice_trials": "Practice trials (first batch of a worker)",
            "control_trials": "Control trials per batch",
            "control_min_inside": "Control clicks a batch needs inside",
            "reservation_grace_s": "Reservation grace period (s)",
            "short_batches": "Short batches",
            "rejected_work": "Work the platform rejects",
        }
        help_texts = {
            "reservation_grace_s": (
                "A running batch whose page is not heard from for this long (tab closed, phone locked: the page "
                "sends a heartbeat every 20 s) gives its unclicked images back to other workers; a worker who "
                "returns continues on what is still wanted. At least 30, shorter than the session timeout."
            ),
            "short_batches": (
                "When fewer than a full batch of images is left for a worker: fill the batch up with images "
                "already done (default: their clicks count for the batch rule, never for a quota, and stay out "
                "of the RClicks export), offer nothing until a full batch is wanted, or offer a shorter batch if "
                "it can still reach the valid clicks a batch needs. A batch is never counted with fewer valid "
                "clicks than that, whatever its length."
            ),
            "rejected_work": (
                "A batch counted here whose assignment the platform rejected (a wrong code, your review): its "
                "clicks stop counting and its targets are wanted again, or they keep counting."
            ),
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for field, what in (("consent_texts", "Consent text"), ("instructions_texts", "Instructions")):
            for code, language in _languages():
                self.fields[screen_text_field(field, code)] = forms.CharField(
                    label=f"{what} ({language})",
                    required=False,
                    max_length=SCREEN_TEXT_MAX_CHARS,
                    widget=forms.Textarea(attrs={"rows": 3}),
                    help_text=(
                        f"Plain text; a blank line starts a paragraph. Empty: the default {what.lower()} in "
                        f"{language}."
                    ),
                )
        if not self.is_bound:
            first = Dataset.objects.order_by("name").first()
            if first is not None:
                for name, value in batch_defaults(images=dataset_images(first)).items():
                    self.initial.setdefault(name, value)
        # The other kind's settings are not asked for (the page hides them; clean() restores their defaults).
        for name in self.hidden_fields_for_kind():
            self.fields[name].required = False
        # The site's checkpoints are configuration (SEGMENTER_CHECKPOINTS), so the choices are read per form.
        field = self.fields["next_round_segmenter"]
        self.fields["next_round_segmenter"] = forms.ChoiceField(
            choices=segmenter_options(),
            required=False,
            label=field.label,
            help_text=(
                "Model, variant and checkpoint that predict the previous masks (fn/fp targets) of the rounds after "
                "round 1. The list is the site's SEGMENTER_CHECKPOINTS."
            ),
        )

        # The campaign settings (issue 17) and the screens (issue 32) keep their model defaults when a form
        # leaves them out.
        for name in (*CORRECTIVE_FORM_FIELDS, *DEFAULTED_SCREEN_FIELDS, *RESERVATION_FIELDS):
            self.fields[name].required = False
        # The study rules say it with the field's label, the value and what to do (rule_reservation_grace_fits).
        self.fields["reservation_grace_s"].validators = []
        self.fields["reservation_grace_s"].min_value = None

    @property
    def kind_value(self) -> str:
        """The kind the form is filled in for: the posted one, else the initial one, else timed."""
        raw = self.data.get("kind") if self.is_bound else self.initial.get("kind")
        return raw if raw in StudyKind.values else StudyKind.TIMED

    def hidden_fields_for_kind(self) -> list[str]:
        """Form fields of the settings the chosen kind does not use (the screen texts by language)."""
        names = []
        for name in fields_not_for_kind(self.kind_value):
            if name in SCREEN_TEXT_FIELDS:
                names += [screen_text_field(name, code) for code, _ in _languages()]
            elif name in self.fields:
                names.append(name)
        return names

    def screen_text_fields(self) -> list:
        """The bound per-language text fields, consent texts first, in the order of ``settings.LANGUAGES``."""
        return [
            self[screen_text_field(field, code)] for field in SCREEN_TEXT_FIELDS for code, _ in _languages()
        ]

    def study_fields(self) -> dict:
        """The cleaned settings as ``study_create`` takes them (Study fields, but name and dataset)."""
        return {
            name: self.cleaned_data[name]
            for name in STUDY_FORM_FIELDS
            if name not in {"name", "dataset"} and name in self.cleaned_data
        }

    def error_summary(self) -> list[dict]:
        """Every error for the summary at the top of the page: ``{"id", "text"}`` (``id`` the field's
        element, "" for an error of the whole form), in the order of the fields. A message that does not name
        its field already (the rules' messages start with the label, without its unit) is prefixed with the
        field's label."""
        items = [{"id": "", "text": str(error)} for error in self.non_field_errors()]
        for field in self:
            named = re.sub(r"\s*\([^)]*\)$", "", str(field.label))
            for error in field.errors:
                text = str(error)
                if not text.startswith(named):
                    text = f"{field.label}: {text}"
                items.append({"id": field.id_for_label, "text": text})
        return items

    def clean_kind(self):
        return self.cleaned_data.get("kind") or Study._meta.get_field("kind").get_default()

    def clean_corrective_init(self):
        return (
            self.cleaned_data.get("corrective_init") or Study._meta.get_field("corrective_init").get_default()
        )

    def _defaulted(self, name: str):
        value = self.cleaned_data.get(name)
        return Study._meta.get_field(name).get_default() if value in (None, "") else value

    def clean_corrective_rounds(self):
        return self._defaulted("corrective_rounds")

    def clean_corrective_clicks_per_round(self):
        return self._defaulted("corrective_clicks_per_round")

    def clean_qualification_instances(self):
        return self._defaulted("qualification_instances")

    def clean_qualification_min_placement(self):
        return self._defaulted("qualification_min_placement")

    def clean_qualification_min_gain(self):
        return self._defaulted("qualification_min_gain")

    def clean_practice_trials(self):
        return self._defaulted("practice_trials")

    def clean_control_trials(self):
        return self._defaulted("control_trials")

    def clean_control_min_inside(self):
        return self._defaulted("control_min_inside")

    def clean_reservation_grace_s(self):
        return self._defaulted("reservation_grace_s")

    def clean_short_batches(self):
        return self.cleaned_data.get("short_batches") or Study._meta.get_field("short_batches").get_default()

    def clean_rejected_work(self):
        return self.cleaned_data.get("rejected_work") or Study._meta.get_field("rejected_work").get_default()

    def clean_batch_rule(self):
        return self._defaulted("batch_rule")

    def clean(self):
        """The other kind's settings get their model defaults back (whatever was posted, and without their
        errors); the screen texts are gathered by language. Then each rule of the
        chosen kind (``collector.services.study_rules.study_rules_for``: one function per rule, checked
        against the chosen dataset) adds its messages to the field at fault; a field with an error leaves ``cleaned_data``, so
        later rules do not judge it again."""
        cleaned = super().clean()
        hidden = self.hidden_fields_for_kind()
        model_fields = {field.name for field in Study._meta.concrete_fields}
        for name in hidden:
            self._errors.pop(name, None)
            if name in model_fields:
                cleaned[name] = Study._meta.get_field(name).get_default()
        for field in SCREEN_TEXT_FIELDS:
            texts = {}
            for code, _language in _languages():
                text = (cleaned.pop(screen_text_field(field, code), "") or "").strip()
                if text and screen_text_field(field, code) not in hidden:
                    texts[code] = text
            cleaned[field] = texts
        values = study_values_for_kind(cleaned)
        for rule in study_rules_for(cleaned.get("kind")):
            for field, message in rule(values, cleaned.get("dataset")):
                if field in cleaned:
                    self.add_error(field, message)
        return cleaned


LAYOUT_CHOICES = [
    ("", "detect from the folder"),
    ("grabcut", "grabcut: data_GT/ + boundary_GT/"),
    ("berkeley", "berkeley: images/ + masks/"),
    ("davis", "davis: img/ + gt/"),
    ("coco_mval", "coco_mval: img/ + gt/ (COCO)"),
    ("tetris", "tetris: images/ + id-encoded masks/"),
    ("folder", "folder: images/ + masks/<stem>[_<object>].png"),
]


class _DatasetImportFields(forms.Form):
    layout = forms.ChoiceField(
        choices=LAYOUT_CHOICES, required=False, help_text="How the dataset folder is organised."
    )
    name = forms.CharField(
        required=False,
        max_length=100,
        help_text="Empty: the layout's RClicks name (GrabCut, COCO, ...), or the folder's name.",
    )


class ArchiveImportForm(_DatasetImportFields):
    """An archive of a dataset folder, uploaded (``prefix="archive"``)."""

    archive = forms.FileField(
        label="Archive",
        help_text="A .zip or .tar (.gz, .bz2, .xz) of the dataset folder, as made from its parent.",
    )
    field_order = ["archive", "layout", "name"]


class FolderImportForm(_DatasetImportFields):
    """A folder under the import root (``prefix="folder"``); ``folders``: the ones to choose from."""

    folder = forms.ChoiceField(label="Folder", help_text="Relative to the import root.")
    field_order = ["folder", "layout", "name"]

    def __init__(self, *args, folders: list[str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["folder"].choices = [("", "choose a folder")] + [(f, f) for f in folders]
