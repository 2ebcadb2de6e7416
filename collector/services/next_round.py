"""The next-round build: from the valid first clicks of a closed round to the fn/fp targets of the next.

For every instance of round N (its ``first`` targets) and every valid click on it in a counted session,
every segmenter of the study (``Study.next_round_segmenter``: one model, variant and checkpoint; when
empty, the site default ``settings.NEXT_ROUND_SEGMENTERS``) predicts a mask from that one positive click.
A segmenter is named as in ``segmenters.checkpoints.segmenter_choice``: ``embedded``, a key of
``settings.SEGMENTER_CHECKPOINTS`` (``sam:vit_b`` -> that checkpoint file), or a predictor name /
``predictor:variant`` (the official file name in ``settings.SEGMENTER_CHECKPOINT_DIR``). The
instance's previous mask P is, among all (segmenter, click) masks whose IoU with the object mask M is at
most :data:`MAX_PREVIOUS_IOU` (0.95, the RClicks seed's rule), the one with the highest IoU (ties: the
earlier segmenter in the setting, then pc before mobile, then the lower k). The IoU leaves out the ignore
band. No candidate means no round N+1 target for the instance; the reason is logged and returned.

Error regions (bool, canonical image size)::

    fn = M & ~P & ~ignore        fp = ~M & P & ~ignore

Small-region rule (``benchmark.rclicks.task_error_regions``, the one function that makes error masks, so
the benchmark rebuilds from an export exactly what workers were shown): connected components
(8-connectivity) smaller than ``study.min_error_area_px`` are removed first, then a region type whose
remaining area is below ``study.min_error_area_px`` gets no target. So every stored error mask consists
only of components of at least the minimum area: speckles along the boundary are never shown to a worker as
"the region to click". The export's manifest records the rule per previous mask.

Index k (the ``_<device>_<k>`` suffix): the 1-based position of the source click among the instance's
valid first clicks of the same device in counted sessions, in click order (``Click.received_at``, then
``Click.pk``). So ``tennis_embedded_fn_pc_3`` means: the mask predicted from the third valid PC click.

Provenance: every target stores the model id, variant and checkpoint sha256 of the segmenter that made
its previous mask (``segmenters.provenance.predictor_provenance``).

Failures: a segmenter that cannot be built or fails (``SegmenterError``, including a missing checkpoint
and failures of user-installed upstream code) or a misconfiguration/missing file (``NextRoundError``) is
recorded on round N (``Round.build_error``, ``build_failed_at``) and shown to the researcher; the build
is not retried by itself (it would fail the same way) until :func:`round_build_retry` clears the
failure, after the cause was fixed. Transient errors (database, file system) are not caught here: the
task retries them. Any other exception is a bug and propagates.

All-or-nothing: masks are predicted and encoded in memory, PNG files are written under a folder unique
to this build (``rounds/study_<id>/round_<N+1>/build_<token>/``), then one transaction (study row locked,
round N+1 must not exist yet) creates round N+1 (open) and all its targets. A build that fails after the
files were written deletes them; files of a crashed build are unreferenced orphans, removed by the next
successful build of the same round. After commit ``tasks.stimuli.render_round_stimuli`` is sent.

Memory: one image (3 bytes/px), the object and ignore masks and one mask per candidate (1 byte/px each,
candidates of one instance at a time) plus one embedding per (image, segmenter).
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import transaction
from django.utils import timezone

from benchmark.metrics import iou
from benchmark.rclicks import task_error_regions
from benchmark.stems import full_stem_build
from collector.models import DEVICES, Click, Instance, Round, Session, Study, Target, Trial
from collector.selectors.segmenters import study_segmenter_keys
from collector.services.datasets import mask_png_bytes
from collector.services.masks import MaskFileError, instance_masks, read_image
from collector.services.outbox import task_intent_add
from segmenters.base import Click as SegClick
from segmenters.base import Predictor, SegmenterError
from segmenters.cache import EmbeddingCache
from segmenters.checkpoints import segmenter_choice
from segmenters.provenance import MaskProvenance, predictor_provenance
from segmenters.registry import get_predictor
from tasks import names as task_names

logger = logging.getLogger(__name__)

#: The seed's rule: masks with a higher IoU are too good to leave an error region worth clicking.
MAX_PREVIOUS_IOU = 0.95
#: Media folder of the files of built rounds.
ROUNDS_DIR = "rounds"
#: Embeddings kept while one build runs (bytes).
EMBEDDING_CACHE_BYTES = 512 * 1024 * 1024

#: ``progress(done, total, instance)``: called after each instance (the task logs it).
Progress = Callable[[int, int, Instance], None]


class NextRoundError(Exception):
    """The next round cannot be built as configured; the message names what to fix."""


@dataclass(frozen=True)
class SourceClick:
    """A valid first click: canonical pixels (x = column, y = row), its device and 1-based k."""

    click_id: int
    x: float
    y: float
    device: str
    index: int


@dataclass
class PlannedTarget:
    """One round N+1 target computed in memory (masks bool (H, W) at the image's canonical size)."""

    instance: Instance
    click_type: str
    model_type: str
    full_stem: str
    previous_mask: np.ndarray
    error_mask: np.ndarray
    error_area: int
    previous_iou: float
    source: SourceClick
    provenance: MaskProvenance


@dataclass
class BuildResult:
    """What a build did: the round N+1 (None when nothing was built), whether this call created it,
    per instance id without targets of some type the reason, and why the build failed ("" unless it did)."""

    round: Round | None
    created: bool
    skipped: dict[int, str] = field(default_factory=dict)
    error: str = ""


# --------------------------------------------------------------------------------------------------
# Reading what round N left


def valid_first_clicks(*, round_: Round) -> dict[int, list[SourceClick]]:
    """Per instance id, the valid clicks on round ``round_``'s ``first`` targets in counted sessions,
    ordered by device (pc, mobile) then k (1-based per instance and device, in click order)."""
    rows = (
        Click.objects.filter(
            trial__target__round=round_,
            trial__target__click_type=Target.ClickType.FIRST,
            trial__role=Trial.Role.TASK,  # a practice or control click on a round-1 object is no data
            trial__session__validity=Session.Validity.COUNTED,
            trial__session__is_bot=False,  # a simulated annotator's click builds no round
            is_valid=True,
        )
        .order_by("received_at", "pk")
        .values_list("pk", "x", "y", "trial__session__device", "trial__target__instance_id")
    )
    counters: dict[tuple[int, str], int] = defaultdict(int)
    by_instance: dict[int, list[SourceClick]] = defaultdict(list)
    for pk, x, y, device, instance_id in rows:
        counters[(instance_id, device)] += 1
        by_instance[instance_id].append(
            SourceClick(click_id=pk, x=x, y=y, device=device, index=counters[(instance_id, device)])
        )
    for clicks in by_instance.values():
        clicks.sort(key=lambda c: (DEVICES.index(c.device) if c.device in DEVICES else 9, c.index))
    return dict(by_instance)


# --------------------------------------------------------------------------------------------------
# Segmenters


def next_round_predictors(*, study: Study) -> list[Predictor]:
    """The predictors of :func:`study_segmenter_keys`, built with the checkpoints the keys name.

    Raises:
      NextRoundError: no segmenter, or two with the same ``model_type`` (their full_stems would clash).
      SegmenterError: a key names nothing runnable, its code or checkpoint is missing or does not fit.
    """
    keys = study_segmenter_keys(study=study)
    if not keys:
        raise NextRoundError(
            "settings.NEXT_ROUND_SEGMENTERS is empty; name at least one segmenter (e.g. embedded)."
        )
    predictors = []
    for key in keys:
        choice = segmenter_choice(key, settings.SEGMENTER_CHECKPOINTS)
        predictor = get_predictor(
            choice.predictor, **choice.options(checkpoint_dir=str(settings.SEGMENTER_CHECKPOINT_DIR))
        )
        if not predictor.model_type or "_" in predictor.model_type:
            raise NextRoundError(
                f"segmenter {key!r} has model_type {predictor.model_type!r}; it must be a non-empty token "
                "without underscores (it becomes part of full_stem)."
            )
        predictors.append(predictor)
    if len({p.model_type for p in predictors}) != len(predictors):
        raise NextRoundError(
            f"segmenters {keys} include two with the same model_type; their targets would share full_stems. "
            "Keep one of them."
        )
    return predictors


def instance_plan(
    *,
    instance: Instance,
    image: np.ndarray,
    clicks: list[SourceClick],
    predictors: list[Predictor],
    cache: EmbeddingCache,
    min_error_area_px: int,
) -> tuple[list[PlannedTarget], str]:
    """The fn/fp targets of one instance (possibly none) and, when some type is missing, why."""
    if not clicks:
        return [], "no valid first click in a counted session"
    mask, ignore = instance_masks(instance)
    best: tuple[float, Predictor, SourceClick, np.ndarray] | None = None
    for predictor in predictors:
        embedding = cache.get_or_encode(predictor, image, instance.image.sha256)
        for click in clicks:
            prediction = predictor.predict(
                embedding, [SegClick(x=click.x, y=click.y, is_positive=True)], None
            )
            predicted = np.asarray(predictor.predict_mask(prediction), dtype=bool)
            overlap = iou(predicted, mask, ignore)
            if overlap <= MAX_PREVIOUS_IOU and (best is None or overlap > best[0]):
                best = (overlap, predictor, click, predicted)
    if best is None:
        return (
            [],
            f"every predicted mask has IoU > {MAX_PREVIOUS_IOU} ({len(clicks)} clicks x {len(predictors)} models)",
        )
    best_iou, predictor, click, previous = best
    regions = task_error_regions(mask=mask, previous=previous, ignore=ignore, min_area_px=min_error_area_px)
    planned, missing = [], []
    for click_type in ("fn", "fp"):
        region = regions[click_type]
        if region is None:
            missing.append(f"{click_type} region under {min_error_area_px} px")
            continue
        stem = full_stem_build(
            image_stem=instance.image.stem,
            object_stem=instance.object_stem,
            click_type=click_type,
            model_type=predictor.model_type,
            source_device=click.device,
            source_index=click.index,
        )
        planned.append(
            PlannedTarget(
                instance=instance,
                click_type=click_type,
                model_type=predictor.model_type,
                full_stem=stem,
                previous_mask=previous,
                error_mask=region,
                error_area=int(np.count_nonzero(region)),
                previous_iou=float(best_iou),
                source=click,
                provenance=predictor_provenance(predictor),
            )
        )
    return planned, "; ".join(missing)


# --------------------------------------------------------------------------------------------------
# The build


def _build_dir(*, study_id: int, number: int) -> str:
    return f"{ROUNDS_DIR}/study_{study_id}/round_{number}"


def _delete_files(names: list[str]) -> None:
    for name in names:
        try:
            default_storage.delete(name)
        except OSError:
            logger.warning("could not delete %s", name)


def _delete_orphan_builds(*, study_id: int, number: int, keep: str) -> None:
    """Remove files of earlier (crashed) builds of the same round; ``keep`` is this build's folder."""
    parent = _build_dir(study_id=study_id, number=number)
    try:
        folders, _ = default_storage.listdir(parent)
    except (FileNotFoundError, NotImplementedError):
        return
    for folder in folders:
        path = f"{parent}/{folder}"
        if path == keep or not folder.startswith("build_"):
            continue
        for sub in ("previous", "error"):
            try:
                _, files = default_storage.listdir(f"{path}/{sub}")
            except FileNotFoundError:
                continue
            _delete_files([f"{path}/{sub}/{name}" for name in files])


def round_build_next(*, round_id: int, progress: Progress | None = None) -> BuildResult:
    """Build round N+1 of round ``round_id``'s study from round N's valid first clicks (module docstring).

    Idempotent: when round N+1 exists it is returned (``created`` False) and nothing is computed. Returns
    ``BuildResult(round=None)`` when round ``round_id`` is gone, is still open, is the study's last round,
    or is not round 1 (fn/fp targets come from first clicks; later rounds have none).

    A segmenter failure or misconfiguration (``SegmenterError``, ``NextRoundError``) is recorded on the
    round (:func:`round_build_fail`) and returned as ``BuildResult(error=...)``; while it is recorded, the
    build is not attempted again (see :func:`round_build_retry`).
    """
    round_ = Round.objects.select_related("study").filter(pk=round_id).first()
    if round_ is None:
        logger.warning("next-round build: round %s does not exist", round_id)
        return BuildResult(round=None, created=False)
    study = round_.study
    number = round_.number + 1
    existing = Round.objects.filter(study=study, number=number).first()
    if existing is not None:
        return BuildResult(round=existing, created=False)
    if round_.state == Round.State.OPEN:
        logger.warning("next-round build: round %s is still open; nothing built", round_id)
        return BuildResult(round=None, created=False)
    if round_.number >= study.max_rounds or round_.number != 1:
        logger.info("next-round build: round %s (number %s) gets no next round", round_id, round_.number)
        return BuildResult(round=None, created=False)
    if round_.build_error:
        logger.info(
            "next-round build: round %s failed before and waits for a retry: %s",
            round_id,
            round_.build_error,
            extra={"round_id": round_id, "study_id": study.pk},
        )
        return BuildResult(round=None, created=False, error=round_.build_error)
    try:
        planned, skipped = _plan_next_round(round_=round_, progress=progress)
    except (SegmenterError, NextRoundError, MaskFileError) as error:
        reason = str(error)
        round_build_fail(round_id=round_id, reason=reason)
        return BuildResult(round=None, created=False, error=reason)
    return _create_next_round(study=study, number=number, planned=planned, skipped=skipped)


def _plan_next_round(
    *, round_: Round, progress: Progress | None
) -> tuple[list[PlannedTarget], dict[int, str]]:
    """Every round N+1 target of round ``round_``, computed in memory, and the skipped instances' reasons."""
    study = round_.study
    predictors = next_round_predictors(study=study)
    clicks = valid_first_clicks(round_=round_)
    instances = list(
        Instance.objects.filter(targets__round=round_, targets__click_type=Target.ClickType.FIRST)
        .select_related("image")
        .distinct()
        .order_by("image__stem", "object_stem")
    )
    cache = EmbeddingCache(EMBEDDING_CACHE_BYTES)
    planned: list[PlannedTarget] = []
    skipped: dict[int, str] = {}
    by_image: dict[int, list[Instance]] = defaultdict(list)
    for instance in instances:
        by_image[instance.image_id].append(instance)
    done = 0
    for group in by_image.values():
        image = read_image(group[0].image) if any(clicks.get(i.pk) for i in group) else None
        for instance in group:
            targets, reason = (
                instance_plan(
                    instance=instance,
                    image=image,
                    clicks=clicks.get(instance.pk, []),
                    predictors=predictors,
                    cache=cache,
                    min_error_area_px=study.min_error_area_px,
                )
                if image is not None
                else ([], "no valid first click in a counted session")
            )
            planned.extend(targets)
            if reason:
                skipped[instance.pk] = reason
                logger.info("next-round build: %s: %s", instance, reason)
            done += 1
            if progress is not None:
                progress(done, len(instances), instance)
        cache.clear()  # one image's embeddings at a time
    return planned, skipped


def _create_next_round(
    *, study: Study, number: int, planned: list[PlannedTarget], skipped: dict[int, str]
) -> BuildResult:
    """Write the masks of ``planned`` and create round ``number`` with its targets in one transaction."""
    folder = f"{_build_dir(study_id=study.pk, number=number)}/build_{uuid.uuid4().hex[:12]}"
    written: list[str] = []
    rows: list[Target] = []
    new_round: Round | None = None
    try:
        previous_names: dict[tuple[int, str, int], str] = {}
        for item in planned:
            key = (item.instance.pk, item.model_type, item.source.click_id)
            if key not in previous_names:
                prev_stem = item.full_stem.removesuffix(
                    f"_{item.click_type}_{item.source.device}_{item.source.index}"
                )
                name = default_storage.save(
                    f"{folder}/previous/{prev_stem}_{item.source.device}_{item.source.index}.png",
                    ContentFile(mask_png_bytes(item.previous_mask)),
                )
                written.append(name)
                previous_names[key] = name
            error_name = default_storage.save(
                f"{folder}/error/{item.full_stem}.png", ContentFile(mask_png_bytes(item.error_mask))
            )
            written.append(error_name)
            rows.append(
                Target(
                    instance=item.instance,
                    click_type=item.click_type,
                    model_type=item.model_type,
                    full_stem=item.full_stem,
                    previous_mask_file=previous_names[key],
                    error_mask_file=error_name,
                    error_area=item.error_area,
                    previous_iou=item.previous_iou,
                    source_click_id=item.source.click_id,
                    source_device=item.source.device,
                    source_index=item.source.index,
                    model_id=item.provenance.model_id,
                    model_variant=item.provenance.variant,
                    checkpoint_sha256=item.provenance.checkpoint_sha256,
                )
            )
        with transaction.atomic():
            Study.objects.select_for_update(no_key=True).get(pk=study.pk)
            existing = Round.objects.filter(study=study, number=number).first()
            if existing is None:
                # A round without targets is closed at once: there is nothing to click in it.
                new_round = Round.objects.create(
                    study=study,
                    number=number,
                    state=Round.State.OPEN if rows else Round.State.CLOSED,
                    closed_at=None if rows else timezone.now(),
                )
                for row in rows:
                    row.round = new_round
                Target.objects.bulk_create(rows)
                if rows:
                    task_intent_add(name=task_names.STIMULI_RENDER_ROUND_STIMULI, args=[new_round.pk])
    except BaseException:
        _delete_files(written)
        raise
    if new_round is None:  # another build won the race meanwhile
        _delete_files(written)
        return BuildResult(round=existing, created=False, skipped=skipped)
    _delete_orphan_builds(study_id=study.pk, number=number, keep=folder)
    logger.info(
        "next-round build: round %s of study %s created with %s targets (%s instances skipped)",
        number,
        study.pk,
        len(rows),
        len(skipped),
    )
    return BuildResult(round=new_round, created=True, skipped=skipped)


def round_build_fail(*, round_id: int, reason: str) -> None:
    """Record why building the next round from round ``round_id`` failed (shown on the study page)."""
    Round.objects.filter(pk=round_id).update(build_error=reason, build_failed_at=timezone.now())
    logger.warning(
        "next-round build of round %s failed: %s",
        round_id,
        reason,
        extra={"round_id": round_id},
    )


def round_build_retry(*, round_id: int) -> bool:
    """Clear a recorded build failure of round ``round_id`` and send the build again (after commit).

    For after the cause was fixed (checkpoint put in place, package installed). Returns False, changing
    nothing, when the round has no recorded failure or its next round exists.
    """
    with transaction.atomic():
        round_ = Round.objects.select_for_update(no_key=True).filter(pk=round_id).first()
        if round_ is None or not round_.build_error:
            return False
        if Round.objects.filter(study_id=round_.study_id, number=round_.number + 1).exists():
            return False
        Round.objects.filter(pk=round_id).update(build_error="", build_failed_at=None)
        task_intent_add(name=task_names.SEGMENTATION_BUILD_NEXT_ROUND, args=[round_id])
    logger.info("next-round build of round %s sent again", round_id, extra={"round_id": round_id})
    return True


def rounds_awaiting_build() -> list[int]:
    """Ids of closed rounds 1 whose study allows a round 2 that does not exist yet and whose build did not
    fail: builds whose message a broker lost (the file-system transport drops a message taken by a worker
    that then crashed). A recorded failure waits for :func:`round_build_retry` instead."""
    candidates = Round.objects.filter(state=Round.State.CLOSED, number=1, build_error="").select_related(
        "study"
    )
    return [
        r.pk
        for r in candidates
        if r.number < r.study.max_rounds and not Round.objects.filter(study=r.study, number=2).exists()
    ]
