"""The next-round build: from the valid first clicks of a closed round to the fn/fp targets of the next.

For every instance of round N (its ``first`` targets) and every valid click on it in a counted session,
every segmenter of ``settings.NEXT_ROUND_SEGMENTERS`` predicts a mask from that one positive click. The
instance's previous mask P is, among all (segmenter, click) masks whose IoU with the object mask M is at
most :data:`MAX_PREVIOUS_IOU` (0.95, the RClicks seed's rule), the one with the highest IoU (ties: the
earlier segmenter in the setting, then pc before mobile, then the lower k). The IoU leaves out the ignore
band. No candidate means no round N+1 target for the instance; the reason is logged and returned.

Error regions (bool, canonical image size)::

    fn = M & ~P & ~ignore        fp = ~M & P & ~ignore

Small-region rule (decided here): connected components (8-connectivity) smaller than
``study.min_error_area_px`` are removed first, then a region type whose remaining area is below
``study.min_error_area_px`` gets no target. So every stored error mask consists only of components of at
least the minimum area: speckles along the boundary are never shown to a worker as "the region to click".

Index k (the ``_<device>_<k>`` suffix): the 1-based position of the source click among the instance's
valid first clicks of the same device in counted sessions, in click order (``Click.received_at``, then
``Click.pk``). So ``tennis_embedded_fn_pc_3`` means: the mask predicted from the third valid PC click.

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

import cv2
import numpy as np
from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import transaction
from django.utils import timezone
from PIL import Image as PILImage

from benchmark.metrics import iou
from collector.models import Click, Image, Instance, Round, Session, Study, Target
from collector.services.datasets import mask_png_bytes
from config.celery import app as celery_app
from exports.stems import full_stem_build
from segmenters.base import CheckpointError, Predictor, SegmenterError
from segmenters.base import Click as SegClick
from segmenters.cache import EmbeddingCache
from segmenters.registry import get_predictor

logger = logging.getLogger(__name__)

#: The seed's rule: masks with a higher IoU are too good to leave an error region worth clicking.
MAX_PREVIOUS_IOU = 0.95
#: Task sent (by name, after commit) to render the new round's stimuli.
RENDER_STIMULI_TASK = "tasks.stimuli.render_round_stimuli"
#: Media folder of the files of built rounds.
ROUNDS_DIR = "rounds"
#: Embeddings kept while one build runs (bytes).
EMBEDDING_CACHE_BYTES = 512 * 1024 * 1024
DEVICE_ORDER = ("pc", "mobile")

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


@dataclass
class BuildResult:
    """What a build did: the round N+1 (None when nothing was built), whether this call created it,
    and, per instance id without targets of some type, the reason."""

    round: Round | None
    created: bool
    skipped: dict[int, str] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------------
# Pure parts (no database)


def drop_small_components(region: np.ndarray, *, min_area_px: int) -> np.ndarray:
    """``region`` (bool (H, W)) without its 8-connected components of fewer than ``min_area_px`` pixels."""
    if min_area_px <= 1 or not region.any():
        return region.copy()
    count, labels, stats, _ = cv2.connectedComponentsWithStats(region.astype(np.uint8), connectivity=8)
    keep = np.zeros(count, dtype=bool)
    keep[1:] = stats[1:, cv2.CC_STAT_AREA] >= min_area_px
    return keep[labels]


def error_regions(
    *, mask: np.ndarray, previous: np.ndarray, ignore: np.ndarray | None, min_area_px: int
) -> dict[str, np.ndarray | None]:
    """{"fn": region or None, "fp": region or None}: fn = M & ~P & ~ignore, fp = ~M & P & ~ignore, each
    without components under ``min_area_px`` and None when what is left is under ``min_area_px``."""
    keep = np.ones_like(mask) if ignore is None else ~ignore
    raw = {"fn": mask & ~previous & keep, "fp": ~mask & previous & keep}
    regions: dict[str, np.ndarray | None] = {}
    for kind, region in raw.items():
        cleaned = drop_small_components(region, min_area_px=min_area_px)
        regions[kind] = cleaned if int(np.count_nonzero(cleaned)) >= max(1, min_area_px) else None
    return regions


# --------------------------------------------------------------------------------------------------
# Reading what round N left


def valid_first_clicks(*, round_: Round) -> dict[int, list[SourceClick]]:
    """Per instance id, the valid clicks on round ``round_``'s ``first`` targets in counted sessions,
    ordered by device (pc, mobile) then k (1-based per instance and device, in click order)."""
    rows = (
        Click.objects.filter(
            trial__target__round=round_,
            trial__target__click_type=Target.ClickType.FIRST,
            trial__session__validity=Session.Validity.COUNTED,
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
        clicks.sort(key=lambda c: (DEVICE_ORDER.index(c.device) if c.device in DEVICE_ORDER else 9, c.index))
    return dict(by_instance)


def _read_gray(name: str, *, what: str) -> np.ndarray:
    try:
        with default_storage.open(name, "rb") as handle:
            picture = PILImage.open(handle)
            picture.load()
    except FileNotFoundError:
        raise NextRoundError(
            f"{what} file {name!r} is missing from the media storage; re-import the dataset."
        ) from None
    return np.asarray(picture.convert("L"))


def _read_image(image: Image) -> np.ndarray:
    """(H, W, 3) uint8 RGB at the image's canonical size (``image.height``, ``image.width``)."""
    try:
        with image.file.open("rb") as handle:
            picture = PILImage.open(handle)
            picture.load()
    except FileNotFoundError:
        raise NextRoundError(
            f"image file {image.file.name!r} of {image} is missing from the media storage; re-import the dataset."
        ) from None
    picture = picture.convert("RGB")
    if picture.size != (image.width, image.height):
        picture = picture.resize((image.width, image.height), PILImage.Resampling.LANCZOS)
    return np.asarray(picture)


