"""The qualification test of corrective-click campaigns (issue 17 item 4, seed 001 §4).

With ``Study.qualification_enabled`` a worker's first session of a corrective study is a test: the same
player and the same model updates as the campaign, on ``Study.qualification_instances`` instances with
ground truth (every imported instance has its mask; the test takes the first ones by image and object name,
the same for every worker). The test session takes no quota (no in-flight slot, nothing counted) and is
left out of the study's progress; its items are left out of the campaign's outputs.

When the worker finishes it, ``qualification_score`` judges the clicks against the ground truth and one
:class:`~collector.models.CorrectiveQualification` row per (study, worker) keeps the result:

* **placement** (seed 001 §4's click-placement rules): a positive click must lie on a part of the object
  the mask the worker saw missed (false negative vs ground truth), a negative click on a part the mask
  covers wrongly (false positive), each within the study's click radius (``radius_fraction`` of the image
  diagonal, as the click validation of timed studies: ``validation.click_verdict``). The score is the share
  of live (not undone) clicks that obey. The mask a click of round r corrects is the item's mask of round
  r - 1 (the worker sees it all round); a first click (round 0 of a first-click start) corrects an empty
  mask, so it must be on the object.
* **gain per click**: IoU vs ground truth of each item's last mask minus that of its initial mask, summed
  over the items, divided by the clicks that made them. The masks are the ones the campaign's model update
  stored (``CorrectiveMask.iou``), so the test measures what the same clicks give in the campaign.

A worker passes with placement >= ``qualification_min_placement`` and gain per click >=
``qualification_min_gain``; a worker who clicked nowhere passes only when no accepted mask had an error region
of ``Study.min_error_area_px`` or more left (nothing worth a click). ``session_start`` then admits them to real tasks; a failed worker is refused
politely and cannot take the test again. The result goes to the platform: a Toloka skill (100 passed, 0
failed) set by ``tasks.platforms.qualification_send`` through the outbox; on Prolific, MTurk and links our
table is the allow-list the entry respects.
"""

from __future__ import annotations

import logging
import math

import numpy as np
from django.utils import timezone
from django.utils.translation import gettext as _

from collector.models import (
    CorrectiveClick,
    CorrectiveItem,
    CorrectiveMask,
    CorrectiveQualification,
    Round,
    Session,
    Study,
    Target,
    Worker,
)
from collector.models.studies import Platform
from collector.services.masks import instance_masks, read_mask
from collector.services.outbox import task_intent_add
from tasks import names as task_names

logger = logging.getLogger(__name__)

#: Toloka skill values of the qualification skill.
SKILL_PASSED = 100
SKILL_FAILED = 0


def qualification_required(study: Study) -> bool:
    return study.is_corrective and study.qualification_enabled


def qualification_result(*, study: Study, worker: Worker) -> CorrectiveQualification | None:
    return CorrectiveQualification.objects.filter(study=study, worker=worker).first()


def not_qualified_message() -> str:
    return _(
        "Thank you for taking the qualification test. Unfortunately your corrections did not meet this "
        "task's quality bar, so we cannot offer you its tasks. You do not need to do anything else."
    )


def qualification_targets(*, study: Study, round: Round) -> list[Target]:
    """The test's targets: the first ``qualification_instances`` targets of ``round`` by image and object
    name, one per image (the same for every worker, so results compare)."""
    chosen, images = [], set()
    rows = (
        Target.objects.filter(round=round)
        .select_related("instance__image")
        .order_by("instance__image__stem", "instance__object_stem", "pk")
    )
    for target in rows.iterator(chunk_size=200):
        if target.instance.image_id in images:
            continue
        images.add(target.instance.image_id)
        chosen.append(target)
        if len(chosen) >= study.qualification_instances:
            break
    return chosen


# --------------------------------------------------------------------------------------------------
# scoring


def _click_obeys(
    *, click: CorrectiveClick, seen: np.ndarray, gt: np.ndarray, ignore, radius_px: float
) -> tuple[bool, float]:
    """Whether ``click`` lies on (or within ``radius_px`` of) the error region of its sign: false negatives
    (``gt & ~seen``) for a positive click, false positives (``seen & ~gt``) for a negative one. The ignore
    band is never error region. Returns (obeys, distance_px)."""
    from collector.services.validation import click_verdict

    region = (gt & ~seen) if click.is_positive else (seen & ~gt)
    if ignore is not None:
        region = region & ~ignore
    verdict = click_verdict(x=click.x, y=click.y, region=region, ignore=ignore, radius_px=radius_px)
    distance = verdict.distance_px if verdict.distance_px is not None else math.inf
    return verdict.is_valid, distance


