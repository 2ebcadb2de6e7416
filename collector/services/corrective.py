"""Corrective-click campaigns (issue 17, seed 001): items, clicks, rounds, model updates, finishing.

Flow of one instance (a :class:`~collector.models.CorrectiveItem`, one per trial of the session):

* ``corrective_items_ensure`` makes the items of a session the first time its player asks. With a box
  start the item is ``updating`` and the initial mask (round 0) is queued at once; with a first-click start
  it is ``clicking`` in round 0 with a budget of one positive click.
* ``corrective_click_record`` stores a click exactly once per idempotency key (a retried upload returns the
  stored click). Refusals (``CorrectiveRefused``, with an HTTP status): outside the image 400; an item of
  another session 404; a finished / skipped / updating item or a round over its budget 409.
* ``corrective_click_undo`` flags the latest click of the current round undone (kept in the log).
* ``corrective_round_submit`` ends the round: the item turns ``updating`` and
  ``tasks.corrective.update_item`` (``models`` queue) is sent after commit with (item, round).
* ``corrective_update_apply`` (the task's body) runs the study's segmenter on the previous mask and all
  clicks so far (``segmenters.base.Predictor.correct``: seed 001's Mb+c), writes the new PNG, then stores the mask row and advances the item in one transaction,
  only if the item is still waiting for exactly this round's update. So a redelivered message (a worker
  killed mid-update: ``acks_late``) recomputes and stores once, and until then the previous mask stays
  the item's mask. ``corrective_update_fail`` records a failure after the task's retries.
* ``corrective_item_skip`` (mask is fine) and ``corrective_item_done`` end an item; done with clicks
  pending in the round submits them first and ends the item once they are applied.
* ``corrective_session_finish`` closes the session once every item is done, skipped or failed: completion
  code, counted, and the targets' in-flight slots become valid ones (the campaign wants one worker per
  instance per device quota).
"""

from __future__ import annotations

import hashlib
import io
import logging
import math
import time
import uuid
import zlib
from dataclasses import dataclass

import cv2
import numpy as np
from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext as _
from PIL import Image as PILImage

from benchmark.metrics import iou
from collector.models import CorrectiveClick, CorrectiveItem, CorrectiveMask, Session, Study, Target, Trial
from collector.models.studies import CorrectiveInit
from collector.services.codes import completion_code_make
from collector.services.masks import MaskFileError, instance_masks, read_image, read_mask
from collector.services.outbox import task_intent_add
from tasks import names as task_names

logger = logging.getLogger(__name__)

#: Media folder of corrective masks.
MASKS_DIR = "corrective"
POINTER_TYPES = ("mouse", "touch", "pen", "")
MAX_KEY_LENGTH = 64
#: Predictor name recorded for initial masks made from the object's box (OpenCV GrabCut, no weights).
BOX_PREDICTOR = "grabcut-box"
BOX_GRABCUT_ITERATIONS = 5
BOX_WORK_LONG_SIDE_PX = 320


class CorrectiveRefused(Exception):
    """The request cannot be carried out; ``status`` is the HTTP status the API answers with. The player shows
    the message to the worker: refusals of a state (409) are translated; 400s answer a client that broke the
    API's contract and stay in English."""

    def __init__(self, message: str, *, status: int = 409, reason: str = ""):
        super().__init__(message)
        self.status = status
        self.reason = reason  # a machine-readable code where the player acts on it (finish: wait or stop)


class CorrectiveUpdateError(Exception):
    """A model update cannot run as configured (no retry helps); the message is shown to the researcher."""


def _study_is_corrective(study: Study) -> None:
    if not study.is_corrective:
        raise CorrectiveRefused(
            f"study {study.pk} is a {study.kind} study, not a corrective campaign.", status=404
        )


def round_budget(*, study: Study, round_number: int) -> int:
    """Clicks allowed in ``round_number``: one (positive) for a first-click start's round 0, else K."""
    return 1 if round_number == 0 else study.corrective_clicks_per_round


# --------------------------------------------------------------------------------------------------
# items