def _instance_masks(instance: Instance) -> tuple[np.ndarray, np.ndarray | None]:
    """(object bool (H, W), ignore bool (H, W) or None) at the image's canonical size."""
    shape = (instance.image.height, instance.image.width)
    mask = _read_gray(instance.mask_file.name, what=f"mask of {instance}") > 127
    ignore = None
    if instance.ignore_file:
        ignore = _read_gray(instance.ignore_file.name, what=f"ignore band of {instance}") > 127
    for name, array in (("mask", mask), ("ignore band", ignore)):
        if array is not None and array.shape != shape:
            raise NextRoundError(
                f"{name} of {instance} is {array.shape[1]}x{array.shape[0]}, the image is {shape[1]}x{shape[0]}; "
                "re-import the dataset."
            )
    return mask, ignore


# --------------------------------------------------------------------------------------------------
# Segmenters


def next_round_predictors() -> list[Predictor]:
    """The predictors of ``settings.NEXT_ROUND_SEGMENTERS`` (registry names), checkpoints looked up in
    ``settings.SEGMENTER_CHECKPOINT_DIR`` for those that take one."""
    names = list(getattr(settings, "NEXT_ROUND_SEGMENTERS", ["embedded"]))
    if not names:
        raise NextRoundError(
            "settings.NEXT_ROUND_SEGMENTERS is empty; name at least one segmenter (e.g. embedded)."
        )
    predictors = []
    for name in names:
        try:
            predictor = get_predictor(name, checkpoint_dir=str(settings.SEGMENTER_CHECKPOINT_DIR))
        except CheckpointError:
            raise
        except SegmenterError as exc:
            if "rejected options" not in str(exc):
                raise
            predictor = get_predictor(name)  # a weight-free predictor has no checkpoint_dir option
        if not predictor.model_type or "_" in predictor.model_type:
            raise NextRoundError(
                f"segmenter {name!r} has model_type {predictor.model_type!r}; it must be a non-empty token "
                "without underscores (it becomes part of full_stem)."
            )
        predictors.append(predictor)
    if len({p.model_type for p in predictors}) != len(predictors):
        raise NextRoundError(
            f"settings.NEXT_ROUND_SEGMENTERS={names} has two segmenters with the same model_type; their "
            "targets would share full_stems. Keep one of them."
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
    mask, ignore = _instance_masks(instance)
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
    regions = error_regions(mask=mask, previous=previous, ignore=ignore, min_area_px=min_error_area_px)
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

    Raises:
      NextRoundError: a missing file or a misconfigured segmenter (message says which).
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

    predictors = next_round_predictors()
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
        image = _read_image(group[0].image) if any(clicks.get(i.pk) for i in group) else None
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
                    transaction.on_commit(
                        lambda: celery_app.send_task(RENDER_STIMULI_TASK, args=[new_round.pk])
                    )
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


def rounds_awaiting_build() -> list[int]:
    """Ids of closed rounds 1 whose study allows a round 2 that does not exist yet: builds whose message
    a broker lost (the file-system transport drops a message taken by a worker that then crashed)."""
    candidates = Round.objects.filter(state=Round.State.CLOSED, number=1).select_related("study")
    return [
        r.pk
        for r in candidates
        if r.number < r.study.max_rounds and not Round.objects.filter(study=r.study, number=2).exists()
    ]