def _largest_error_px(*, item: CorrectiveItem, gt: np.ndarray, ignore) -> int:
    """Pixels of the largest connected error region (false negative or false positive, ignore band left
    out) of the item's current mask; the whole object when it has no mask."""
    import cv2

    mask = read_mask(item.current_mask.file.name) if item.current_mask_id else np.zeros_like(gt, dtype=bool)
    largest = 0
    for region in (gt & ~mask, mask & ~gt):
        if ignore is not None:
            region = region & ~ignore
        count, _labels, stats, _centres = cv2.connectedComponentsWithStats(
            region.astype(np.uint8), connectivity=8
        )
        if count > 1:
            largest = max(largest, int(stats[1:, cv2.CC_STAT_AREA].max()))
    return largest


def qualification_score(*, session: Session) -> dict:
    """Judge a finished-or-finishing test session against the ground truth (see the module docstring).

    Returns {passed, placement, gain_per_click, clicks, items: [...], thresholds: {...}, reason}; reads the
    stored masks and the instance masks (one image's masks in memory at a time)."""

    study = session.study
    items = list(
        CorrectiveItem.objects.filter(session=session)
        .select_related("trial__target__instance__image", "current_mask")
        .order_by("position")
    )
    total_clicks = obeying = 0
    gain_sum = 0.0
    gain_clicks = 0
    per_item = []
    for item in items:
        instance = item.trial.target.instance
        gt, ignore = instance_masks(instance)
        radius_px = study.radius_fraction * instance.image.diagonal_px
        masks = {m.round: m for m in CorrectiveMask.objects.filter(item=item)}
        clicks = list(CorrectiveClick.objects.filter(item=item, undone=False).order_by("round", "order"))
        # the mask shown while the worker clicked in round r: the stored mask of round r - 1 (none: empty)
        seen = {
            r: read_mask(masks[r - 1].file.name) if (r - 1) in masks else np.zeros_like(gt, dtype=bool)
            for r in sorted({c.round for c in clicks})
        }
        verdicts = []
        for click in clicks:
            ok, distance = _click_obeys(
                click=click, seen=seen[click.round], gt=gt, ignore=ignore, radius_px=radius_px
            )
            verdicts.append(
                {
                    "round": click.round,
                    "positive": click.is_positive,
                    "ok": ok,
                    "distance_px": None if math.isinf(distance) else round(distance, 1),
                }
            )
        placed_ok = sum(1 for v in verdicts if v["ok"])
        total_clicks += len(verdicts)
        obeying += placed_ok
        start = masks.get(0)
        end = item.current_mask
        iou_start = start.iou if start is not None else None
        iou_end = end.iou if end is not None else None
        # the clicks the gain is over: with a box start every click; with a first-click start the first click
        # made the initial mask, so the gain is over the correction clicks (round >= 1)
        correcting = [c for c in clicks if c.round >= 1]
        if iou_start is not None and iou_end is not None and correcting:
            gain_sum += iou_end - iou_start
            gain_clicks += len(correcting)
        # an item accepted without a click: was there an error worth a click left (seed 001: error regions
        # smaller than min_error_area_px are not)?
        left_px = _largest_error_px(item=item, gt=gt, ignore=ignore) if not clicks else None
        per_item.append(
            {
                "position": item.position,
                "largest_error_left_px": left_px,
                "instance": str(instance),
                "state": item.state,
                "clicks": len(verdicts),
                "placed_ok": placed_ok,
                "iou_start": None if iou_start is None else round(iou_start, 4),
                "iou_end": None if iou_end is None else round(iou_end, 4),
                "verdicts": verdicts,
            }
        )
    placement = obeying / total_clicks if total_clicks else None
    gain = gain_sum / gain_clicks if gain_clicks else None
    thresholds = {
        "min_placement": study.qualification_min_placement,
        "min_gain": study.qualification_min_gain,
    }
    if not total_clicks:
        missed = [i for i in per_item if (i["largest_error_left_px"] or 0) >= study.min_error_area_px]
        passed = not missed
        reason = (
            f"no clicks, but {len(missed)} mask(s) accepted with an error region of "
            f"{study.min_error_area_px} px or more"
            if missed
            else ""
        )
    elif placement < study.qualification_min_placement:
        passed = False
        reason = f"placement {placement:.2f} < {study.qualification_min_placement:.2f}"
    elif gain is not None and gain < study.qualification_min_gain:
        passed = False
        reason = f"gain per click {gain:+.3f} < {study.qualification_min_gain:+.3f}"
    else:
        passed, reason = True, ""
    return {
        "passed": passed,
        "placement": placement,
        "gain_per_click": gain,
        "clicks": total_clicks,
        "items": per_item,
        "thresholds": thresholds,
        "reason": reason,
    }


