"""Reads for the exporters: the targets of a set of studies, and their clicks as a stream of tuples.

Targets are few (one per task; about 10k for the whole RClicks set) and are loaded into a dict once.
Clicks are many and are only ever streamed: ``.iterator(chunk_size=...)`` uses a server-side cursor
on PostgreSQL (and chunked fetches on SQLite), so memory per click row is O(1) and the stream never
materialises the result.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from django.db.models import Count

from collector.models import Click, Session, Study, Target, Trial
from collector.selectors.progress import session_counts

#: Rows fetched from the database per round trip when streaming clicks.
CHUNK_SIZE = 5000
COCO_MVAL_NAME = "COCO_MVal"


class ExportError(Exception):
    """An export cannot be made; the message names the study/target/file at fault and what to do."""


def export_dataset_name(*, name: str, layout: str) -> str:
    """The ``dataset`` column value of a dataset.

    ``Dataset.name`` already is the RClicks name (``GrabCut``, ``COCO``, ...), except that a COCO_MVal
    folder imported under the benchmark's CLI name ``COCO_MVal`` is written ``COCO``: the RClicks CSV and
    its readers use ``COCO`` for that dataset (protocol §1.1), and ``COCO_MVal`` never occurs there. Any
    other name is the user's own (``--name``) and is kept, because it is the name the benchmark opens
    the folder with.
    """
    if layout == "coco_mval" and name.lower() == COCO_MVAL_NAME.lower():
        return "COCO"
    return name


@dataclass(frozen=True)
class ExportTarget:
    """One task of the export: the explicit key columns of the RClicks CSV and where its mask lives.

    ``width``/``height``: the image's canonical frame in pixels (the benchmark loader's size).
    """

    target_id: int
    study_id: int
    round_number: int
    display_mode: str
    dataset: str
    image_stem: str
    object_stem: str
    click_type: str
    model_type: str
    full_stem: str
    source_device: str
    source_index: int | None
    width: int
    height: int
    previous_mask_file: str
    # Provenance of the previous mask (empty for round 1 and for targets built before it was recorded).
    model_id: str = ""
    model_variant: str = ""
    checkpoint_sha256: str = ""
    #: The study's rule for its error regions (``benchmark.rclicks.task_error_regions``).
    min_error_area_px: int = 0


def studies_for_export(*, study_ids: list[int]) -> list[Study]:
    """The studies in the order asked, with their datasets; raises ExportError naming unknown ids."""
    if not study_ids:
        raise ExportError("no study given: pass at least one study id (--study ID).")
    found = {s.pk: s for s in Study.objects.filter(pk__in=study_ids).select_related("dataset")}
    missing = [str(pk) for pk in study_ids if pk not in found]
    if missing:
        raise ExportError(f"no study with id {', '.join(missing)}; list the studies in the admin or the API.")
    ordered: list[Study] = []
    for pk in study_ids:
        if found[pk] not in ordered:
            ordered.append(found[pk])
    return ordered


def export_targets(*, study_ids: list[int]) -> dict[int, ExportTarget]:
    """Every target of the studies' rounds, by target id."""
    rows = (
        Target.objects.filter(round__study_id__in=study_ids)
        .order_by("id")
        .values_list(
            "id",
            "round__study_id",
            "round__number",
            "round__study__display_mode",
            "instance__image__dataset__name",
            "instance__image__dataset__layout",
            "instance__image__stem",
            "instance__object_stem",
            "click_type",
            "model_type",
            "full_stem",
            "source_device",
            "source_index",
            "instance__image__width",
            "instance__image__height",
            "previous_mask_file",
            "model_id",
            "model_variant",
            "checkpoint_sha256",
            "round__study__min_error_area_px",
        )
    )
    targets: dict[int, ExportTarget] = {}
    for row in rows:
        (pk, study_id, number, mode, name, layout, image_stem, object_stem, click_type, model_type) = row[:10]
        full_stem, source_device, source_index, width, height, mask_file = row[10:16]
        model_id, model_variant, checkpoint_sha256, min_error_area_px = row[16:]
        targets[pk] = ExportTarget(
            target_id=pk,
            study_id=study_id,
            round_number=number,
            display_mode=mode,
            dataset=export_dataset_name(name=name, layout=layout),
            image_stem=image_stem,
            object_stem=object_stem,
            click_type=click_type,
            model_type=model_type,
            full_stem=full_stem,
            source_device=source_device,
            source_index=source_index,
            width=width,
            height=height,
            previous_mask_file=mask_file or "",
            model_id=model_id,
            model_variant=model_variant,
            checkpoint_sha256=checkpoint_sha256,
            min_error_area_px=min_error_area_px,
        )
    return targets


def _clicks(*, study_ids: list[int], include_invalid: bool):
    # practice and control trials are never data (collector.services.screens): not even with include_invalid
    # simulated annotators' clicks (Session.is_bot, collector.services.bots) are never data either
    clicks = Click.objects.filter(
        trial__session__study_id__in=study_ids, trial__role=Trial.Role.TASK, trial__session__is_bot=False
    )
    if not include_invalid:
        clicks = clicks.filter(trial__session__validity=Session.Validity.COUNTED, is_valid=True)
    return clicks