def corrective_items_ensure(*, session: Session, send: bool = True) -> list[CorrectiveItem]:
    """The items of ``session`` in position order, made (and their initial masks queued) on first call.
    ``send=False``: queue nothing (the simulation mode applies the updates itself)."""
    study = session.study
    _study_is_corrective(study)
    items = list(session.corrective_items.select_related("current_mask").order_by("position"))
    if items:
        return items
    with transaction.atomic():
        Session.objects.select_for_update(no_key=True).filter(pk=session.pk).first()
        if session.corrective_items.exists():  # made by a concurrent request while this one waited
            return list(session.corrective_items.select_related("current_mask").order_by("position"))
        box = study.corrective_init == CorrectiveInit.BOX
        trials = list(Trial.objects.filter(session=session).order_by("position"))
        items = CorrectiveItem.objects.bulk_create(
            [
                CorrectiveItem(
                    session=session,
                    trial=trial,
                    position=trial.position,
                    round=0,
                    state=CorrectiveItem.State.UPDATING if box else CorrectiveItem.State.CLICKING,
                )
                for trial in trials
            ]
        )
        items = list(session.corrective_items.order_by("position"))
        if box and send:
            for item in items:
                _send_update_on_commit(item_id=item.pk, round_number=0)
    return items


def _send_update_on_commit(*, item_id: int, round_number: int) -> None:
    # through the transactional outbox: written with the change, sent after commit, relayed while the broker
    # is down (collector.services.outbox)
    task_intent_add(name=task_names.CORRECTIVE_UPDATE_ITEM, args=[item_id, round_number])


def _locked_item(*, session: Session, item_id) -> CorrectiveItem:
    """The item, row-locked, after checking it belongs to the running session. Call inside a transaction."""
    try:
        item_id = int(item_id)
    except (TypeError, ValueError):
        raise CorrectiveRefused(f"item={item_id!r} is not an item id.", status=400) from None
    item = (
        CorrectiveItem.objects.select_for_update(no_key=True, of=("self",))
        .select_related("session__study", "trial__target__instance__image")
        .filter(pk=item_id)
        .first()
    )
    if item is None or item.session_id != session.pk:
        raise CorrectiveRefused(f"item {item_id} is not part of this task.", status=404)
    locked_session = item.session
    if locked_session.status != Session.Status.STARTED:
        raise CorrectiveRefused(
            _("session %(session)s is %(status)s; it takes no more work.")
            % {"session": locked_session.pk, "status": locked_session.status}
        )
    if locked_session.expires_at <= timezone.now():
        raise CorrectiveRefused(
            _("session %(session)s expired at %(time)s UTC.")
            % {"session": locked_session.pk, "time": f"{locked_session.expires_at:%H:%M:%S}"}
        )
    return item


def _require_clicking(item: CorrectiveItem) -> None:
    if item.state == CorrectiveItem.State.CLICKING:
        return
    reasons = {
        CorrectiveItem.State.UPDATING: _("the model is updating its mask; wait for the next round"),
        CorrectiveItem.State.DONE: _("it is done"),
        CorrectiveItem.State.SKIPPED: _("it was skipped (mask is fine)"),
        CorrectiveItem.State.FAILED: _("its model update failed (%(error)s)") % {"error": item.error},
    }
    raise CorrectiveRefused(
        _("item %(item)s takes no clicks: %(reason)s.") % {"item": item.pk, "reason": reasons[item.state]}
    )


def _round_clicks(item: CorrectiveItem, round_number: int):
    return CorrectiveClick.objects.filter(item=item, round=round_number)


def _finite(name: str, value) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise CorrectiveRefused(f"{name}={value!r} is not a number.", status=400) from None
    if not math.isfinite(number):
        raise CorrectiveRefused(f"{name}={value!r} is not a finite number.", status=400)
    return number


# --------------------------------------------------------------------------------------------------
# clicks


