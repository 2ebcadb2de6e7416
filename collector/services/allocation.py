"""Batch allocation: which targets of a round a worker's new session gets, safely under concurrency.

Invariant kept for every target and device ``d`` (checked by the tests with 50 concurrent starts)::

    valid_d + inflight_d <= quota_d

``inflight_d`` counts trials of sessions still running; it is released by validation (finished sessions) or
by expiry (abandoned ones), and ``valid_d`` grows only by valid clicks of counted sessions. So a target is
never handed out beyond its quota plus the sessions in flight.

Concurrency:

* PostgreSQL: starts of one round take turns on the round's row (``FOR NO KEY UPDATE``), the lock that
  validations of the round take before they change its counters. A start therefore reads the counters
  every earlier start and validation committed, picks its targets without racing anyone, and never refuses
  a worker because the rows it wanted were held by a concurrent start (an earlier design took disjoint rows
  with ``SKIP LOCKED`` and, finding only locked ones, retried for a bounded time: under a burst of starts
  it told workers "nothing left" while targets remained). Expiry, which lowers ``inflight`` without the
  round lock, can only make a target more available. The chosen targets are locked in id order before
  their counters change, the order expiry and validation lock them in, so no two of these wait on each
  other in a cycle. The worker row is locked first, so two starts by the same worker serialise and cannot
  both pick an image the other is about to show. Lock modes are ``NO KEY UPDATE`` throughout, which leave
  the foreign-key checks of concurrent inserts alone (docs/architecture.md).
* SQLite (embedded default): ``FOR UPDATE`` does not exist and Django drops it; the database is configured
  with ``transaction_mode=IMMEDIATE`` (config/settings.py), so every write transaction takes the database
  write lock at BEGIN and allocations run one after another. The same code is therefore correct there.

Batch size policy: a session asks for ``count`` (the study's ``batch_size``, 10 in RClicks) targets of
distinct images the worker has never seen in this study. When fewer are left for this worker (the tail of
a round, or a worker who saw most images), the session gets what is left if that is at least the study's
``min_batch_size`` (default 1, so rounds can finish), and the session's valid-click threshold scales with
its length (see ``collector.services.validation.required_valid_clicks``). Below ``min_batch_size`` nothing
is allocated and an empty list is returned: ``session_start`` turns that into a refusal for the worker.
"""

from __future__ import annotations

import logging
import random

from django.db import transaction
from django.db.models import F, IntegerField, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from collector.models import Round, Session, Target, Trial, Worker
from collector.models.sessions import Device

logger = logging.getLogger(__name__)


class AllocationError(ValueError):
    """The request itself is wrong (unknown device, round not open); the message says what to fix."""


def allocate_targets(*, round: Round, worker: Worker, device: str, count: int) -> list[Target]:
    """Pick up to ``count`` targets of ``round`` for a new session of ``worker`` on ``device`` and take them
    (``inflight_<device>`` += 1 each).

    Call inside ``transaction.atomic()`` (the caller's transaction also creates the session and its
    trials, so a failure after allocation rolls the counters back). Targets come from distinct images
    the worker has not seen in the study, furthest from their per-device quota first (largest
    ``quota - valid - inflight``; ties broken by id), and only while ``valid + inflight < quota``.

    Returns the targets in random presentation order (so high-deficit targets are not always shown
    first), or ``[]`` when fewer than ``min(count, study.min_batch_size)`` could be taken (nothing is
    changed then). Raises ``AllocationError`` for an unknown device, a non-positive count or a round
    that is not open.
    """
    if device not in Device.values:
        raise AllocationError(f"device {device!r} is unknown; use one of {', '.join(Device.values)}.")
    if count < 1:
        raise AllocationError(f"count={count}: a session needs at least one target.")
    if transaction.get_autocommit():
        raise AllocationError("allocate_targets must run inside transaction.atomic() (it locks rows).")
    study = round.study
    if round.state != Round.State.OPEN:
        raise AllocationError(f"round {round.number} of study {study.pk} is {round.state}, not open.")

    # Serialise starts of the same worker: the seen-images check below must see the other start's trials.
    Worker.objects.select_for_update(no_key=True).filter(pk=worker.pk).first()
    # Then take this round's turn (see the module docstring); the round may have closed meanwhile.
    round_state = (
        Round.objects.select_for_update(no_key=True)
        .filter(pk=round.pk)
        .values_list("state", flat=True)
        .first()
    )
    if round_state != Round.State.OPEN:
        logger.info("allocation found the round closed", extra={"study_id": study.pk, "round_id": round.pk})
        return []
    seen_images = Trial.objects.filter(session__study_id=study.pk, session__worker_id=worker.pk).values(
        "target__instance__image_id"
    )
    chosen_ids = target_candidates(round=round, device=device, count=count, seen_images=seen_images)

    if len(chosen_ids) < min(count, study.min_batch_size) or not chosen_ids:
        logger.info(
            "allocation found too few targets",
            extra={
                "study_id": study.pk,
                "round_id": round.pk,
                "worker_id": worker.pk,
                "found": len(chosen_ids),
            },
        )
        return []

    # In id order, like inflight_release and expiry (no lock cycle), then take one slot each.
    inflight_field = f"inflight_{device}"
    chosen = list(
        Target.objects.select_related("instance")
        .select_for_update(no_key=True, of=("self",))
        .filter(pk__in=chosen_ids)
        .order_by("pk")
    )
    Target.objects.filter(pk__in=chosen_ids).update(**{inflight_field: F(inflight_field) + 1})
    for target in chosen:
        setattr(target, inflight_field, getattr(target, inflight_field) + 1)
    random.shuffle(chosen)
    return chosen


