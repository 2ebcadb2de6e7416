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

Batch size policy (``least_batch``): a session asks for ``count`` (the study's ``batch_size``, 10 in RClicks)
targets of distinct images the worker has never seen in this study. When fewer are left for this worker (the
tail of a round, or a worker who saw most images), ``Study.short_batches`` decides: ``pad`` (default)
allocates what is left and ``session_start`` fills the batch up to ``count`` with filler trials, images whose
quotas are met (``collector.services.screens.session_filler_trials_add``: no slot, no quota, counted for the
batch rule only), so a round's tail fills with full batches however few images it still wants; ``full_only``
allocates nothing; ``tail`` allocates what is left if that is at least ``max(min_batch_size,
min_valid_per_session)``, so the short batch can still meet the batch rule, which never scales down (see
``collector.services.validation.required_valid_clicks``). When nothing is allocated an empty list is
returned: ``session_start`` turns that into a refusal for the worker, final or temporary.
"""

from __future__ import annotations

import functools
import logging
import random

from django.db import connection, models, transaction
from django.db.models import F, IntegerField, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from collector.models import Instance, Round, Session, Target, Trial, Worker
from collector.models.sessions import Device
from collector.services.prepared import column, prepared_cursor

logger = logging.getLogger(__name__)


class AllocationError(ValueError):
    """The request itself is wrong (unknown device, round not open); the message says what to fix."""


def allocate_targets(
    *,
    round: Round,
    worker: Worker,
    device: str,
    count: int,
    worker_locked: bool = False,
    session: Session | None = None,
) -> list[Target]:
    """Pick up to ``count`` targets of ``round`` for a new session of ``worker`` on ``device`` and take them
    (``inflight_<device>`` += 1 each).

    Call inside ``transaction.atomic()`` (the caller's transaction also creates the session and its
    trials, so a failure after allocation rolls the counters back). Targets come from distinct images
    the worker has not seen in the study, furthest from their per-device quota first (largest
    ``quota - valid - inflight``; ties broken by id), and only while ``valid + inflight < quota``.

    Returns the targets in random presentation order (so high-deficit targets are not always shown
    first), or ``[]`` when fewer than ``least_batch(study, count)`` could be taken (nothing is
    changed then). Raises ``AllocationError`` for an unknown device, a non-positive count or a round
    that is not open. ``worker_locked``: the caller's transaction already holds the worker's row lock
    (``session_start`` takes it first), so it is not taken again. ``session``: also create its trials, one
    per target at positions 0..n-1 in the order returned.

    On PostgreSQL the reads and writes after the round's lock, the trials included, are one prepared
    statement (``_take_targets_sql``; it draws the order with the database's ``random()``) and the targets
    come back with only the fields it returns loaded (the others are deferred); SQLite runs the same rule as
    ORM queries.
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

    if not worker_locked:
        # Serialise starts of the same worker: the seen-images check below must see the other start's trials.
        row_lock(Worker, worker.pk)
    # Then take this round's turn (see the module docstring); the round may have closed meanwhile.
    if row_lock(Round, round.pk, "state") != Round.State.OPEN:
        logger.info("allocation found the round closed", extra={"study_id": study.pk, "round_id": round.pk})
        return []
    least = least_batch(study=study, count=count)
    if connection.vendor == "postgresql":
        found, chosen = _take_targets(
            round=round, worker=worker, device=device, count=count, least=least, session=session
        )
        if not chosen:
            _log_too_few(round=round, worker=worker, found=found)
            return []
        if session is None:
            random.shuffle(chosen)  # else in the order of the positions the statement drew
        return chosen

    return _take_targets_orm(
        round=round, worker=worker, device=device, count=count, least=least, session=session
    )


def allocation_possible(*, round: Round, device: str, count: int) -> bool:
    """Whether ``allocate_targets`` could take anything for a batch of ``count`` on ``device``: at least
    ``least_batch`` targets of ``round`` with a free slot (``valid + inflight < quota``), read without its
    locks. False means it certainly could not (the seen-images rule only takes more away), so a start at a
    round's tail, every wanted image in flight, is refused without waiting for the round's turn behind the
    starts that can allocate; a slot given back meanwhile is taken at the worker's next try."""
    least = least_batch(study=round.study, count=count)
    free = (
        Target.objects.filter(round=round)
        .annotate(taken=F(f"valid_{device}") + F(f"inflight_{device}"))
        .filter(taken__lt=round.study.quota_for(device))
    )
    return len(free.values_list("pk", flat=True)[:least]) >= least


def least_batch(*, study, count: int) -> int:
    """The fewest wanted targets a new session of ``study`` may be allocated when ``count`` are asked for
    (``Study.short_batches``, issue 32 item 2): ``pad`` (the default) one, the batch being filled up after
    (``least_trials`` says how long it must then be); ``full_only`` a full batch; ``tail`` a shorter one only
    when it can still meet the batch rule (``min_valid_per_session`` trials) and is at least
    ``min_batch_size``. A batch is never counted below the rule whatever its length
    (``collector.services.validation.required_valid_clicks``)."""
    if study.short_batches == "pad":
        # timed studies fill the batch up; corrective ones have no fillers: full batches only
        return 1 if study.kind == "timed" else count
    if study.short_batches != "tail":
        return count
    return least_trials(study=study, count=count)


def least_trials(*, study, count: int) -> int:
    """The fewest trials (wanted and filler ones) a short batch of ``study`` may have: one that can still meet
    the batch rule and is at least ``min_batch_size`` (``tail``, and ``pad`` when too few images are left to
    fill a batch up)."""
    return min(count, max(study.min_batch_size, study.min_valid_per_session, 1))


def _take_targets_orm(
    *, round: Round, worker: Worker, device: str, count: int, least: int, session: Session | None
) -> list[Target]:
    """SQLite (under the database's write lock): ``_take_targets``'s work as ORM queries."""
    seen_images = Trial.objects.filter(session__study_id=round.study_id, session__worker_id=worker.pk).values(
        "target__instance__image_id"
    )
    chosen_ids = target_candidates(round=round, device=device, count=count, seen_images=seen_images)

    if len(chosen_ids) < least or not chosen_ids:
        _log_too_few(round=round, worker=worker, found=len(chosen_ids))
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
    if session is not None:
        Trial.objects.bulk_create(
            [Trial(session=session, target=target, position=index) for index, target in enumerate(chosen)]
        )
    return chosen


def _log_too_few(*, round: Round, worker: Worker, found: int) -> None:
    logger.info(
        "allocation found too few targets",
        extra={"study_id": round.study_id, "round_id": round.pk, "worker_id": worker.pk, "found": found},
    )


def row_lock(model: type[models.Model], pk: int, column: str = "id"):
    """Lock the row ``pk`` of ``model`` (``FOR NO KEY UPDATE``) and return the value of its field ``column``,
    or None when there is no such row. PostgreSQL: a prepared statement; SQLite: the ORM query (its write
    lock is taken at BEGIN, see the module docstring)."""
    if connection.vendor != "postgresql":
        return (
            model.objects.select_for_update(no_key=True).filter(pk=pk).values_list(column, flat=True).first()
        )
    meta = model._meta
    with prepared_cursor() as cursor:
        cursor.execute(_row_lock_sql(meta.db_table, meta.pk.column, meta.get_field(column).column), [pk])
        row = cursor.fetchone()
    return row[0] if row else None


@functools.cache
def _row_lock_sql(table: str, key: str, column: str) -> str:
    quote = connection.ops.quote_name
    return f"SELECT {quote(column)} FROM {quote(table)} WHERE {quote(key)} = %s FOR NO KEY UPDATE"


#: The Target fields ``_take_targets`` loads (the counters and keys); the others are deferred.
_TAKEN_FIELDS = tuple(
    field.attname
    for field in Target._meta.concrete_fields
    if field.attname
    in ("id", "round_id", "instance_id", "click_type", "full_stem", "valid_pc", "valid_mobile", "inflight_pc",
        "inflight_mobile")
)  # fmt: skip


def _take_targets(
    *, round: Round, worker: Worker, device: str, count: int, least: int, session: Session | None
) -> tuple[int, list[Target]]:
    """PostgreSQL, under the round's lock: choose the targets by ``target_candidates``'s rule and, when at
    least ``least`` were found, lock them in id order, take one in-flight slot each and (given a session)
    create its trials, in one prepared statement. Returns (targets found, targets taken: [] when fewer than
    ``least`` were found), the taken ones in the order of their trials' positions."""
    params = {
        "round": round.pk,
        "study": round.study_id,
        "worker": worker.pk,
        "quota": round.study.quota_for(device),
        "count": count,
        "least": least,
    }
    if session is not None:
        params["session"] = session.pk
        for field in _TRIAL_DEFAULTED:
            params[f"d_{field.attname}"] = field.get_db_prep_save(field.get_default(), connection)
    with prepared_cursor() as cursor:
        cursor.execute(_take_targets_sql(device, session is not None), params)
        rows = cursor.fetchall()
    found = rows[0][0] if rows else 0
    rows = sorted((row for row in rows if row[2] is not None), key=lambda row: row[1] or 0)
    return found, [Target.from_db(connection.alias, _TAKEN_FIELDS, row[2:]) for row in rows]


#: The Trial fields a new trial takes its model default for (all but its keys and position).
_TRIAL_DEFAULTED = tuple(
    field
    for field in Trial._meta.concrete_fields
    if not field.primary_key and field.attname not in ("session_id", "target_id", "position")
)


@functools.cache
def _take_targets_sql(device: str, with_trials: bool) -> str:
    """The statement of ``_take_targets`` for ``device`` (built once from the models' metadata).

    ``cand`` is each unseen image's best target (largest deficit, then lowest id: ``DISTINCT ON``), ``chosen``
    the first ``count`` of those in (deficit descending, id) order: the very targets ``target_candidates``
    picks greedily, since the first target of an image in that order is its best one. ``locked`` locks them
    in id order (the order of expiry and validation) only when at least ``least`` were found, and ``upd``
    takes their slots. The statement's snapshot is taken after the round's lock was granted (an earlier
    statement), so it reads the counters of every start that held the lock before; a target changed since
    (expiry) is locked and updated in its newest version, as any UPDATE in READ COMMITTED is.

    ``with_trials``: ``ins`` also creates the session's trials for the targets taken, at positions in an order
    drawn with ``random()``, their other fields at the model defaults (parameters). Answered: one row per
    target taken (the count found, the trial's position or NULL, the target's columns), or one row with the
    count found and NULLs when nothing was taken."""
    quote = connection.ops.quote_name
    target, instance, trial, session = (model._meta for model in (Target, Instance, Trial, Session))

    target_id = column(target, "id")
    valid, inflight = column(target, f"valid_{device}"), column(target, f"inflight_{device}")
    deficit = f"CAST(%(quota)s AS integer) - t.{valid} - t.{inflight}"
    returned = ", ".join(f"u.{quote(target.get_field(name).column)}" for name in _TAKEN_FIELDS)
    sql = (
        f"WITH seen AS (SELECT i2.{column(instance, 'image')} AS image_id FROM {quote(trial.db_table)} tr "
        f"JOIN {quote(session.db_table)} s ON s.{column(session, 'id')} = tr.{column(trial, 'session')} "
        f"JOIN {quote(target.db_table)} t2 ON t2.{target_id} = tr.{column(trial, 'target')} "
        f"JOIN {quote(instance.db_table)} i2 ON i2.{column(instance, 'id')} = t2.{column(target, 'instance')} "
        f"WHERE s.{column(session, 'study')} = %(study)s AND s.{column(session, 'worker')} = %(worker)s), "
        f"cand AS (SELECT DISTINCT ON (i.{column(instance, 'image')}) t.{target_id} AS id, {deficit} AS deficit "
        f"FROM {quote(target.db_table)} t "
        f"JOIN {quote(instance.db_table)} i ON i.{column(instance, 'id')} = t.{column(target, 'instance')} "
        f"WHERE t.{column(target, 'round')} = %(round)s AND {deficit} > 0 "
        f"AND i.{column(instance, 'image')} NOT IN (SELECT image_id FROM seen) "
        f"ORDER BY i.{column(instance, 'image')}, deficit DESC, t.{target_id}), "
        f"chosen AS (SELECT id FROM cand ORDER BY deficit DESC, id LIMIT %(count)s), "
        f"locked AS (SELECT t.{target_id} AS id FROM {quote(target.db_table)} t "
        f"WHERE t.{target_id} IN (SELECT id FROM chosen) "
        f"AND (SELECT count(*) FROM chosen) >= %(least)s ORDER BY t.{target_id} FOR NO KEY UPDATE), "
        f"upd AS (UPDATE {quote(target.db_table)} u SET {inflight} = u.{inflight} + 1 FROM locked "
        f"WHERE u.{target_id} = locked.id RETURNING {returned}) "
    )
    if not with_trials:
        return (
            sql
            + "SELECT (SELECT count(*) FROM chosen), NULL, upd.* FROM (SELECT 1) AS one LEFT JOIN upd ON true"
        )
    columns = ", ".join(column(trial, name) for name in ("session", "target", "position"))
    columns += "".join(f", {quote(field.column)}" for field in _TRIAL_DEFAULTED)
    defaults = "".join(
        f", CAST(%(d_{field.attname})s AS {field.db_type(connection)})" for field in _TRIAL_DEFAULTED
    )
    position_type = trial.get_field("position").db_type(connection)
    return sql + (
        f", ins AS (INSERT INTO {quote(trial.db_table)} ({columns}) "
        f"SELECT CAST(%(session)s AS bigint), p.id, CAST(p.n - 1 AS {position_type}){defaults} "
        f"FROM (SELECT upd.{target_id} AS id, row_number() OVER (ORDER BY random()) AS n FROM upd) AS p "
        f"RETURNING {column(trial, 'target')} AS target_id, {column(trial, 'position')} AS position) "
        f"SELECT (SELECT count(*) FROM chosen), ins.position, upd.* FROM (SELECT 1) AS one "
        f"LEFT JOIN upd ON true LEFT JOIN ins ON ins.target_id = upd.{target_id}"
    )


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
            Session.objects.filter(pk__in=[s.pk for s in sessions]).update(
                status=Session.Status.EXPIRED, ended_by="timeout"
            )
            by_device: dict[str, list[int]] = {}
            # a corrective qualification test took no slot (collector.services.qualification)
            # nor did practice and control trials (collector.services.screens)
            # and a trial a release already gave back holds none (collector.services.reservations)
            holding = Trial.objects.filter(
                session_id__in=[s.pk for s in sessions],
                session__is_qualification=False,
                role=Trial.Role.TASK,
                holds_slot=True,
            )
            for target_id, device in holding.values_list("target_id", "session__device"):
                by_device.setdefault(device, []).append(target_id)
            holding.update(holds_slot=False)
            for device, target_ids in sorted(by_device.items()):
                inflight_release(target_ids=target_ids, device=device)
        expired += len(sessions)
        logger.info(
            "sessions expired", extra={"count": len(sessions), "session_ids": [s.pk for s in sessions]}
        )