def corrective_click_record(
    *,
    session: Session,
    item_id,
    idempotency_key: str,
    x,
    y,
    is_positive: bool,
    pointer_type: str = "",
    item_ms=None,
) -> tuple[CorrectiveClick, bool]:
    """Store one click of the item's current round; returns (click, created). See the module docstring."""
    key = str(idempotency_key or "").strip()
    if not key or len(key) > MAX_KEY_LENGTH:
        raise CorrectiveRefused(
            f"idempotency_key must be 1-{MAX_KEY_LENGTH} characters; got {idempotency_key!r}.", status=400
        )
    existing = CorrectiveClick.objects.filter(idempotency_key=key).select_related("item").first()
    if existing is not None:
        if existing.item.session_id != session.pk or str(existing.item_id) != str(item_id):
            raise CorrectiveRefused(
                "idempotency_key is already used by another item; send a new key.", status=409
            )
        return existing, False
    x, y = _finite("x", x), _finite("y", y)
    ms = None if item_ms is None else _finite("item_ms", item_ms)
    if not isinstance(is_positive, bool):
        raise CorrectiveRefused(f"positive={is_positive!r} must be true or false.", status=400)
    if pointer_type not in POINTER_TYPES:
        raise CorrectiveRefused(
            f"pointer_type={pointer_type!r} must be one of mouse, touch, pen.", status=400
        )
    with transaction.atomic():
        item = _locked_item(session=session, item_id=item_id)
        _require_clicking(item)
        image = item.trial.target.instance.image
        if not (0 <= x < image.width and 0 <= y < image.height):
            raise CorrectiveRefused(
                f"click ({x:.1f}, {y:.1f}) is outside the image ({image.width}x{image.height} px); "
                "click on the picture.",
                status=400,
            )
        budget = round_budget(study=item.session.study, round_number=item.round)
        placed = _round_clicks(item, item.round).filter(undone=False).count()
        if placed >= budget:
            raise CorrectiveRefused(
                _(
                    "round %(round)s of item %(item)s already has its %(budget)s click(s); undo one or submit the round."
                )
                % {"round": item.round, "item": item.pk, "budget": budget}
            )
        if item.round == 0 and not is_positive:
            raise CorrectiveRefused("the first click must be positive: click on the object.", status=400)
        order = _round_clicks(item, item.round).count()
        try:
            with transaction.atomic():
                click = CorrectiveClick.objects.create(
                    item=item,
                    round=item.round,
                    order=order,
                    idempotency_key=key,
                    x=x,
                    y=y,
                    is_positive=is_positive,
                    pointer_type=pointer_type,
                    item_ms=ms,
                )
        except IntegrityError:
            winner = CorrectiveClick.objects.filter(idempotency_key=key).first()
            if winner is not None and winner.item_id == item.pk:
                return winner, False
            raise CorrectiveRefused(
                "idempotency_key is already used by another item; send a new key."
            ) from None
        if item.shown_at is None:
            item.shown_at = timezone.now()
            item.save(update_fields=["shown_at"])
    return click, True


def corrective_click_undo(*, session: Session, item_id, idempotency_key: str) -> CorrectiveClick:
    """Flag the click with ``idempotency_key`` undone; it must be the latest live click of the current
    round (undoing it again is a no-op)."""
    with transaction.atomic():
        item = _locked_item(session=session, item_id=item_id)
        click = CorrectiveClick.objects.filter(item=item, idempotency_key=str(idempotency_key)).first()
        if click is None:
            raise CorrectiveRefused(f"item {item.pk} has no click with key {idempotency_key!r}.", status=404)
        if click.undone:
            return click
        _require_clicking(item)
        latest = _round_clicks(item, item.round).filter(undone=False).order_by("-order").first()
        if latest is None or latest.pk != click.pk:
            raise CorrectiveRefused(_("only the latest click of the current round can be undone."))
        click.undone = True
        click.save(update_fields=["undone"])
    return click


def _record_time(item: CorrectiveItem, *, round_ms) -> list[str]:
    if round_ms is None:
        return []
    ms = _finite("round_ms", round_ms)
    if ms < 0 or ms > 24 * 3600 * 1000:
        raise CorrectiveRefused(f"round_ms={ms} must be between 0 and 24 h.", status=400)
    per_round = dict(item.round_ms or {})
    per_round[str(item.round)] = ms
    item.round_ms = per_round
    item.active_ms = float(sum(per_round.values()))
    return ["round_ms", "active_ms"]


# --------------------------------------------------------------------------------------------------
# rounds