def target_candidates(*, round: Round, device: str, count: int, seen_images=None) -> list[int]:
    """Ids of the targets a new ``device`` session of ``round`` gets, in choice order: up to ``count`` targets
    of distinct images not in ``seen_images`` (image ids: a list or a ``values()`` queryset; None = none
    seen), furthest from their quota first (largest ``quota - valid - inflight``; ties broken by id), and
    only while ``valid + inflight < quota``.

    Reads only. ``allocate_targets`` calls it under its locks and then takes the targets; the researcher's
    preview calls it to show the batch a new worker would get now."""
    quota = round.study.quota_for(device)
    valid_field, inflight_field = f"valid_{device}", f"inflight_{device}"
    deficit = Value(quota, output_field=IntegerField()) - F(valid_field) - F(inflight_field)
    candidates = Target.objects.filter(round=round).annotate(deficit=deficit).filter(deficit__gt=0)
    if seen_images is not None:
        candidates = candidates.exclude(instance__image_id__in=seen_images)
    candidates = candidates.order_by("-deficit", "id").values_list("id", "instance__image_id")
    chosen_ids: list[int] = []
    chosen_images: set[int] = set()
    page, offset = 4 * count, 0
    while len(chosen_ids) < count:
        rows = list(candidates[offset : offset + page])
        for target_id, image_id in rows:
            if image_id in chosen_images:
                continue  # another object of an image already in the batch
            chosen_ids.append(target_id)
            chosen_images.add(image_id)
            if len(chosen_ids) == count:
                break
        if len(rows) < page:
            break
        offset += page
    return chosen_ids


def inflight_release(*, target_ids: list[int], device: str) -> None:
    """Give back one in-flight slot per id in ``target_ids`` (repeats release repeatedly), never below 0.

    Call inside the transaction that marks the session validated or expired, so a release happens
    exactly once per session.
    """
    if device not in Device.values:
        raise AllocationError(f"device {device!r} is unknown; use one of {', '.join(Device.values)}.")
    field = f"inflight_{device}"
    per_target: dict[int, int] = {}
    for target_id in target_ids:
        per_target[target_id] = per_target.get(target_id, 0) + 1
    by_amount: dict[int, list[int]] = {}
    for target_id, amount in per_target.items():
        by_amount.setdefault(amount, []).append(target_id)
    # Lock in id order, so transactions that release several targets never wait on each other in a cycle.
    list(
        Target.objects.select_for_update(no_key=True)
        .filter(pk__in=list(per_target))
        .order_by("pk")
        .values_list("pk")
    )
    for amount, ids in by_amount.items():
        # Clamped at zero: a counter below ``amount`` can only come from a manual edit; never wrap it.
        Target.objects.filter(pk__in=ids).update(**{field: Greatest(F(field) - amount, Value(0))})


def sessions_expire(*, now=None, batch_size: int = 200) -> int:
    """Mark running sessions past ``expires_at`` as expired and release their in-flight slots; returns how
    many expired. Works in transactions of at most ``batch_size`` sessions, each locked with SKIP LOCKED
    and re-checked (``status = started``), so a session finishing at the same moment is either finished
    (and validation releases it) or expired (and released here), never both.
    """
    now = now or timezone.now()
    expired = 0
    while True:
        with transaction.atomic():
            sessions = list(
                Session.objects.filter(status=Session.Status.STARTED, expires_at__lte=now)
                .order_by("pk")
                .select_for_update(skip_locked=True, no_key=True)[:batch_size]
            )
            if not sessions:
                return expired
            Session.objects.filter(pk__in=[s.pk for s in sessions]).update(status=Session.Status.EXPIRED)
            by_device: dict[str, list[int]] = {}
            # a corrective qualification test took no slot (collector.services.qualification)
            for target_id, device in Trial.objects.filter(
                session_id__in=[s.pk for s in sessions], session__is_qualification=False
            ).values_list("target_id", "session__device"):
                by_device.setdefault(device, []).append(target_id)
            for device, target_ids in sorted(by_device.items()):
                inflight_release(target_ids=target_ids, device=device)
        expired += len(sessions)
        logger.info(
            "sessions expired", extra={"count": len(sessions), "session_ids": [s.pk for s in sessions]}
        )
