"""The study set-up form."""

from __future__ import annotations

from django import forms

from collector.models import Study

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
        }

    def clean(self):
        cleaned = super().clean()
        batch_size, needed = cleaned.get("batch_size"), cleaned.get("min_valid_per_session")
        if batch_size and needed is not None and needed > batch_size:
            self.add_error(
                "min_valid_per_session",
                f"{needed} valid clicks cannot be reached in a batch of {batch_size}; lower it or raise the batch size.",
            )
        return cleaned
