"""Which segmenters a study may choose for its next-round builds, and which ones made its masks."""

from __future__ import annotations

from django.conf import settings
from django.db.models import Count

from collector.models import Study, Target
from segmenters.base import SegmenterError
from segmenters.checkpoints import checkpoint_dir, segmenter_choice


def segmenter_options() -> list[tuple[str, str]]:
    """(value, label) of the study form's next-round segmenter: the site default (empty value), the
    weight-free ``embedded`` and every entry of ``settings.SEGMENTER_CHECKPOINTS``. A checkpoint file that
    is not where the entry says is marked, so nobody picks a build that is bound to fail."""
    default = ", ".join(settings.NEXT_ROUND_SEGMENTERS) or "none"
    options = [("", f"Site default ({default})"), ("embedded", "embedded (no weights)")]
    folder = checkpoint_dir(settings.SEGMENTER_CHECKPOINT_DIR)
    for key, choice in settings.SEGMENTER_CHECKPOINTS.items():
        path = folder / choice.checkpoint if choice.checkpoint else None
        missing = path is not None and not path.is_file()
        options.append((key, f"{key} — {choice.label}{' (file missing)' if missing else ''}"))
    return options


def study_segmenter_keys(*, study: Study) -> list[str]:
    """The segmenters of ``study``'s next-round builds: its own choice, else the site default."""
    if study.next_round_segmenter:
        return [study.next_round_segmenter]
    return list(getattr(settings, "NEXT_ROUND_SEGMENTERS", ["embedded"]))


def study_segmenter_label(*, study: Study) -> str:
    """What the study's next-round builds run, for its page: ``sam:vit_b — sam · vit_b · file.pth``."""
    labels = []
    for key in study_segmenter_keys(study=study):
        try:
            choice = segmenter_choice(key, settings.SEGMENTER_CHECKPOINTS)
        except SegmenterError:
            labels.append(f"{key} — not configured on this site")
            continue
        labels.append(choice.label if choice.variant is None else f"{key} — {choice.label}")
    suffix = "" if study.next_round_segmenter else " (site default)"
    return "; ".join(labels) + suffix


def study_mask_provenance(*, study: Study) -> list[dict]:
    """Per round and segmenter: who made the previous masks of the study's fn/fp targets.

    One dict per (round, model_type, model_id, variant, checkpoint sha256), ordered by round:
    ``round``, ``model_type``, ``model_id``, ``model_variant``, ``checkpoint_sha256``, ``targets``.
    """
    rows = (
        Target.objects.filter(round__study=study)
        .exclude(click_type=Target.ClickType.FIRST)
        .values("round__number", "model_type", "model_id", "model_variant", "checkpoint_sha256")
        .annotate(targets=Count("id"))
        .order_by("round__number", "model_type", "model_id", "checkpoint_sha256")
    )
    return [{"round": row.pop("round__number"), **row} for row in rows]
