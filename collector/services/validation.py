"""Validating a finished session: per-click validity, the 7-of-10 rule, quality flags, quota counters.

The rule (rclicks-protocol §2, issue 4): a click is valid if its pixel lies in the target region (the
instance mask for ``first`` targets, the error mask for ``fn``/``fp``), or no farther than
``r = study.radius_fraction * image diagonal`` from it; a distance exactly equal to ``r`` counts. The
ignore band (GrabCut/Berkeley value 128) is never region: a click there is judged by its distance to the
region proper. Coordinates are canonical image pixels (x = column, y = row, origin top-left); a click at
(x, y) sits on pixel (floor(y), floor(x)) and its distance is the Euclidean distance between pixel indices
to the nearest region pixel, i.e. the value of the Euclidean distance transform of the non-region at that
pixel. A click outside the image, or in a trial the player flagged (tab hidden, focus lost, viewport
changed), is invalid whatever its distance.

A session counts when it has at least ``required_valid_clicks`` valid clicks (``min_valid_per_session``,
whatever the batch's length: never counted below the rule) and, when the study has control trials, at least
``control_min_inside`` of its control clicks (at most as many as it has) lie inside their object (distance 0:
the radius does not help a control click). Practice and control trials (``Trial.role``) are judged and stored
like any click but are never data: they take no part in the batch rule and add nothing to a quota. Only
valid clicks of counted sessions' task trials add to ``valid_<device>`` (whichever the batch rule: with
``batch_rule`` ``inside``, the RClicks paper's wording, the rule counts clicks inside the target region itself,
distance 0, but a click's validity does not change with it; a simulated annotator's session, ``Session.is_bot``,
adds nothing); every task trial still holding its
in-flight slot gives it back (``Trial.holds_slot``: a release or expiry may have given it back already). The whole validation of a session is one transaction guarded by
``validated_at IS NULL`` under ``SELECT ... FOR UPDATE``, so a redelivered task (worker killed mid-run)
either finds nothing done and does everything, or finds it done and does nothing.
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass
from datetime import timedelta
from threading import Lock

import cachetools
import numpy as np
from django.core.files.storage import default_storage
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone
from PIL import Image as PILImage

from collector.models import Click, Round, Session, Target, Trial
from collector.models.studies import BatchRule
from collector.services.allocation import inflight_release
from collector.services.prepared import column, prepared_cursor
from collector.services.quality import session_quality_flags
from collector.services.rounds import round_close_if_full
from config.celery import app as celery_app
from tasks import names as task_names

logger = logging.getLogger(__name__)
#: The trials the batch rule counts: task trials and the filler trials that fill a round's tail batch up.
RULED_ROLES = (Trial.Role.TASK, Trial.Role.FILLER)


class ValidationError(RuntimeError):
    """A file the validation needs is missing or unreadable; the message names it and what to do."""


# --------------------------------------------------------------------------------------------------
# geometry (pure numpy)


def region_distance_px(*, region: np.ndarray, row: int, col: int) -> float:
    """Euclidean distance (px) from pixel (row, col) to the nearest True pixel of ``region``.

    ``region``: bool (H, W). (row, col) may lie outside the image. Returns 0.0 inside the region and
    ``inf`` for an empty region. Equal to ``scipy.ndimage.distance_transform_edt(~region)[row, col]`` for
    pixels inside the image, but computed in a window around the click that grows until the nearest
    region pixel found is provably the global nearest (any pixel outside a window of half-size R is more
    than R away), so a valid click costs a few hundred pixels instead of a whole-image transform.
    """
    height, width = region.shape
    if 0 <= row < height and 0 <= col < width and region[row, col]:
        return 0.0
    # Distance from the click to the image's bounding box: the window must reach the image at least.
    gap = max(0, -row, row - height + 1, -col, col - width + 1)
    half = max(8, gap + 8)
    limit = max(height, width) + gap + 1
    while True:
        r0, r1 = max(0, row - half), min(height, row + half + 1)
        c0, c1 = max(0, col - half), min(width, col + half + 1)
        rows, cols = np.nonzero(region[r0:r1, c0:c1]) if r0 < r1 and c0 < c1 else ((), ())
        if len(rows):
            best = float(np.sqrt(np.min((rows + r0 - row) ** 2 + (cols + c0 - col) ** 2)))
            if best <= half or half >= limit:
                return best
        elif half >= limit:
            return math.inf
        half *= 2


@dataclass(frozen=True)
class ClickVerdict:
    """What the validation decides for one click (``distance_px`` None only when there is no click)."""

    is_valid: bool
    distance_px: float | None
    invalid_reason: str


def click_verdict(
    *,
    x: float,
    y: float,
    region: np.ndarray,
    ignore: np.ndarray | None,
    radius_px: float,
    trial_flagged: bool = False,
) -> ClickVerdict:
    """Judge one click at canonical (x, y) px against ``region`` (bool HxW) with radius ``radius_px``.

    ``ignore``: bool HxW ignore band or None. Reasons, first match wins: ``outside_image``,
    ``trial_flagged``, then (if farther than the radius) ``ignore_band`` when the pixel is in the band,
    else ``outside_region``.
    """
    height, width = region.shape
    col, row = math.floor(x), math.floor(y)
    distance = region_distance_px(region=region, row=row, col=col)
    inside_image = 0 <= x < width and 0 <= y < height
    if not inside_image:
        return ClickVerdict(False, distance, Click.InvalidReason.OUTSIDE_IMAGE)
    if trial_flagged:
        return ClickVerdict(False, distance, Click.InvalidReason.TRIAL_FLAGGED)
    if distance <= radius_px:
        return ClickVerdict(True, distance, Click.InvalidReason.NONE)
    if ignore is not None and ignore[row, col]:
        return ClickVerdict(False, distance, Click.InvalidReason.IGNORE_BAND)
    return ClickVerdict(False, distance, Click.InvalidReason.OUTSIDE_REGION)


def required_valid_clicks(*, min_valid_per_session: int, batch_size: int, n_trials: int) -> int:
    """Valid clicks a session needs: ``min_valid_per_session``, whatever its length (issue 32 item 2: a batch
    is never counted below the rule; a 2-trial batch of a study that needs 7 valid clicks is not counted).
    ``batch_size`` and ``n_trials`` are kept for the callers that show the rule; a shorter batch is offered
    only when it can still meet the rule (``Study.short_batches``, ``collector.services.allocation``)."""
    return min_valid_per_session


def batch_rule_problems(*, rule: str, valid: int, inside: int, trials: int, required: int) -> list[str]:
    """Why a batch of ``trials`` task trials fails the study's batch rule (``[]``: it passes). ``valid``: its
    valid clicks; ``inside``: those inside the target region itself (distance 0). Rule ``valid`` counts the
    valid ones, ``inside`` (the RClicks paper's "within the object mask") the inside ones."""
    if rule == BatchRule.INSIDE:
        if inside < required:
            return [
                f"{inside} of {trials} clicks were inside the object (batch rule “inside”); the study needs at "
                f"least {required}."
            ]
        return []
    if valid < required:
        return [f"{valid} of {trials} clicks were valid; the study needs at least {required}."]
    return []


# --------------------------------------------------------------------------------------------------
# masks


class _MaskCache:
    """Decoded masks by storage name, most recently used kept (cachetools' LRU cache charged by pixels). Mask
    files are written once (import, round build) and never rewritten under the same name. Memory: one bool
    byte per pixel per entry; a mask larger than the whole budget is returned but not kept."""

    def __init__(self, max_pixels: int = 64 * 1024 * 1024):
        self.max_pixels = max_pixels
        self._items: cachetools.LRUCache = cachetools.LRUCache(maxsize=max_pixels, getsizeof=lambda m: m.size)
        self._lock = Lock()  # cachetools' caches are not thread-safe

    def get(self, name: str) -> np.ndarray:
        with self._lock:
            cached = self._items.get(name)  # a hit becomes the most recently used
        if cached is not None:
            return cached
        mask = _read_mask(name)
        if mask.size <= self.max_pixels:
            with self._lock:
                self._items.setdefault(name, mask)
        return mask


def _read_mask(name: str) -> np.ndarray:
    try:
        with default_storage.open(name, "rb") as handle:
            picture = PILImage.open(handle)
            picture.load()
    except FileNotFoundError:
        raise ValidationError(
            f"mask file {name!r} is missing from the media storage; re-import the dataset or rebuild the round."
        ) from None
    array = np.asarray(picture.convert("L"))
    return array > 127


mask_cache = _MaskCache()


def _target_region(target: Target) -> tuple[np.ndarray, np.ndarray | None]:
    """(region, ignore) bool arrays at the image's canonical size for one target."""
    instance = target.instance
    image = instance.image
    ignore = mask_cache.get(instance.ignore_file.name) if instance.ignore_file else None
    if target.click_type == Target.ClickType.FIRST:
        region = mask_cache.get(instance.mask_file.name)
    elif target.error_mask_file:
        region = mask_cache.get(target.error_mask_file.name)
    elif target.previous_mask_file:
        # E = M & ~P (fn) or ~M & P (fp), rclicks-protocol §1.2, when the build stored only P.
        object_mask = mask_cache.get(instance.mask_file.name)
        previous = mask_cache.get(target.previous_mask_file.name)
        if previous.shape != object_mask.shape:
            raise ValidationError(
                f"previous mask {target.previous_mask_file.name!r} of target {target.pk} is "
                f"{previous.shape[1]}x{previous.shape[0]}, not the image's {image.width}x{image.height}; "
                "rebuild the round."
            )
        region = (
            object_mask & ~previous if target.click_type == Target.ClickType.FN else ~object_mask & previous
        )
    else:
        raise ValidationError(
            f"target {target.pk} ({target.full_stem}) is a {target.click_type} target with neither an error "
            "mask nor a previous mask file; rebuild the round that created it."
        )
    if region.shape != (image.height, image.width):
        raise ValidationError(
            f"mask of target {target.pk} ({target.full_stem}) is {region.shape[1]}x{region.shape[0]} but image "
            f"{image} is {image.width}x{image.height}; re-import the dataset."
        )
    if ignore is not None:
        region = region & ~ignore
    return region, ignore


def target_region(*, target: Target) -> tuple[np.ndarray, np.ndarray | None]:
    """(region, ignore band) bool (H, W) arrays a click on ``target`` is judged against; ignore is None
    when the instance has no band. The researcher's preview asks this to say whether a click would count.
    Raises ValidationError when a mask file is missing or has the wrong size."""
    return _target_region(target)


# --------------------------------------------------------------------------------------------------
# the service


def _verdicts_store(clicks: list[Click]) -> None:
    """Write each click's ``is_valid``, ``distance_px`` and ``invalid_reason``. PostgreSQL: one prepared UPDATE
    from arrays (``bulk_update`` built a CASE per field and click, about a third of a validation's CPU);
    SQLite: ``bulk_update``."""
    if connection.vendor != "postgresql":
        Click.objects.bulk_update(clicks, ["is_valid", "distance_px", "invalid_reason"])
        return
    if not clicks:
        return
    params = {
        "ids": [click.pk for click in clicks],
        "valid": [click.is_valid for click in clicks],
        "distance": [click.distance_px for click in clicks],
        "reason": [click.invalid_reason for click in clicks],
    }
    with prepared_cursor() as cursor:
        cursor.execute(_verdicts_sql(), params)


@functools.cache
def _verdicts_sql() -> str:
    quote, meta = connection.ops.quote_name, Click._meta

    return (
        f"UPDATE {quote(meta.db_table)} AS c SET {column(meta, 'is_valid')} = v.valid, "
        f"{column(meta, 'distance_px')} = v.distance, {column(meta, 'invalid_reason')} = v.reason "
        f"FROM unnest(CAST(%(ids)s AS bigint[]), CAST(%(valid)s AS boolean[]), "
        f"CAST(%(distance)s AS double precision[]), CAST(%(reason)s AS text[])) AS v (id, valid, distance, reason) "
        f"WHERE c.{column(meta, 'id')} = v.id"
    )


def session_validate(*, session_id: int) -> Session | None:
    """Validate the finished session ``session_id`` exactly once; returns it, or None if it is gone.

    One transaction: lock the session (``validated_at IS NULL`` guard), judge every click, store
    ``is_valid``/``distance_px``/``invalid_reason``, set ``validity``/``valid_clicks``/``quality_flags``/
    ``validated_at``, release the in-flight slots, add the valid clicks of a counted session to
    ``valid_<device>``, and close the round when every target meets both quotas (which enqueues the next
    round's build after commit). A session already validated, or not finished (still running or expired),
    is returned unchanged.

    Raises ValidationError when a mask file is missing (nothing is written; the task retries).
    """
    with transaction.atomic():
        session = (
            Session.objects.select_for_update(no_key=True, of=("self",))
            .select_related("study")
            .filter(pk=session_id)
            .first()
        )
        if session is None:
            logger.warning("validation of a missing session", extra={"session_id": session_id})
            return None
        if session.validated_at is not None or session.status != Session.Status.FINISHED:
            return session
        study = session.study
        trials = list(
            Trial.objects.filter(session=session)
            .select_related("target__instance__image", "click")
            .order_by("position")
        )
        clicks: list[Click] = []
        valid_target_ids: list[int] = []
        control_inside = 0
        valid_fillers = 0  # valid clicks of filler trials: they count for the batch rule, never for a quota
        inside = 0  # valid task clicks inside the target region itself (the ``inside`` batch rule)
        for trial in trials:
            click = getattr(trial, "click", None)
            if click is None:
                continue
            region, ignore = _target_region(trial.target)
            verdict = click_verdict(
                x=click.x,
                y=click.y,
                region=region,
                ignore=ignore,
                radius_px=study.radius_fraction * trial.target.instance.image.diagonal_px,
                # A click on a trial whose slot a release gave back (a race with the click path, which refuses
                # released trials) is stored but is no quota data: the target may be taken by another batch.
                trial_flagged=bool(trial.flags) or (trial.role == Trial.Role.TASK and not trial.holds_slot),
            )
            click.is_valid = verdict.is_valid
            distance_px = verdict.distance_px
            click.distance_px = None if distance_px is None or math.isinf(distance_px) else distance_px
            click.invalid_reason = verdict.invalid_reason
            clicks.append(click)
            if trial.role == Trial.Role.CONTROL:
                control_inside += int(verdict.is_valid and click.distance_px == 0.0)
            elif verdict.is_valid and trial.role in RULED_ROLES:
                if trial.role == Trial.Role.TASK:
                    valid_target_ids.append(trial.target_id)
                else:
                    valid_fillers += 1
                inside += int(click.distance_px == 0.0)
        _verdicts_store(clicks)

        # Practice and control trials are never data: the batch rule sees the task and filler trials, the
        # quotas the task trials only.
        task_trials = [trial for trial in trials if trial.role == Trial.Role.TASK]
        ruled_trials = sum(1 for trial in trials if trial.role in RULED_ROLES)
        n_control = sum(1 for trial in trials if trial.role == Trial.Role.CONTROL)
        n_valid = len(valid_target_ids)
        required = required_valid_clicks(
            min_valid_per_session=study.min_valid_per_session,
            batch_size=study.batch_size,
            n_trials=ruled_trials,
        )
        reasons = batch_rule_problems(
            rule=study.batch_rule, valid=n_valid + valid_fillers, inside=inside, trials=ruled_trials,
            required=required,
        )  # fmt: skip
        session.control_inside = control_inside if n_control else None
        session.control_passed = None
        if n_control:
            control_required = min(study.control_min_inside, n_control)
            session.control_passed = control_inside >= control_required
            if not session.control_passed:
                reasons.append(
                    f"{control_inside} of {n_control} control clicks were inside their object; the study needs "
                    f"at least {control_required}."
                )
        counted = not reasons
        session.valid_clicks = n_valid + valid_fillers  # the batch's, as the worker was told the rule
        session.validity = Session.Validity.COUNTED if counted else Session.Validity.REJECTED
        session.rejection_reason = " ".join(reasons)
        session.quality_flags = session_quality_flags(session=session, trials=trials)
        session.validated_at = timezone.now()
        session.save(
            update_fields=[
                "valid_clicks",
                "validity",
                "rejection_reason",
                "quality_flags",
                "validated_at",
                "control_inside",
                "control_passed",
            ]
        )

        # Validations of one round take the round's lock before touching counters: target rows are then
        # always locked by one validation at a time (no deadlock between validations), and the fullness
        # check below sees every earlier validation's committed counters.
        Round.objects.select_for_update(no_key=True).filter(pk=session.round_id).first()
        # Only the trials still holding their slot: a release or an expiry gave the others back (exactly once).
        holding = [trial for trial in task_trials if trial.holds_slot]
        inflight_release(target_ids=[trial.target_id for trial in holding], device=session.device)
        if holding:
            Trial.objects.filter(pk__in=[trial.pk for trial in holding]).update(holds_slot=False)
        if counted and valid_target_ids and not session.is_bot:  # simulated annotators fill no quota
            field = f"valid_{session.device}"
            Target.objects.filter(pk__in=valid_target_ids).update(**{field: F(field) + 1})
        round_close_if_full(round_id=session.round_id)

    logger.info(
        "session validated",
        extra={
            "session_id": session.pk,
            "study_id": session.study_id,
            "validity": session.validity,
            "valid_clicks": n_valid,
            "trials": len(trials),
        },
    )
    return session


def validations_requeue(*, older_than_s: float = 300.0, limit: int = 1000) -> list[int]:
    """Send ``tasks.validation.validate_session`` again for finished sessions still unvalidated
    ``older_than_s`` seconds after they finished; returns their ids (at most ``limit``, oldest first).

    A safety net for lost messages (a broker without acknowledgements, like the embedded file-system
    transport, drops the message of a task whose worker was killed; Redis redelivers it only after its
    visibility timeout). Sending twice is harmless: validation is guarded by ``validated_at``.
    """
    cutoff = timezone.now() - timedelta(seconds=older_than_s)
    session_ids = list(
        Session.objects.filter(
            status=Session.Status.FINISHED, validated_at__isnull=True, finished_at__lte=cutoff
        )
        .order_by("finished_at")
        .values_list("pk", flat=True)[:limit]
    )
    for session_id in session_ids:
        celery_app.send_task(task_names.VALIDATION_VALIDATE_SESSION, args=[session_id])
    if session_ids:
        logger.warning("validations requeued", extra={"session_ids": session_ids})
    return session_ids


def session_platform_rejected(*, session_id: int, now=None) -> dict | None:
    """A batch counted here whose platform assignment was rejected (a wrong or reused completion code, the
    researcher's review): apply the study's ``rejected_work`` policy once and record it in
    ``session.platform_state["rejected"]`` (``{"at", "policy", "released"}``). ``release`` (the default): its
    valid task clicks stop counting (``valid_<device>`` - 1 each, so the targets' quotas reopen while the round
    is open; a round already closed stays closed, its next round built); ``count``: kept. Returns the record,
    or None when the session is not a counted one (nothing to do). Idempotent (the record is the guard; the
    session row is locked)."""
    now = now or timezone.now()
    with transaction.atomic():
        session = (
            Session.objects.select_for_update(no_key=True, of=("self",))
            .select_related("study")
            .filter(pk=session_id)
            .first()
        )
        if session is None or session.validity != Session.Validity.COUNTED:
            return None
        state = dict(session.platform_state or {})
        if "rejected" in state:
            return state["rejected"]
        policy = session.study.rejected_work
        released = 0
        if policy == "release":
            target_ids = list(
                Trial.objects.filter(session=session, role=Trial.Role.TASK, click__is_valid=True)
                .order_by("target_id")
                .values_list("target_id", flat=True)
            )
            # The round's turn first, as validations and starts take it before the counters (no lock cycle).
            Round.objects.select_for_update(no_key=True).filter(pk=session.round_id).first()
            list(
                Target.objects.select_for_update(no_key=True)
                .filter(pk__in=target_ids)
                .order_by("pk")
                .values_list("pk")
            )
            field = f"valid_{session.device}"
            released = Target.objects.filter(pk__in=target_ids, **{f"{field}__gt": 0}).update(
                **{field: F(field) - 1}
            )
        record = {"at": now.isoformat(), "policy": policy, "released": released}
        state["rejected"] = record
        session.platform_state = state
        session.save(update_fields=["platform_state"])
    logger.info(
        "rejected work applied",
        extra={
            "session_id": session_id,
            "study_id": session.study_id,
            "policy": policy,
            "released": released,
        },
    )
    return record