# --------------------------------------------------------------------------------------------------
# the flow (called by session_start and corrective_session_finish)


def qualification_session_create(*, study: Study, round: Round, worker: Worker, **fields) -> Session | None:
    """A test session for ``worker`` (no quota taken) with trials on :func:`qualification_targets`; None when
    the round has no target. Call inside the transaction of ``session_start`` (worker row locked)."""
    from datetime import timedelta

    from collector.models import Trial

    targets = qualification_targets(study=study, round=round)
    if not targets:
        return None
    session = Session.objects.create(
        study=study,
        round=round,
        worker=worker,
        is_qualification=True,
        expires_at=timezone.now() + timedelta(seconds=study.session_timeout_s),
        **fields,
    )
    Trial.objects.bulk_create(
        [Trial(session=session, target=target, position=index) for index, target in enumerate(targets)]
    )
    logger.info(
        "qualification session started",
        extra={"session_id": session.pk, "study_id": study.pk, "trials": len(targets)},
    )
    return session


def qualification_record(*, session: Session) -> CorrectiveQualification:
    """Score the test ``session`` and store the worker's result once (a second call returns it). Call inside
    the finishing transaction with the session row locked; the platform update is sent after commit."""
    existing = CorrectiveQualification.objects.filter(
        study_id=session.study_id, worker_id=session.worker_id
    ).first()
    if existing is not None:
        return existing
    score = qualification_score(session=session)
    result = CorrectiveQualification.objects.create(
        study_id=session.study_id,
        worker_id=session.worker_id,
        session=session,
        passed=score["passed"],
        placement=score["placement"],
        gain_per_click=score["gain_per_click"],
        clicks=score["clicks"],
        details={"items": score["items"], "thresholds": score["thresholds"], "reason": score["reason"]},
    )
    if session.study.platform == Platform.TOLOKA:
        task_intent_add(name=task_names.PLATFORMS_QUALIFICATION_SEND, args=[result.pk])
    logger.info(
        "qualification scored",
        extra={
            "study_id": session.study_id,
            "session_id": session.pk,
            "passed": score["passed"],
            "placement": score["placement"],
            "gain_per_click": score["gain_per_click"],
            "clicks": score["clicks"],
        },
    )
    return result


def qualification_platform_send(*, qualification_id: int) -> bool:
    """Put the result on the platform: the Toloka qualification skill of the study's campaign (100 passed,
    0 failed). Idempotent (setting a skill twice sets it to the same value). Returns False when there is
    nothing to send (no campaign or skill yet, a worker without a platform id, another platform).
    Raises the adapter's ``Platform*`` errors (the task retries ``PlatformUnavailable``)."""
    from collector.models import PlatformCampaign
    from collector.platforms import get_adapter

    result = (
        CorrectiveQualification.objects.select_related("study", "worker").filter(pk=qualification_id).first()
    )
    if result is None:
        return False
    study = result.study
    campaign = PlatformCampaign.objects.filter(study=study).first()
    if campaign is None or study.platform != Platform.TOLOKA or result.worker.platform != Platform.TOLOKA:
        return False
    adapter = get_adapter(study.platform)
    sent = adapter.qualification_set(
        campaign=campaign,
        worker_id=result.worker.external_id,
        value=SKILL_PASSED if result.passed else SKILL_FAILED,
    )
    if sent:
        CorrectiveQualification.objects.filter(pk=result.pk).update(
            platform_sent_at=timezone.now(), platform_error=""
        )
    return sent