def corrective_round_submit(
    *, session: Session, item_id, round_number, round_ms=None, finish: bool = False, send: bool = True
) -> CorrectiveItem:
    """End the item's current round (``round_number`` must be it: a repeated submit of a round already
    submitted returns the item unchanged) and queue the model update (``send=False``: the caller applies it).
    A round without clicks is refused (use skip or done)."""
    with transaction.atomic():
        item = _locked_item(session=session, item_id=item_id)
        try:
            round_number = int(round_number)
        except (TypeError, ValueError):
            raise CorrectiveRefused(f"round={round_number!r} is not a round number.", status=400) from None
        if round_number < item.round or (
            round_number == item.round and item.state == CorrectiveItem.State.UPDATING
        ):
            return item  # already submitted (a retried request)
        if round_number != item.round:
            raise CorrectiveRefused(
                _("item %(item)s is in round %(round)s, not %(sent)s.")
                % {"item": item.pk, "round": item.round, "sent": round_number}
            )
        _require_clicking(item)
        if not _round_clicks(item, item.round).filter(undone=False).exists():
            raise CorrectiveRefused(
                _("round %(round)s of item %(item)s has no clicks; click first, or press skip / done.")
                % {"round": item.round, "item": item.pk}
            )
        fields = _record_time(item, round_ms=round_ms)
        item.state = CorrectiveItem.State.UPDATING
        item.finish_after_update = bool(finish) or item.round >= item.session.study.corrective_rounds
        item.save(update_fields=[*fields, "state", "finish_after_update"])
        if send:
            _send_update_on_commit(item_id=item.pk, round_number=item.round)
    return item


def corrective_item_skip(*, session: Session, item_id, round_ms=None) -> CorrectiveItem:
    """ "Skip / mask is fine": the item ends with its current mask. Repeating it is a no-op."""
    return _item_end(session=session, item_id=item_id, state=CorrectiveItem.State.SKIPPED, round_ms=round_ms)


def corrective_item_done(*, session: Session, item_id, round_ms=None) -> CorrectiveItem:
    """ "Done": with live clicks in the current round they are applied first (the item ends after that
    update), else the item ends now with its current mask."""
    with transaction.atomic():
        item = _locked_item(session=session, item_id=item_id)
        if (
            item.state == CorrectiveItem.State.CLICKING
            and item.round > 0
            and _round_clicks(item, item.round).filter(undone=False).exists()
        ):
            return corrective_round_submit(
                session=session, item_id=item.pk, round_number=item.round, round_ms=round_ms, finish=True
            )
    return _item_end(session=session, item_id=item_id, state=CorrectiveItem.State.DONE, round_ms=round_ms)


def _item_end(*, session: Session, item_id, state: str, round_ms) -> CorrectiveItem:
    with transaction.atomic():
        item = _locked_item(session=session, item_id=item_id)
        if item.state == state:
            return item
        if item.state == CorrectiveItem.State.UPDATING and item.finish_after_update:
            return item  # done already pressed; ends when the update is stored
        _require_clicking(item)
        if item.current_mask_id is None:
            raise CorrectiveRefused(
                _("item %(item)s has no mask yet: place the first click on the object before skipping.")
                % {"item": item.pk}
            )
        fields = _record_time(item, round_ms=round_ms)
        item.state = state
        item.finished_at = timezone.now()
        item.save(update_fields=[*fields, "state", "finished_at"])
    return item


# --------------------------------------------------------------------------------------------------
# model updates (tasks/corrective.py, models queue)


@dataclass(frozen=True)
class UpdateResult:
    item_id: int
    round: int
    stored: bool  # False: the item was no longer waiting for this update (a redelivery)
    mask_id: int | None
    iou: float | None


def _segmenter_key(study: Study) -> str:
    from collector.selectors.segmenters import study_segmenter_keys

    keys = study_segmenter_keys(study=study)
    if not keys:
        raise CorrectiveUpdateError(
            "no segmenter configured: set the study's segmenter or NEXT_ROUND_SEGMENTERS."
        )
    return keys[0]


_PREDICTORS: dict[str, object] = {}


def corrective_predictor(study: Study):
    """The study's segmenter (one per worker process and key; ``embedded`` unless configured)."""
    from segmenters.base import SegmenterError
    from segmenters.checkpoints import segmenter_choice
    from segmenters.registry import get_predictor

    key = _segmenter_key(study)
    if key not in _PREDICTORS:
        try:
            choice = segmenter_choice(key, settings.SEGMENTER_CHECKPOINTS)
            _PREDICTORS[key] = get_predictor(
                choice.predictor, **choice.options(checkpoint_dir=str(settings.SEGMENTER_CHECKPOINT_DIR))
            )
        except SegmenterError as error:
            raise CorrectiveUpdateError(f"segmenter {key!r} cannot run: {error}") from None
    return _PREDICTORS[key]