def rclicks_click_count(*, study_ids: list[int], include_invalid: bool) -> int:
    """How many rows :func:`rclicks_click_rows` yields (for the progress bar)."""
    return _clicks(study_ids=study_ids, include_invalid=include_invalid).count()


def rclicks_click_rows(
    *, study_ids: list[int], include_invalid: bool, chunk_size: int = CHUNK_SIZE
) -> Iterator[tuple[int, int, str, float, float, bool]]:
    """Stream ``(click_id, target_id, device, x, y, counted)`` ordered by target, then click.

    Only clicks of counted sessions that are themselves valid, unless ``include_invalid``; ``counted``
    tells which rows the default export holds. x, y: float pixels in the image's canonical frame.
    Ordering by target keeps each task's clicks together, as the RClicks release is laid out.
    """
    rows = (
        _clicks(study_ids=study_ids, include_invalid=include_invalid)
        .order_by("trial__target_id", "id")
        .values_list(
            "id",
            "trial__target_id",
            "trial__session__device",
            "x",
            "y",
            "is_valid",
            "trial__session__validity",
        )
    )
    for click_id, target_id, device, x, y, is_valid, validity in rows.iterator(chunk_size=chunk_size):
        yield click_id, target_id, device, x, y, bool(is_valid) and validity == Session.Validity.COUNTED


#: Columns of the full-fidelity stream, in order (see exports/full.py for their meaning).
FULL_FIELDS = (
    "id",
    "trial__session__study_id",
    "trial__target__round__number",
    "trial__session_id",
    "trial__session__worker__pseudonym",
    "trial__session__device",
    "trial__session__platform_device",
    "trial__session__detected_device",
    "trial__session__user_agent",
    "trial__session__client_info",
    "trial__session__status",
    "trial__session__validity",
    "trial__session__valid_clicks",
    "trial__session__quality_flags",
    "trial__session__rejection_reason",
    "trial__session__started_at",
    "trial__session__finished_at",
    "trial__session__control_inside",
    "trial__session__control_passed",
    "trial_id",
    "trial__position",
    "trial__role",
    "trial__phase_onsets_ms",
    "trial__scheduled_onsets_ms",
    "trial__load_wait_ms",
    "trial__blocked_clicks",
    "trial__flags",
    "trial__refresh_hz",
    "trial__target_id",
    "x",
    "y",
    "shown_width",
    "shown_height",
    "pointer_type",
    "reaction_ms",
    "event_timestamp_ms",
    "received_at",
    "is_valid",
    "distance_px",
    "invalid_reason",
)


def session_trial_counts(*, study_ids: list[int]) -> dict[int, dict[str, int]]:
    """Per session id of the studies, its trials by role (``{"task": n, "practice": n, "control": n}``): what
    the screens before the batch said (the instructions count the trials after the practice ones). One row
    per session in memory."""
    counts: dict[int, dict[str, int]] = {}
    rows = (
        Trial.objects.filter(session__study_id__in=study_ids, session__is_bot=False)
        .values("session_id", "role")
        .annotate(n=Count("id"))
        .values_list("session_id", "role", "n")
    )
    for session_id, role, n in rows:
        counts.setdefault(session_id, {role: 0 for role in Trial.Role.values})[role] = n
    return counts


def full_click_count(*, study_ids: list[int]) -> int:
    return Click.objects.filter(trial__session__study_id__in=study_ids, trial__session__is_bot=False).count()


def full_click_rows(*, study_ids: list[int], chunk_size: int = CHUNK_SIZE) -> Iterator[tuple]:
    """Stream every click of the studies as a tuple of :data:`FULL_FIELDS`, ordered by session, position."""
    rows = (
        Click.objects.filter(trial__session__study_id__in=study_ids, trial__session__is_bot=False)
        .order_by("trial__session_id", "trial__position", "id")
        .values_list(*FULL_FIELDS)
    )
    yield from rows.iterator(chunk_size=chunk_size)


@dataclass(frozen=True)
class StudySessionCounts:
    """Sessions of one study by outcome (``collector.selectors.progress.session_counts``: ``started`` is all
    of them, ``in_progress`` those still running), to explain an empty export."""

    started: int
    in_progress: int
    finished: int
    expired: int
    counted: int
    rejected: int
    pending: int
    top_rejection_reason: str


def study_session_counts(*, study_id: int) -> StudySessionCounts:
    sessions = Session.objects.filter(study_id=study_id, is_bot=False)
    totals = session_counts(sessions)
    top = (
        sessions.filter(validity=Session.Validity.REJECTED)
        .exclude(rejection_reason="")
        .values("rejection_reason")
        .annotate(n=Count("id"))
        .order_by("-n", "rejection_reason")
        .first()
    )
    return StudySessionCounts(**totals, top_rejection_reason=top["rejection_reason"] if top else "")
