"""The study set-up form."""

from __future__ import annotations

from django import forms

from collector.models import Study
from collector.selectors.segmenters import segmenter_options
from collector.services.study_rules import STUDY_RULES

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
    "kind",
    "corrective_init",
    "corrective_rounds",
    "corrective_clicks_per_round",
    "qualification_enabled",
    "qualification_instances",
    "qualification_min_placement",
    "qualification_min_gain",
)
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