def box_initial_mask(image: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray:
    """GrabCut initialised with the object's box (x0, y0, x1, y1 inclusive, canonical pixels): the seed's
    box start. Runs at a working resolution (long side at most ``BOX_WORK_LONG_SIDE_PX``; GrabCut's time grows
    with the pixel count: about 2 s at 481x321 on a busy 2-core machine, a minute at 1600x1200) and returns a
    bool (H, W) mask at the image's size."""
    height, width = image.shape[:2]
    scale = min(1.0, BOX_WORK_LONG_SIDE_PX / max(height, width))
    small = (
        image
        if scale == 1.0
        else cv2.resize(
            image, (max(1, round(width * scale)), max(1, round(height * scale))), interpolation=cv2.INTER_AREA
        )
    )
    sh, sw = small.shape[:2]
    x0, y0, x1, y1 = (int(v * scale) for v in box)
    x0, y0 = max(0, x0 - 1), max(0, y0 - 1)
    x1, y1 = min(sw - 1, x1 + 1), min(sh - 1, y1 + 1)
    if x1 - x0 < 2 or y1 - y0 < 2 or (x0 == 0 and y0 == 0 and x1 == sw - 1 and y1 == sh - 1):
        mask = np.zeros((height, width), dtype=bool)
        bx0, by0, bx1, by1 = box
        mask[by0 : by1 + 1, bx0 : bx1 + 1] = True
        return mask
    labels = np.zeros((sh, sw), dtype=np.uint8)
    bgd, fgd = np.zeros((1, 65), np.float64), np.zeros((1, 65), np.float64)
    cv2.grabCut(
        cv2.cvtColor(small, cv2.COLOR_RGB2BGR),
        labels,
        (x0, y0, x1 - x0 + 1, y1 - y0 + 1),
        bgd,
        fgd,
        BOX_GRABCUT_ITERATIONS,
        cv2.GC_INIT_WITH_RECT,
    )
    foreground = ((labels == cv2.GC_FGD) | (labels == cv2.GC_PR_FGD)).astype(np.uint8) * 255
    if scale != 1.0:
        foreground = cv2.resize(foreground, (width, height), interpolation=cv2.INTER_LINEAR)
    return foreground > 127


def _mask_png(mask: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    PILImage.fromarray(np.where(mask, 255, 0).astype(np.uint8), mode="L").save(buffer, format="PNG")
    return buffer.getvalue()


def _box_anchor_click(item: CorrectiveItem):
    """For a box start: a positive click at the deepest pixel of the box mask, given to the model before the
    worker's clicks. Click models read "a positive click = this object" and keep only the parts holding one, so
    without it a first correction on a missed part would drop the object the box already found."""
    from segmenters.base import Click as SegClick

    start = CorrectiveMask.objects.filter(item=item, round=0, predictor=BOX_PREDICTOR).first()
    if start is None:
        return None
    mask = read_mask(start.file.name)
    if not mask.any():
        return None
    depth = cv2.distanceTransform(np.pad(mask.astype(np.uint8), 1), cv2.DIST_L2, cv2.DIST_MASK_PRECISE)[
        1:-1, 1:-1
    ]
    y, x = divmod(int(np.argmax(depth)), depth.shape[1])
    return SegClick(x=x + 0.5, y=y + 0.5, is_positive=True)


def corrective_update_apply(*, item_id: int, round_number: int) -> UpdateResult:
    """Make and store the mask after ``round_number`` of the item (see the module docstring)."""
    from segmenters.base import Click as SegClick
    from segmenters.base import SegmenterError
    from segmenters.provenance import predictor_provenance

    item = CorrectiveItem.objects.select_related(
        "session__study", "trial__target__instance__image", "current_mask"
    ).get(pk=item_id)
    if item.state != CorrectiveItem.State.UPDATING or item.round != round_number:
        return UpdateResult(item.pk, round_number, False, item.current_mask_id, None)
    study = item.session.study
    instance = item.trial.target.instance
    started = time.perf_counter()
    try:
        image = read_image(instance.image)
        gt, ignore = instance_masks(instance)
    except MaskFileError as error:
        raise CorrectiveUpdateError(str(error)) from None
    clicks = list(CorrectiveClick.objects.filter(item=item, undone=False, round__lte=round_number))
    # GrabCut (the box start and the embedded segmenter) draws from OpenCV's per-thread RNG: seeded from the
    # instance and round, an update gives the same mask for the same input whatever ran before it.
    cv2.setRNGSeed(zlib.crc32(f"{instance.first_round_full_stem}:{round_number}".encode()) & 0x7FFFFFFF)
    if round_number == 0 and not clicks:
        box = (instance.bbox_x0, instance.bbox_y0, instance.bbox_x1, instance.bbox_y1)
        mask = box_initial_mask(image, box)
        provenance = {"predictor": BOX_PREDICTOR, "model_id": f"opencv-grabcut-rect:{cv2.__version__}"}
        provenance.update(model_variant="", checkpoint_sha256="")
    else:
        predictor = corrective_predictor(study)
        previous = read_mask(item.current_mask.file.name) if item.current_mask_id else None
        seg_clicks = [SegClick(x=c.x, y=c.y, is_positive=c.is_positive) for c in clicks]
        new_clicks = sum(1 for c in clicks if c.round == round_number)
        anchor = _box_anchor_click(item) if predictor.needs_anchor_click else None
        if anchor is not None:
            seg_clicks = [anchor, *seg_clicks]
        try:
            # Seed 001's Mb+c: the image, the mask the worker corrected (as the model's own prior input) and
            # every click so far; how a model takes them is its own (segmenters.base.Predictor.correct).
            prediction = predictor.correct(
                predictor.encode(image), seg_clicks, new_clicks=new_clicks, previous_mask=previous
            )
        except SegmenterError as error:
            raise CorrectiveUpdateError(f"segmenter {predictor.name} failed: {error}") from None
        mask = np.asarray(predictor.predict_mask(prediction), dtype=bool)
        record = predictor_provenance(predictor)
        provenance = {
            "predictor": record.predictor,
            "model_id": record.model_id,
            "model_variant": record.variant,
            "checkpoint_sha256": record.checkpoint_sha256,
        }
    compute_ms = (time.perf_counter() - started) * 1000.0
    png = _mask_png(mask)
    digest = hashlib.sha256(png).hexdigest()[:16]
    # A unique name per attempt: a redelivered update never overwrites the file a stored row points to.
    name = default_storage.save(
        f"{MASKS_DIR}/{study.pk}/{item.session_id}/{item.pk}_r{round_number}_{digest}_{uuid.uuid4().hex[:8]}.png",
        ContentFile(png),
    )
    overlap = float(iou(mask, gt, ignore))
    with transaction.atomic():
        locked = (
            CorrectiveItem.objects.select_for_update(no_key=True)
            .select_related("session__study")
            .get(pk=item_id)
        )
        if locked.state != CorrectiveItem.State.UPDATING or locked.round != round_number:
            transaction.on_commit(lambda: default_storage.delete(name))
            return UpdateResult(item.pk, round_number, False, locked.current_mask_id, None)
        stored = CorrectiveMask.objects.create(
            item=locked,
            round=round_number,
            file=name,
            iou=overlap,
            area=int(mask.sum()),
            clicks_used=len(clicks),
            compute_ms=compute_ms,
            **provenance,
        )
        locked.current_mask = stored
        locked.error = ""
        if locked.finish_after_update or round_number >= study.corrective_rounds:
            locked.state = CorrectiveItem.State.DONE
            locked.finished_at = timezone.now()
        else:
            locked.state = CorrectiveItem.State.CLICKING
            locked.round = round_number + 1
        locked.save(update_fields=["current_mask", "error", "state", "finished_at", "round"])
    logger.info(
        "corrective mask stored",
        extra={
            "item_id": item_id,
            "round": round_number,
            "iou": round(overlap, 4),
            "ms": round(compute_ms, 1),
        },
    )
    return UpdateResult(item.pk, round_number, True, stored.pk, overlap)


def corrective_update_fail(*, item_id: int, round_number: int, reason: str) -> bool:
    """Mark the item failed with ``reason`` (shown to the researcher) if it still waits for this update;
    its previous mask stays. Returns whether it was marked."""
    with transaction.atomic():
        item = CorrectiveItem.objects.select_for_update(no_key=True).get(pk=item_id)
        if item.state != CorrectiveItem.State.UPDATING or item.round != round_number:
            return False
        item.state = CorrectiveItem.State.FAILED
        item.error = reason[:2000]
        item.finished_at = timezone.now()
        item.save(update_fields=["state", "error", "finished_at"])
    logger.warning(
        "corrective update failed", extra={"item_id": item_id, "round": round_number, "reason": reason}
    )
    return True


def corrective_update_attempt(*, item_id: int) -> None:
    CorrectiveItem.objects.filter(pk=item_id).update(update_attempts=F("update_attempts") + 1)


# --------------------------------------------------------------------------------------------------
# finish


def corrective_session_finish(*, session_id: int) -> Session:
    """Finish a corrective session once every item is done, skipped or failed (idempotent)."""
    with transaction.atomic():
        session = Session.objects.select_for_update(no_key=True).select_related("study").get(pk=session_id)
        _study_is_corrective(session.study)
        if session.status == Session.Status.FINISHED:
            return session
        if session.status != Session.Status.STARTED:
            raise CorrectiveRefused(
                _("session %(session)s is %(status)s; it takes no more work.")
                % {"session": session.pk, "status": session.status},
                reason="session_closed",
            )
        open_items = list(
            session.corrective_items.exclude(
                state__in=[
                    CorrectiveItem.State.DONE,
                    CorrectiveItem.State.SKIPPED,
                    CorrectiveItem.State.FAILED,
                ]
            ).values_list("position", flat=True)
        )
        if open_items or not session.corrective_items.exists():
            raise CorrectiveRefused(
                f"session {session.pk} still has unfinished item(s) at position(s) "
                f"{', '.join(map(str, open_items)) or 'all'}; finish or skip each one first.",
                reason="items_unfinished",
            )
        if session.is_qualification:
            return _qualification_finish(session)
        from collector.services.allocation import inflight_release

        # Validations and starts of the round take turns on the round row (docs/architecture.md).
        type(session.round).objects.select_for_update(no_key=True).filter(pk=session.round_id).first()
        holding = session.trials.filter(holds_slot=True)  # each slot given back once (Trial.holds_slot)
        target_ids = list(holding.order_by("target_id").values_list("target_id", flat=True))
        inflight_release(target_ids=target_ids, device=session.device)
        holding.update(holds_slot=False)
        finished_ids = list(
            session.corrective_items.filter(
                state__in=[CorrectiveItem.State.DONE, CorrectiveItem.State.SKIPPED]
            ).values_list("trial__target_id", flat=True)
        )
        valid_field = f"valid_{session.device}"
        Target.objects.filter(pk__in=finished_ids).update(**{valid_field: F(valid_field) + 1})
        now = timezone.now()
        session.status = Session.Status.FINISHED
        session.finished_at = now
        session.validated_at = now
        session.validity = Session.Validity.COUNTED
        session.valid_clicks = min(len(finished_ids), 32767)
        session.completion_code = completion_code_make(
            session_id=session.pk, assignment_id=session.platform_assignment_id
        )
        session.save(
            update_fields=[
                "status",
                "finished_at",
                "validated_at",
                "validity",
                "valid_clicks",
                "completion_code",
            ]
        )
    logger.info("corrective session finished", extra={"session_id": session.pk, "study_id": session.study_id})
    return session


def _qualification_finish(session: Session) -> Session:
    """Close a qualification test (session row locked, every item finished): no quota was taken, so none is
    released or counted; the result is scored and stored (``collector.services.qualification``). No
    completion code: a passed worker goes on to a real session, which ends with one."""
    from collector.services.qualification import qualification_record

    result = qualification_record(session=session)
    now = timezone.now()
    session.status = Session.Status.FINISHED
    session.finished_at = now
    session.validated_at = now
    session.validity = Session.Validity.COUNTED if result.passed else Session.Validity.REJECTED
    session.rejection_reason = (
        "" if result.passed else f"qualification test failed: {result.details.get('reason', '')}"
    )
    session.valid_clicks = 0
    session.save(
        update_fields=[
            "status",
            "finished_at",
            "validated_at",
            "validity",
            "rejection_reason",
            "valid_clicks",
        ]
    )
    logger.info(
        "qualification session finished",
        extra={"session_id": session.pk, "study_id": session.study_id, "passed": result.passed},
    )
    return session
