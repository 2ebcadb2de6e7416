"""Targets of a study and the clicks they received."""

from __future__ import annotations

from django.db.models import Count, Q, QuerySet

from collector.models import Click, Study, Target, Trial

#: Practice and control trials show round-1 objects too but are never data (collector.services.screens).
#: Simulated annotators' clicks (Session.is_bot) are no data either.
_TASK_TRIALS = Q(trials__role=Trial.Role.TASK, trials__session__is_bot=False)


def study_targets(*, study: Study, round_number: int | None = None) -> QuerySet[Target]:
    """Targets of ``study`` (optionally one round), with their instance/image and click counts
    (``clicks_total``, ``clicks_valid``, ``clicks_invalid``) annotated."""
    queryset = Target.objects.filter(round__study=study)
    if round_number is not None:
        queryset = queryset.filter(round__number=round_number)
    return (
        queryset.select_related("round", "instance", "instance__image")
        .annotate(
            clicks_total=Count("trials__click", filter=_TASK_TRIALS),
            clicks_valid=Count("trials__click", filter=_TASK_TRIALS & Q(trials__click__is_valid=True)),
            clicks_invalid=Count("trials__click", filter=_TASK_TRIALS & Q(trials__click__is_valid=False)),
        )
        .order_by("round__number", "id")
    )


def study_target_get(*, study: Study, target_id: int) -> Target:
    """One target of ``study``; raises ``Target.DoesNotExist`` for a target of another study."""
    return Target.objects.select_related("round", "instance", "instance__image").get(
        pk=target_id, round__study=study
    )


def target_clicks(*, target: Target) -> list[dict]:
    """All clicks of task trials on ``target`` (practice and control clicks are not data): ``x``, ``y`` (canonical image px, float), ``device``, ``pointer_type``,
    ``is_valid`` (None while unvalidated), ``invalid_reason``, ``distance_px``, ``reaction_ms``,
    ``worker`` (pseudonym), ``session_id``, ``session_validity``."""
    rows = (
        Click.objects.filter(trial__target=target, trial__role=Trial.Role.TASK, trial__session__is_bot=False)
        .order_by("received_at", "pk")
        .values(
            "id",
            "x",
            "y",
            "pointer_type",
            "is_valid",
            "invalid_reason",
            "distance_px",
            "reaction_ms",
            "trial__session_id",
            "trial__session__device",
            "trial__session__validity",
            "trial__session__worker__pseudonym",
        )
    )
    return [
        {
            "id": row["id"],
            "x": row["x"],
            "y": row["y"],
            "device": row["trial__session__device"],
            "pointer_type": row["pointer_type"],
            "is_valid": row["is_valid"],
            "invalid_reason": row["invalid_reason"],
            "distance_px": row["distance_px"],
            "reaction_ms": row["reaction_ms"],
            "worker": row["trial__session__worker__pseudonym"],
            "session_id": row["trial__session_id"],
            "session_validity": row["trial__session__validity"],
        }
        for row in rows
    ]


def target_region_file(*, target: Target):
    """The FieldFile of the region a trial asks to click: the error region for fn/fp targets, the
    instance mask for first-click targets (8-bit PNG, 0/255, canonical image size)."""
    if target.click_type != Target.ClickType.FIRST and target.error_mask_file:
        return target.error_mask_file
    return target.instance.mask_file
