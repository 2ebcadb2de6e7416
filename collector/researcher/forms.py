"""The study set-up form and the dataset import forms."""

from __future__ import annotations

from decimal import Decimal

from django import forms
from django.core.validators import RegexValidator

from collector.models import Study
from collector.selectors.segmenters import segmenter_options
from collector.services.study_rules import STUDY_RULES

#: The corrective-campaign fields (their own fieldset in the form), last in the study's field list.
CORRECTIVE_FORM_FIELDS = (
    "kind",
    "corrective_init",
    "corrective_rounds",
    "corrective_clicks_per_round",
    "qualification_enabled",
    "qualification_instances",
    "qualification_min_placement",
    "qualification_min_gain",
)
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
    "min_reaction_ms",
    "session_timeout_s",
    "platform",
    "reward_per_batch",
    "currency",
    "next_round_segmenter",
    *CORRECTIVE_FORM_FIELDS,
)


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
    """Every setting a researcher chooses before publishing; labels say the units."""

    class Meta:
        model = Study
        fields = STUDY_FORM_FIELDS
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
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
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

        # The campaign settings (issue 17) keep their model defaults when a form leaves them out.
        for name in CORRECTIVE_FORM_FIELDS:
            self.fields[name].required = False

    def clean_kind(self):
        return self.cleaned_data.get("kind") or Study._meta.get_field("kind").get_default()

    def clean_corrective_init(self):
        return (
            self.cleaned_data.get("corrective_init") or Study._meta.get_field("corrective_init").get_default()
        )

    def _defaulted(self, name: str):
        value = self.cleaned_data.get(name)
        return Study._meta.get_field(name).get_default() if value is None else value

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

    def clean(self):
        """Each rule of ``collector.services.study_rules.STUDY_RULES`` (one function per rule, checked
        against the chosen dataset) adds its messages to the field at fault; a field with an error leaves
        ``cleaned_data``, so later rules do not judge it again."""
        cleaned = super().clean()
        for rule in STUDY_RULES:
            for field, message in rule(cleaned, cleaned.get("dataset")):
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
