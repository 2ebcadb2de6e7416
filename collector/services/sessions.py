"""Sessions: starting a batch, recording its clicks exactly once, and finishing it.

A session is one batch of trials by one worker on one device. ``session_start`` allocates the targets and
creates the trials in one transaction; ``click_ingest`` stores the one click of a trial (one statement on
PostgreSQL in the common case, no lock; ``click_record`` wraps it for callers that want the Click row), keyed by a client idempotency key so
retried uploads never store a click twice, with the server-side timing rules; ``session_problem_record``
keeps the refusals the player showed the annotator; ``session_finish`` closes the batch once the server
holds every click, makes the completion code and enqueues validation after commit.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from django.conf import settings
from django.db import connection, models, transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from collector.models import Click, DisplayMode, Round, Session, Study, TaskIntent, Trial, Worker
from collector.models.studies import ShortBatchPolicy, StudyKind
from collector.services.codes import completion_code_make
from collector.services.outbox import (
    task_intent_add,
    task_intent_insert_params,
    task_intent_insert_sql,
    task_intent_send_after_commit,
)
from collector.services.prepared import column, prepared_cursor
from collector.services.presentations import (
    MAX_PRESENTATIONS,
    REPLAY_FLAG,
    presentation_append_sql,
    presented_answer,
    trial_server_flags,
)
from collector.services.qualification import (
    not_qualified_message,
    qualification_required,
    qualification_result,
    qualification_session_create,
)
from collector.services.screens import session_filler_trials_add, session_screen_trials_add
from collector.services.studies import study_open_round, study_preview_round
from tasks import names as task_names

logger = logging.getLogger(__name__)


DEVICES = ("pc", "mobile")
MAX_CLIENT_INFO_BYTES = 8000
MAX_PROBLEMS = 50
#: A click may arrive this much sooner than phases A + B + C after the trial's ``presented`` report
#: (timer and frame granularity, and the report's own time on the wire).
CLICK_EARLY_TOLERANCE_MS = 250
NO_ROUND_MESSAGE = gettext_lazy(
    "There are no tasks available right now (the current round is complete). Please try again later."
)
NO_IMAGES_LEFT_MESSAGE = gettext_lazy(
    "There are no images left for you in this study. Thank you for your interest!"
)


class SessionStartRefused(Exception):
    """No session can be started; the message is meant for the worker (shown on the entry page), in the
    request's language (raise it with an evaluated ``gettext`` string). ``retry_after_s``: the refusal is
    temporary (the images still wanted are in other workers' batches) and the page may ask again this many
    seconds later; None when it is final."""

    def __init__(self, message: str, *, retry_after_s: int | None = None):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ClickRefused(Exception):
    """The click cannot be stored; the message names the field or state at fault, ``field`` the field (or
    None for a state), ``reason`` is a machine-readable code. The player shows the message to the worker:
    refusals of a state (any ``reason`` but ``invalid``) are translated; ``invalid`` ones answer a client
    that broke the API's contract and stay in English, like the parser's and the serializers' messages."""

    def __init__(self, message: str, *, reason: str = "invalid", field: str | None = None):
        super().__init__(message)
        self.reason = reason
        self.field = field


class SessionFinishRefused(Exception):
    """The session cannot be finished yet; ``missing_positions`` lists trials still without a click."""

    def __init__(self, message: str, *, missing_positions: list[int] | None = None):
        super().__init__(message)
        self.missing_positions = missing_positions or []


# --------------------------------------------------------------------------------------------------
# start


def _check_start(*, study: Study, worker: Worker, device: str, is_bot: bool = False) -> None:
    if device not in DEVICES:
        raise SessionStartRefused(
            _("device %(device)s is not supported; it must be one of %(devices)s.")
            % {"device": repr(device), "devices": ", ".join(DEVICES)}
        )
    if is_bot:
        # A test run before launch (issue 32 item 4): simulated annotators play a draft, and only a draft, of a
        # timed study; real workers keep being refused until it is published.
        if study.state != Study.State.DRAFT or study.is_corrective:
            raise SessionStartRefused(
                f"simulated annotators run on a draft timed study only; study {study.pk} is "
                f"{study.state}{' (corrective)' if study.is_corrective else ''}."
            )
    elif study.state != Study.State.PUBLISHED:
        raise SessionStartRefused(
            _("This task is not open at the moment (the study is %(state)s). Please try again later.")
            % {"state": study.get_state_display().lower()}
        )
    if worker.excluded:
        raise SessionStartRefused(_("You cannot take part in this study any more."))


def _resumable_session(*, study: Study, worker: Worker, platform_assignment_id: str) -> Session | None:
    """The worker's running session of this study for the same assignment, if it has not expired."""
    return (
        Session.objects.filter(
            study=study,
            worker=worker,
            status=Session.Status.STARTED,
            platform_assignment_id=platform_assignment_id,
            expires_at__gt=timezone.now(),
        )
        .order_by("-started_at")
        .first()
    )


def _in_model_order(model, attnames: tuple[str, ...]) -> tuple[str, ...]:
    """``attnames`` in the order of the model's concrete fields, the order ``Model.from_db`` expects."""
    order = [field.attname for field in model._meta.concrete_fields]
    return tuple(sorted(attnames, key=order.index))


def _start_reads(
    *, study: Study, worker: Worker, platform_assignment_id: str
) -> tuple[Session | None, Round | None]:
    """Under the worker's lock: the session to resume (``_resumable_session``) and the study's open round
    (``study_open_round``). PostgreSQL: one prepared statement for both, the round loaded with its id,
    number and state (other fields deferred), its study the one given."""
    if connection.vendor != "postgresql":
        existing = _resumable_session(
            study=study, worker=worker, platform_assignment_id=platform_assignment_id
        )
        return existing, (None if existing is not None else study_open_round(study=study))
    params = {
        "study": study.pk,
        "worker": worker.pk,
        "started": Session.Status.STARTED.value,
        "assignment": platform_assignment_id,
        "now": timezone.now(),
        "open": Round.State.OPEN.value,
    }
    with prepared_cursor() as cursor:
        cursor.execute(_start_reads_sql(), params)
        existing_id, *round_values = cursor.fetchone()
    if existing_id is not None:
        return Session.objects.get(pk=existing_id), None
    if round_values[0] is None:
        return None, None
    open_round = Round.from_db(connection.alias, _START_ROUND_FIELDS, round_values)
    open_round.study = study
    return None, open_round


_START_ROUND_FIELDS = _in_model_order(Round, ("id", "study_id", "number", "state"))


@functools.cache
def _start_reads_sql() -> str:
    """The statement of ``_start_reads`` (PostgreSQL), built once from the models' metadata: the conditions
    and orders of ``_resumable_session`` and ``study_open_round``."""
    quote = connection.ops.quote_name
    session, round_ = Session._meta, Round._meta

    round_columns = ", ".join(f"r.{quote(round_.get_field(name).column)}" for name in _START_ROUND_FIELDS)
    return (
        f"SELECT s.id, {round_columns} FROM (SELECT 1) AS one "
        f"LEFT JOIN LATERAL (SELECT {column(session, 'id')} AS id FROM {quote(session.db_table)} "
        f"WHERE {column(session, 'study')} = %(study)s AND {column(session, 'worker')} = %(worker)s "
        f"AND {column(session, 'status')} = %(started)s "
        f"AND {column(session, 'platform_assignment_id')} = %(assignment)s "
        f"AND {column(session, 'expires_at')} > %(now)s ORDER BY {column(session, 'started_at')} DESC LIMIT 1) AS s "
        f"ON true LEFT JOIN LATERAL (SELECT * FROM {quote(round_.db_table)} "
        f"WHERE {column(round_, 'study')} = %(study)s AND {column(round_, 'state')} = %(open)s "
        f"ORDER BY {column(round_, 'number')} DESC LIMIT 1) AS r ON true"
    )


def session_start(
    *,
    study: Study,
    worker: Worker,
    device: str,
    platform_device: str = "",
    detected_device: str = "",
    user_agent: str = "",
    client_info: dict | None = None,
    platform_assignment_id: str = "",
    platform_batch_id: str = "",
    is_bot: bool = False,
) -> Session:
    """Start (or resume) a batch for ``worker`` on ``device`` ("pc" | "mobile").

    In one transaction: find the open round, allocate up to ``study.batch_size`` targets through
    ``collector.services.allocation.allocate_targets`` (which reserves them with the inflight counters),
    and create the Session with Trials at positions 0..n-1 in allocation order. ``expires_at`` is now +
    ``study.session_timeout_s``. If the worker already runs an unexpired session of this study for the
    same ``platform_assignment_id`` it is returned instead, so reopening an entry link resumes the batch.

    ``is_bot``: a simulated annotator's batch (``Session.is_bot``; ``collector.services.bots``), started on a
    draft study only (its round 1 prepared as a preview prepares it), taking in-flight slots as any batch.

    Raises SessionStartRefused with a message for the worker (study not open, no round, no targets left).
    Before a temporary refusal (the images still wanted are in other batches), the batches abandoned by then
    give their images back (``reservations.sessions_release_on_demand``, outside the start's transaction and
    its locks) and the start is tried once more.
    """
    start = functools.partial(
        _session_start_once,
        study=study,
        worker=worker,
        device=device,
        platform_device=platform_device,
        detected_device=detected_device,
        user_agent=user_agent,
        client_info=client_info,
        platform_assignment_id=platform_assignment_id,
        platform_batch_id=platform_batch_id,
        is_bot=is_bot,
    )
    from collector.services.reservations import sessions_release_on_demand

    try:
        return start()
    except _NothingAllocated as nothing:
        refusal = no_task_refusal(round=nothing.round, worker=worker, device=device)
    if refusal.retry_after_s is None or not sessions_release_on_demand(study=study, device=device):
        raise refusal
    try:
        return start()
    except _NothingAllocated as nothing:
        raise no_task_refusal(round=nothing.round, worker=worker, device=device) from None


class _NothingAllocated(Exception):
    """Raised inside the start's transaction when allocation took nothing (the transaction rolls back)."""

    def __init__(self, round: Round):
        super().__init__(f"nothing allocated in round {round.pk}")
        self.round = round


def _session_start_once(
    *,
    study: Study,
    worker: Worker,
    device: str,
    platform_device: str,
    detected_device: str,
    user_agent: str,
    client_info: dict | None,
    platform_assignment_id: str,
    platform_batch_id: str,
    is_bot: bool,
) -> Session:
    """``session_start``'s one try: checks, then one transaction (raises ``_NothingAllocated`` when the
    allocation took nothing: the refusal is worded after the transaction, its reads holding no lock)."""
    _check_start(study=study, worker=worker, device=device, is_bot=is_bot)
    if is_bot:
        study_preview_round(study_id=study.pk)  # a draft's round 1, exactly what publishing uses
    from collector.services.allocation import allocate_targets, allocation_possible, row_lock

    with transaction.atomic():
        # Serialise starts of the same worker, so a double-clicked entry link opens one session, not two.
        row_lock(Worker, worker.pk)
        existing, open_round = _start_reads(
            study=study, worker=worker, platform_assignment_id=platform_assignment_id[:200]
        )
        if existing is not None:
            return existing
        if open_round is None:
            raise SessionStartRefused(str(NO_ROUND_MESSAGE))
        # What the browser and the platform told us, the same for a test session and a batch.
        recorded = {
            "device": device,
            "platform_device": platform_device[:20],
            "detected_device": detected_device[:20],
            "user_agent": user_agent[:2000],
            "client_info": _bounded_client_info(client_info or {}),
            "platform_assignment_id": platform_assignment_id[:200],
            "platform_batch_id": platform_batch_id[:200],
        }
        if qualification_required(study):
            # Corrective campaigns with a qualification test (issue 17): the test first, real tasks only after
            # a pass; a failed worker is refused for good.
            result = qualification_result(study=study, worker=worker)
            if result is None:
                test = qualification_session_create(study=study, round=open_round, worker=worker, **recorded)
                if test is None:
                    raise SessionStartRefused(str(NO_ROUND_MESSAGE))
                return test
            if not result.passed:
                raise SessionStartRefused(not_qualified_message())
        if not allocation_possible(round=open_round, device=device, count=study.batch_size):
            raise _NothingAllocated(
                open_round
            )  # nothing to take: no session row, no wait for the round's turn
        # The session row first: allocation takes the round's turn (a row lock held to the commit, which
        # every start of the round waits for), so the less that runs after it, the more starts per second.
        now = timezone.now()
        session = Session.objects.create(
            study=study,
            round=open_round,
            worker=worker,
            expires_at=now + timedelta(seconds=study.session_timeout_s),
            is_bot=is_bot,
            **recorded,
        )
        targets = allocate_targets(
            round=open_round,
            worker=worker,
            device=device,
            count=study.batch_size,
            worker_locked=True,
            session=session,  # its trials created with the allocation: positions 0..n-1 in the order returned
        )
        if not targets and not Round.objects.filter(pk=open_round.pk, state=Round.State.OPEN).exists():
            raise SessionStartRefused(str(NO_ROUND_MESSAGE))  # closed by a validation while this start waited
        if not targets:
            raise _NothingAllocated(open_round)  # rolls the session row back; the refusal is worded below
        _fill_up(session=session, study=study, allocated=len(targets))
        if study.practice_trials or study.control_trials:
            session_screen_trials_add(session=session)  # practice and control trials (issue 32 item 5)
    logger.info(
        "session started",
        extra={
            "session_id": session.pk,
            "study_id": study.pk,
            "round_id": open_round.pk,
            "trials": len(targets),
        },
    )
    return session


def _fill_up(*, session: Session, study: Study, allocated: int) -> None:
    """A round's tail under ``Study.short_batches`` ``pad``: fewer than ``batch_size`` targets were allocated,
    so the batch is filled up with images already done (``collector.services.screens``); too short even so,
    the start is refused (raised inside ``session_start``'s transaction, which rolls the allocation back)."""
    from collector.services.allocation import least_trials

    if (
        study.short_batches != ShortBatchPolicy.PAD
        or study.kind != StudyKind.TIMED
        or allocated >= study.batch_size
    ):
        return
    fillers = session_filler_trials_add(session=session, count=study.batch_size)
    if allocated + fillers < least_trials(study=study, count=study.batch_size):
        raise SessionStartRefused(str(NO_IMAGES_LEFT_MESSAGE))


def no_task_refusal(*, round: Round, worker: Worker, device: str) -> SessionStartRefused:
    """The refusal a worker who gets no batch is given, its message in the request's language: final (every
    target of the round has its ``device`` quota met, or the images still wanted are ones this worker has
    already seen) or temporary (the images still wanted are in other workers' running batches: when to try
    again, from the study's grace period, after which an abandoned batch gives its images back; the page
    asks again by itself every ``settings.WAIT_RECHECK_S``, its ``retry_after_s``)."""
    from collector.services.allocation import least_batch
    from collector.services.reservations import study_wait_hint_s

    study = round.study
    quota = study.quota_for(device)
    valid, inflight = f"valid_{device}", f"inflight_{device}"
    open_targets = round.targets.filter(**{f"{valid}__lt": quota})
    if not open_targets.exists():
        return SessionStartRefused(
            _("This study has all the answers it needs for your device. Thank you for your interest!")
        )
    seen = Trial.objects.filter(session__study_id=study.pk, session__worker_id=worker.pk).values(
        "target__instance__image_id"
    )
    unseen = open_targets.exclude(instance__image_id__in=seen)
    unseen_images = unseen.values("instance__image_id").distinct().count()
    if unseen_images < least_batch(study=study, count=study.batch_size):
        return SessionStartRefused(str(NO_IMAGES_LEFT_MESSAGE))
    waiting = unseen.filter(**{f"{inflight}__gt": 0}).exists()
    if not waiting:
        return SessionStartRefused(str(NO_IMAGES_LEFT_MESSAGE))
    hint_s = study_wait_hint_s(study=study)
    minutes = max(1, math.ceil(hint_s / 60))
    message = _(
        "All the remaining images are being worked on by other participants right now. Some may come back "
        "if a participant leaves: please try again in about %(minutes)s minute(s)."
    ) % {"minutes": minutes}
    return SessionStartRefused(message, retry_after_s=max(1, math.ceil(min(hint_s, settings.WAIT_RECHECK_S))))


def _bounded_client_info(info: dict) -> dict:
    if not isinstance(info, dict):
        raise ValueError("client_info must be a JSON object.")
    if len(json.dumps(info, default=str)) > MAX_CLIENT_INFO_BYTES:
        raise ValueError(f"client_info is larger than {MAX_CLIENT_INFO_BYTES} bytes; send fewer fields.")
    return info


def session_client_report(
    *, session: Session, client_info: dict, detected_device: str = "", user_agent: str = ""
) -> Session:
    """Merge what the browser measured (viewport, DPR, refresh rate, pointer, client hints, webdriver)
    into ``session.client_info``; ``detected_device`` is the browser's own device class."""
    merged = {**session.client_info, **_bounded_client_info(client_info)}
    session.client_info = _bounded_client_info(merged)
    session.last_seen_at = timezone.now()  # a report is a sign of life (collector.services.reservations)
    fields = ["client_info", "last_seen_at"]
    if detected_device in DEVICES:
        session.detected_device = detected_device
        fields.append("detected_device")
    if user_agent and not session.user_agent:
        session.user_agent = user_agent[:2000]
        fields.append("user_agent")
    session.save(update_fields=fields)
    return session


# --------------------------------------------------------------------------------------------------
# clicks


@dataclass(frozen=True)
class ClickReceipt:
    """What the click endpoint answers: the stored click, whether this request stored it, and the
    positions of the session still without a click."""

    click_id: int
    trial_id: int
    position: int
    created: bool
    missing_positions: list[int]
    #: the answer for the next trial's report the click carried, when the click's statement recorded it
    next_presentation: dict | None = None


#: What the click path reads of a session's trials, the session and its study: the fields ``click_ingest``,
#: ``_check_click_timing`` and ``trial_server_flags`` use, and no other (a field left out is a deferred field:
#: reading it costs a query, which tests/annotation_ui/test_api.py's statement count catches).


_HOT_TRIAL_FIELDS = _in_model_order(Trial, ("id", "session_id", "position", "presentations", "holds_slot"))
_HOT_SESSION_FIELDS = _in_model_order(Session, ("id", "status", "expires_at", "study_id"))
_HOT_STUDY_FIELDS = _in_model_order(
    Study, ("id", "kind", "display_mode", "image_ms", "target_ms", "text_ms", "blocked_ms")
)
_hot_query_cache: dict[str, tuple[str, list]] = {}


def _hot_query() -> tuple[str, list]:
    """The SQL of ``_session_trials`` and the model fields of its columns, built once per database vendor
    from the models' metadata. Hand-written rather than a queryset: compiling the ORM query and building
    31 model instances cost about 5x the query itself, on the hottest request of the service."""
    cached = _hot_query_cache.get(connection.vendor)
    if cached is not None:
        return cached
    quote = connection.ops.quote_name
    aliases = {Trial: "t", Click: "c", Session: "s", Study: "st"}
    selected: list[tuple[type[models.Model], str]] = [
        *((Trial, name) for name in _HOT_TRIAL_FIELDS),
        (Click, "id"),
        (Click, "idempotency_key"),
        *((Session, name) for name in _HOT_SESSION_FIELDS),
        *((Study, name) for name in _HOT_STUDY_FIELDS),
    ]
    fields = [model._meta.get_field(name) for model, name in selected]
    columns = ", ".join(
        f"{aliases[model]}.{quote(field.column)}"
        for (model, _name), field in zip(selected, fields, strict=True)
    )

    def table(model) -> str:
        return f"{quote(model._meta.db_table)} {aliases[model]}"

    def aliased(model, name: str) -> str:
        return f"{aliases[model]}.{quote(model._meta.get_field(name).column)}"

    if connection.vendor == "postgresql":
        # The statement is prepared (planned once per connection), so its plan must not depend on how many
        # clicks the table held then: a plain LEFT JOIN planned on a young table hash-joined a sequential
        # scan of every click, kept while the table grew (1.9 million rows read for 2,000 clicks). A
        # per-trial lookup with LIMIT is not flattened into a join; it takes the trial's unique index.
        own = Click._meta.get_field
        clicks = (
            f"LEFT JOIN LATERAL (SELECT c1.{quote(own('id').column)}, c1.{quote(own('idempotency_key').column)} "
            f"FROM {quote(Click._meta.db_table)} c1 WHERE c1.{quote(own('trial').column)} = {aliased(Trial, 'id')} "
            f"LIMIT 1) {aliases[Click]} ON TRUE"
        )  # fmt: skip
    else:
        clicks = f"LEFT JOIN {table(Click)} ON {aliased(Click, 'trial')} = {aliased(Trial, 'id')}"
    sql = (
        f"SELECT {columns} FROM {table(Trial)} "
        f"JOIN {table(Session)} ON {aliased(Session, 'id')} = {aliased(Trial, 'session')} "
        f"JOIN {table(Study)} ON {aliased(Study, 'id')} = {aliased(Session, 'study')} "
        f"{clicks} "
        f"WHERE {aliased(Trial, 'session')} = %s ORDER BY {aliased(Trial, 'position')}"
    )
    converters = []
    for field in fields:
        col = field.get_col(aliases[field.model])
        converters.append(
            (col, [*connection.ops.get_db_converters(col), *field.get_db_converters(connection)])
        )
    _hot_query_cache[connection.vendor] = (sql, converters)
    return _hot_query_cache[connection.vendor]


class _TrialRow(NamedTuple):
    """What the click path needs of every trial of the session (the one clicked is a Trial instance too)."""

    pk: int
    position: int
    click_pk: int | None
    click_key: str | None


def _session_trials(session_id: int, position: int) -> tuple[Session, list[_TrialRow], Trial | None]:
    """The session (with its study), every trial's id, position and click id and key (by position), and the
    trial at ``position`` as a Trial instance with ``click_pk`` and ``click_key`` (None if there is none):
    one prepared statement, no lock. The instances hold only the fields the click path reads (see
    ``_HOT_*_FIELDS``); the other trials stay tuples (no model instance, their ``presentations`` never
    decoded). Raises Session.DoesNotExist when the session has no trials (it does not exist)."""
    sql, _columns = _hot_query()
    with prepared_cursor() as cursor:
        cursor.execute(sql, [session_id])
        rows = cursor.fetchall()
    return _session_from_rows(session_id, position, rows)


def _trial_rows(rows: list) -> list[_TrialRow]:
    """The light tuples of the hot read's rows (no conversion: ids, positions and keys come back as they are)."""
    n_trial = len(_HOT_TRIAL_FIELDS)
    at_id, at_position = _HOT_TRIAL_FIELDS.index("id"), _HOT_TRIAL_FIELDS.index("position")
    return [_TrialRow(row[at_id], row[at_position], row[n_trial], row[n_trial + 1]) for row in rows]


def _session_from_rows(
    session_id: int, position: int, rows: list
) -> tuple[Session, list[_TrialRow], Trial | None]:
    """``_session_trials``'s answer built from the hot read's rows (see there)."""
    if not rows:
        raise Session.DoesNotExist(f"session {session_id} does not exist.")
    _sql, columns = _hot_query()

    def converted(row, first: int, last: int) -> list:
        values = []
        for value, (col, converters) in zip(row[first:last], columns[first:last], strict=True):
            for converter in converters:
                value = converter(value, col, connection)
            values.append(value)
        return values

    n_trial, n_session = len(_HOT_TRIAL_FIELDS), len(_HOT_SESSION_FIELDS)
    ends = (n_trial, n_trial + 2, n_trial + 2 + n_session, len(columns))
    head = rows[0]
    study = Study.from_db(connection.alias, _HOT_STUDY_FIELDS, converted(head, ends[2], ends[3]))
    session = Session.from_db(connection.alias, _HOT_SESSION_FIELDS, converted(head, ends[1], ends[2]))
    session.study = study
    trials = _trial_rows(rows)
    trial = None
    for row, light in zip(rows, trials, strict=True):
        if light.position == position:
            trial = Trial.from_db(connection.alias, _HOT_TRIAL_FIELDS, converted(row, 0, n_trial))
            trial.session = session
            trial.click_pk, trial.click_key = light.click_pk, light.click_key
            break
    return session, trials, trial


@functools.cache
def _click_in_one_statement_sql(carry: bool = False) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """PostgreSQL: the statement of ``_click_in_one_statement`` and the attnames of the click and trial
    fields it writes, in the order of its parameters (built once from the models' metadata).

    The hot read (``_hot_query``) runs once, as the materialised CTE ``base`` (its columns renamed c0, c1...:
    the read selects several ``id``); the statement answers its rows, in position order. ``hit`` is the trial
    at the position, from those rows, when the common case holds: the session started and not expired, the
    trial without a click, presented at least once and phases A + B + C over by the server's clock, less
    ``CLICK_EARLY_TOLERANCE_MS`` (the very conditions of ``_check_click_timing``). ``ins`` inserts the click
    there with ``ON CONFLICT DO NOTHING`` (a click on the trial or the key stored meanwhile: nothing is
    written) and ``upd`` writes the trial's fields from the click, ``replayed`` among its flags when it was
    presented more than once (``trial_server_flags``). The rows answered are the snapshot before the
    statement, what the two-statement path would have read first; every case but the common one inserts
    nothing here and is decided in Python on those rows, exactly as before.

    The conditions are tested on ``base``'s few rows, not on the tables: a condition on the session table's
    status and expiry let the generic plan scan the (status, expires_at) index over every running session.

    ``carry``: the click also carries the report of the trial at ``n_position`` (the player's
    ``next_presentation``, id ``n_key`` shown at ``n_at``): ``nxt`` appends it, under the conditions of
    ``services.presentations._record_new_presentation`` (the session neither finished nor expired, the
    trial without a click, the id not there yet, fewer than ``most``; tested on ``base``'s rows, the trial's
    own on the row), whatever becomes of the click, and never on the clicked trial itself; each row answered
    then ends with the recorded trial's id and its presentations now (NULL, NULL when ``nxt`` changed
    nothing: the caller decides as ``trial_presented_attached`` does)."""
    quote = connection.ops.quote_name
    trial, click = Trial._meta, Click._meta
    read, columns = _hot_query()
    read_sql = read.replace("%s", "%(session)s")
    if read_sql.count("%(session)s") != 1 or "%" in read_sql.replace("%(session)s", ""):
        raise RuntimeError(f"the hot read must have exactly one parameter (the session id): {read}")
    n_trial, n_session = len(_HOT_TRIAL_FIELDS), len(_HOT_SESSION_FIELDS)
    at = {
        **{("trial", name): index for index, name in enumerate(_HOT_TRIAL_FIELDS)},
        ("click", "id"): n_trial,
        **{("session", name): n_trial + 2 + index for index, name in enumerate(_HOT_SESSION_FIELDS)},
        **{("study", name): n_trial + 2 + n_session + index for index, name in enumerate(_HOT_STUDY_FIELDS)},
    }

    def base(model: str, name: str) -> str:
        return f"b.c{at[(model, name)]}"

    click_fields = [field for field in click.concrete_fields if not field.primary_key]
    inserted = [
        "hit.id"
        if field.attname == "trial_id"
        else f"CAST(%(c_{field.attname})s AS {field.db_type(connection)})"
        for field in click_fields
    ]
    trial_written = ("phase_onsets_ms", "scheduled_onsets_ms", "load_wait_ms", "blocked_clicks", "refresh_hz")
    assignments = [f"{column(trial, name)} = %(t_{name})s" for name in trial_written]
    assignments.append(
        f"{column(trial, 'flags')} = CASE WHEN jsonb_array_length(hit.presentations) > 1 "
        f"THEN CAST(%(t_flags_replayed)s AS jsonb) ELSE CAST(%(t_flags)s AS jsonb) END"
    )
    shown = base("trial", "presentations")
    abc_ms = (
        f"{base('study', 'image_ms')} + CASE WHEN {base('study', 'display_mode')} = %(text_mode)s "
        f"THEN {base('study', 'text_ms')} ELSE {base('study', 'target_ms')} END + {base('study', 'blocked_ms')}"
    )
    names = ", ".join(f"c{index}" for index in range(len(columns)))
    sql = (
        f"WITH base ({names}) AS MATERIALIZED ({read_sql}), "
        f"hit AS (SELECT {base('trial', 'id')} AS id, {shown} AS presentations FROM base b "
        f"WHERE {base('trial', 'position')} = %(position)s AND {base('click', 'id')} IS NULL "
        f"AND {base('trial', 'holds_slot')} "
        f"AND {base('session', 'status')} = %(started)s AND {base('session', 'expires_at')} > %(now)s "
        f"AND CASE WHEN jsonb_typeof({shown}) = 'array' THEN jsonb_array_length({shown}) ELSE 0 END >= 1 "
        f"AND %(now)s >= CAST({shown} -> -1 ->> 'at' AS timestamptz) "
        f"+ interval '1 millisecond' * ({abc_ms} - %(tolerance)s)), "
        f"ins AS (INSERT INTO {quote(click.db_table)} "
        f"({', '.join(quote(field.column) for field in click_fields)}) "
        f"SELECT {', '.join(inserted)} FROM hit ON CONFLICT DO NOTHING "
        f"RETURNING {column(click, 'id')} AS id, {column(click, 'trial')} AS trial_id), "
        f"upd AS (UPDATE {quote(trial.db_table)} tt SET {', '.join(assignments)} FROM ins "
        f"JOIN hit ON hit.id = ins.trial_id WHERE tt.{column(trial, 'id')} = ins.trial_id) "
    )
    carried = ""
    if carry:
        set_shown, shown_ok, shown_now = presentation_append_sql(key="n_key", at="n_at")
        sql += (
            f", nxt (id, shown) AS (UPDATE {quote(trial.db_table)} AS t SET {set_shown} FROM base b "
            f"WHERE t.{column(trial, 'id')} = {base('trial', 'id')} AND {base('trial', 'position')} = %(n_position)s "
            f"AND %(n_position)s <> %(position)s AND {base('click', 'id')} IS NULL "
            f"AND {base('session', 'status')} NOT IN (%(finished)s, %(expired)s) "
            f"AND {base('session', 'expires_at')} > %(now)s AND {shown_ok} RETURNING {shown_now}) "
        )  # fmt: skip
        carried = ", (SELECT id FROM nxt), (SELECT shown FROM nxt)"
    sql += f"SELECT b.*, (SELECT id FROM ins){carried} FROM base b ORDER BY {base('trial', 'position')}"
    return sql, tuple(field.attname for field in click_fields if field.attname != "trial_id"), trial_written


def _click_in_one_statement(
    *,
    session_id: int,
    position: int,
    now: datetime,
    click_values: dict,
    trial_fields: dict,
    carried: tuple[int, str] | None = None,
) -> tuple[list, int | None, tuple[int, int] | None]:
    """PostgreSQL, the common click in one round trip: the hot read's rows (as ``_session_trials`` reads
    them, before this click) and the id of the click inserted with its trial's fields, or None when the
    common case does not hold or the insert conflicted (nothing written: the caller decides on the rows).

    ``click_values``: the Click's fields by attname (not its trial, id or defaults; ``received_at`` too, as
    ``auto_now_add`` is not applied here); ``trial_fields``: as
    ``_insert_click``'s, with ``flags`` the client's (sorted, de-duplicated) — ``replayed`` is added here.
    ``carried``: (position, presentation id) of the next trial's report the click carries; the third value
    returned is then (its trial's id, its presentations now) when the statement recorded it, else None."""
    sql, click_names, trial_names = _click_in_one_statement_sql(carried is not None)
    if set(trial_fields) != {*trial_names, "flags"}:  # the statement writes what the Python path writes
        raise ValueError(f"trial_fields {sorted(trial_fields)} must be {sorted({*trial_names, 'flags'})}")
    meta, trial_meta = Click._meta, Trial._meta
    params: dict = {
        "session": session_id,
        "position": position,
        "started": Session.Status.STARTED.value,
        "now": now,
        "text_mode": DisplayMode.TEXT_DESCRIPTION.value,
        "tolerance": CLICK_EARLY_TOLERANCE_MS,
    }
    for name in click_names:
        field = meta.get_field(name)
        value = click_values[name] if name in click_values else field.get_default()
        params[f"c_{name}"] = field.get_db_prep_save(value, connection)
    for name in trial_names:
        params[f"t_{name}"] = trial_meta.get_field(name).get_db_prep_save(trial_fields[name], connection)
    flags = trial_meta.get_field("flags")
    params["t_flags"] = flags.get_db_prep_save(trial_fields["flags"], connection)
    replayed = sorted(set(trial_fields["flags"]) | {REPLAY_FLAG})
    params["t_flags_replayed"] = flags.get_db_prep_save(replayed, connection)
    if carried is not None:
        params.update(
            n_position=carried[0],
            n_key=carried[1],
            n_at=now.isoformat(),
            finished=Session.Status.FINISHED.value,
            expired=Session.Status.EXPIRED.value,
            most=MAX_PRESENTATIONS,
        )
    with prepared_cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    if not rows:
        return [], None, None
    if carried is None:
        return [row[:-1] for row in rows], rows[0][-1], None
    recorded = (rows[0][-2], rows[0][-1]) if rows[0][-2] is not None else None
    return [row[:-3] for row in rows], rows[0][-3], recorded


def _check_click_timing(*, trial: Trial, study: Study, event_timestamp_ms, onsets: dict, now) -> None:
    """The timing rules the browser applies, checked again by the server (contract item 2).

    * A click must not arrive, by the server's clock, before the trial's latest ``presented`` report +
      phases A + B + C of the study - CLICK_EARLY_TOLERANCE_MS: no click can be made in phase D sooner.
    * A click's own ``event_timestamp_ms`` must not precede its phase D onset (``phase_onsets_ms.D``)."""
    shown = trial.presentations or []
    if shown:
        presented_at = datetime.fromisoformat(shown[-1]["at"])
        abc_ms = study.image_ms + study.phase_b_ms() + study.blocked_ms
        earliest = presented_at + timedelta(milliseconds=abc_ms - CLICK_EARLY_TOLERANCE_MS)
        if now < earliest:
            early_ms = (earliest - now).total_seconds() * 1000 + CLICK_EARLY_TOLERANCE_MS
            raise ClickRefused(
                _(
                    "the click for trial %(position)s arrived %(early_ms)s ms before its phase D could start "
                    "(%(abc_ms)s ms after the trial was presented); clicks are taken only in phase D."
                )
                % {"position": trial.position, "early_ms": f"{early_ms:.0f}", "abc_ms": abc_ms},
                reason="click_too_early",
            )
    onset_d = onsets.get("D")
    if _before_phase_d(event_timestamp_ms, onsets):
        raise ClickRefused(
            _(
                "event_timestamp_ms=%(event_ms)s is before phase D's onset %(onset_ms)s (phase_onsets_ms.D); "
                "clicks are taken only in phase D."
            )
            % {"event_ms": event_timestamp_ms, "onset_ms": onset_d},
            reason="click_before_phase_d",
            field="event_timestamp_ms",
        )


def _insert_click(*, click: Click, trial_fields: dict) -> int | None:
    """Insert ``click`` unless its key or its trial already has one (``ON CONFLICT DO NOTHING``) and, only
    if it was inserted, write ``trial_fields`` on its trial. Returns the new click's id, or None on a
    conflict. PostgreSQL: one statement (a data-modifying CTE), so one round trip and atomic without a
    transaction block. SQLite (no DML in CTEs): the two statements in one transaction."""
    ops = connection.ops
    fields = [field for field in Click._meta.concrete_fields if not field.primary_key]
    columns = ", ".join(ops.quote_name(field.column) for field in fields)
    values = [field.get_db_prep_save(field.pre_save(click, add=True), connection) for field in fields]
    insert = (
        f"INSERT INTO {ops.quote_name(Click._meta.db_table)} ({columns}) "
        f"VALUES ({', '.join(['%s'] * len(fields))}) ON CONFLICT DO NOTHING"
    )
    trial_meta = Trial._meta
    updates = [(trial_meta.get_field(name), value) for name, value in trial_fields.items()]
    assignments = ", ".join(f"{ops.quote_name(field.column)} = %s" for field, _value in updates)
    update_values = [field.get_db_prep_save(value, connection) for field, value in updates]
    trial_table = ops.quote_name(trial_meta.db_table)
    with prepared_cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"WITH inserted AS ({insert} RETURNING id, trial_id), "
                f"updated AS (UPDATE {trial_table} SET {assignments} FROM inserted "
                f"WHERE {trial_table}.id = inserted.trial_id) SELECT id FROM inserted",
                [*values, *update_values],
            )
            row = cursor.fetchone()
            return row[0] if row else None
        with transaction.atomic():
            cursor.execute(f"{insert} RETURNING id", values)
            row = cursor.fetchone()
            if row is None:
                return None
            cursor.execute(
                f"UPDATE {trial_table} SET {assignments} WHERE id = %s", [*update_values, click.trial_id]
            )
        return row[0]


# C901: the click endpoint's hot path (one statement in the common case on PostgreSQL, no lock): a flat run of refusals and
# the idempotent replay, whose order is the API's contract; left whole rather than spread over helpers.
def click_ingest(  # noqa: C901
    *,
    session_id: int,
    position: int,
    idempotency_key: str,
    x: float,
    y: float,
    shown_width: float,
    shown_height: float,
    pointer_type: str = "",
    reaction_ms: float | None = None,
    event_timestamp_ms: float | None = None,
    phase_onsets_ms: dict | None = None,
    scheduled_onsets_ms: dict | None = None,
    load_wait_ms: float = 0.0,
    blocked_clicks: int = 0,
    flags: list[str] | None = None,
    refresh_hz: float | None = None,
    next_presentation: dict | None = None,
) -> ClickReceipt:
    """Store the one click of the trial at ``position`` of session ``session_id``.

    ``x``/``y``: canonical image pixels (x = column, y = row, floats, origin top-left; Image.width/height
    frame); ``shown_width``/``shown_height``: CSS px of the image as displayed; ``reaction_ms``: phase D onset
    to the click; ``event_timestamp_ms``: the pointer event's timeStamp (performance.now() clock);
    ``phase_onsets_ms``: PRESENTED onsets of phases A-D (the first frame each phase was on screen, same
    clock); ``scheduled_onsets_ms``: the onsets the player scheduled; ``load_wait_ms``: how long the trial
    waited for its pictures before phase A; ``blocked_clicks``: presses during A-C; ``flags``: reasons the
    player thinks the trial is invalid (tab hidden, blur, viewport change); ``refresh_hz``: the client's
    refresh estimate. The trial's flags become the client's flags plus the server's
    (``services.presentations.trial_server_flags``: ``replayed``, ``not_presented``).

    Exactly once per ``idempotency_key`` and one click per trial, through the unique constraints and
    ``INSERT ... ON CONFLICT DO NOTHING``: a retry with the same key answers the stored click with
    created=False. No lock is taken: a finish can only succeed once every trial has its click, and a
    click for a trial that has one conflicts. The common case (a started session, the trial presented and
    its phase D due) is one statement on PostgreSQL: read the session's trials, insert the
    click and update its trial (``_click_in_one_statement``); a retry is the same statement, inserting
    nothing. Every other case, and SQLite, is decided in Python on the rows read, and a click still due is
    inserted by ``_insert_click`` (one more statement).

    ``next_presentation`` ({"position", "presentation_id"}, the next trial's report the click carries): on
    PostgreSQL's common path the same statement records it (``_click_in_one_statement_sql``), and the receipt's
    ``next_presentation`` holds the answer; otherwise that is None and the caller records it
    (``services.presentations.trial_presented_attached``).

    The values are as ``annotation_ui.serializers.ClickIn`` validates them (the one declaration of a click's
    fields: types, ranges, finiteness, lengths); this checks only what the session's rows decide.

    Raises ClickRefused (``reason``: session_closed, session_expired, no_trial, trial_done, key_reused,
    trial_released, click_too_early, click_before_phase_d) and Session.DoesNotExist.
    """
    # The values are the click contract's: ``annotation_ui.serializers.ClickIn`` declared and validated them
    # (types, ranges, finiteness, lengths) before this runs; what is decided here is what the rows decide.
    key = idempotency_key
    values = {
        "x": float(x),
        "y": float(y),
        "shown_width": float(shown_width),
        "shown_height": float(shown_height),
        "reaction_ms": reaction_ms,
        "event_timestamp_ms": event_timestamp_ms,
    }
    onsets = dict(phase_onsets_ms or {})
    scheduled = dict(scheduled_onsets_ms or {})
    wait = float(load_wait_ms or 0.0)
    blocked = int(blocked_clicks or 0)
    clean_flags = sorted(set(flags or ()))
    refresh = refresh_hz

    now = timezone.now()
    if connection.vendor == "postgresql" and not _before_phase_d(values["event_timestamp_ms"], onsets):
        # The common case in one round trip; anything else is decided below on the rows it read.
        carried = None  # the statement never records it on the clicked trial itself
        if next_presentation is not None:
            carried = (next_presentation["position"], next_presentation["presentation_id"])
        rows, click_id, recorded = _click_in_one_statement(
            session_id=session_id,
            position=position,
            now=now,
            click_values={"idempotency_key": key, "pointer_type": pointer_type, "received_at": now, **values},
            trial_fields={
                **_trial_fields(onsets, scheduled, wait, blocked, refresh),
                "flags": sorted(set(clean_flags)),
            },
            carried=carried,
        )
        if click_id is not None:
            trials = _trial_rows(rows)
            trial_id = next(t.pk for t in trials if t.position == position)
            _log_recorded(session_id, trial_id, position, click_id)
            receipt = _receipt(click_id, trial_id, position, trials, created=True)
            if carried is not None and recorded is not None:
                shown = presented_answer(
                    session_id=session_id, trial_id=recorded[0], position=carried[0], shown=recorded[1]
                )
                receipt = dataclasses.replace(receipt, next_presentation=shown)
            return receipt
        session, trials, trial = _session_from_rows(session_id, position, rows)
    else:
        session, trials, trial = _session_trials(session_id, position)
    if trial is not None and trial.click_key == key:
        return _receipt(trial.click_pk, trial.pk, trial.position, trials, created=False)
    if any(t.click_key == key for t in trials):
        raise _key_reused(position)

    if session.status != Session.Status.STARTED:
        raise ClickRefused(
            _("session %(session)s is %(status)s; it takes no more clicks.")
            % {"session": session.pk, "status": session.status},
            reason="session_closed",
        )
    if session.expires_at <= now:
        raise ClickRefused(
            _("session %(session)s expired at %(time)s UTC.")
            % {"session": session.pk, "time": f"{session.expires_at:%H:%M:%S}"},
            reason="session_expired",
        )
    if trial is None:
        raise ClickRefused(
            _("session %(session)s has no trial at position %(position)s.")
            % {"session": session.pk, "position": repr(position)},
            reason="no_trial",
            field="position",
        )
    if trial.click_pk is not None:
        raise ClickRefused(_trial_done_message(position, session.pk), reason="trial_done")
    if not trial.holds_slot:
        # The worker was away past the grace period and the trial's slot was given back: the player reloads,
        # which re-reserves it or gives another image (collector.services.reservations.session_reclaim).
        raise ClickRefused(
            _(
                "You were away for a while, so image %(n)s was given to someone else for now. Reload the page "
                "to continue your batch."
            )
            % {"n": position + 1},
            reason="trial_released",
        )
    _check_click_timing(
        trial=trial,
        study=session.study,
        event_timestamp_ms=values["event_timestamp_ms"],
        onsets=onsets,
        now=now,
    )

    click = Click(trial=trial, idempotency_key=key, pointer_type=pointer_type, **values)
    trial_fields = {
        **_trial_fields(onsets, scheduled, wait, blocked, refresh),
        "flags": sorted(set(clean_flags) | set(trial_server_flags(trial=trial))),
    }
    inserted = _insert_click(click=click, trial_fields=trial_fields)
    if inserted is None:
        # Lost a race: the same key (a concurrent retry, or a key of another session) or another click here.
        winner = Click.objects.filter(idempotency_key=key).select_related("trial").first()
        if winner is None:
            raise ClickRefused(_trial_done_message(position, session.pk), reason="trial_done")
        if winner.trial_id != trial.pk:
            raise _key_reused(position)
        return _receipt(winner.pk, trial.pk, trial.position, trials, created=False)
    _log_recorded(session.pk, trial.pk, position, inserted)
    return _receipt(inserted, trial.pk, trial.position, trials, created=True)


def _trial_fields(onsets: dict, scheduled: dict, wait: float, blocked: int, refresh: float | None) -> dict:
    """What a click writes on its trial, but its flags (the two paths add the server's differently)."""
    return {
        "phase_onsets_ms": onsets,
        "scheduled_onsets_ms": scheduled,
        "load_wait_ms": wait,
        "blocked_clicks": blocked,
        "refresh_hz": refresh,
    }


def _log_recorded(session_id: int, trial_id: int, position: int, click_id: int) -> None:
    logger.info(
        "click recorded",
        extra={"session_id": session_id, "trial_id": trial_id, "position": position, "click_id": click_id},
    )


def _before_phase_d(event_ms: float | None, onsets: dict) -> bool:
    """The click's own timestamp precedes its phase D onset (``_check_click_timing`` refuses it)."""
    onset_d = onsets.get("D")
    return event_ms is not None and onset_d is not None and event_ms < onset_d


def _receipt(
    click_id: int, trial_id: int, position: int, trials: list[_TrialRow], *, created: bool
) -> ClickReceipt:
    missing = [t.position for t in trials if t.click_pk is None and t.pk != trial_id]
    return ClickReceipt(
        click_id=click_id,
        trial_id=trial_id,
        position=position,
        created=created,
        missing_positions=missing,
    )


def _trial_done_message(position: int, session_id: int) -> str:
    return _("trial %(position)s of session %(session)s already has its click.") % {
        "position": position,
        "session": session_id,
    }


def _key_reused(position: int) -> ClickRefused:
    return ClickRefused(
        _("idempotency_key is already used by another trial; send a new key for trial %(position)s.")
        % {"position": position},
        reason="key_reused",
        field="idempotency_key",
    )


def click_record(*, session: Session, **fields) -> tuple[Click, bool]:
    """``click_ingest`` for callers holding a Session that want the Click row: returns (click, created)."""
    receipt = click_ingest(session_id=session.pk, **fields)
    return Click.objects.select_related("trial").get(pk=receipt.click_id), receipt.created


# --------------------------------------------------------------------------------------------------
# problems the player showed the annotator


def session_problem_record(
    *, session: Session, status: int, endpoint: str, message: str, position: int | None = None
) -> None:
    """Keep a refusal the player showed the annotator (a 4xx it stopped retrying): appended to
    ``session.problems`` (the first MAX_PROBLEMS, so a looping client cannot grow the row) and logged with
    the session id, so a researcher or an operator can see why a worker got stuck. ``message`` is the
    server's message as the player showed it, on one line, at most 500 characters."""
    text = " ".join(str(message).split())[:500]
    entry = {
        "at": timezone.now().isoformat(),
        "status": status,
        "endpoint": endpoint,
        "message": text,
        "position": position,
    }
    with transaction.atomic():
        locked = Session.objects.select_for_update(no_key=True).only("id", "problems").get(pk=session.pk)
        problems = list(locked.problems or [])
        if len(problems) < MAX_PROBLEMS:
            locked.problems = [*problems, entry]
            locked.save(update_fields=["problems"])
    logger.warning(
        "annotator shown a refusal",
        extra={
            "session_id": session.pk,
            "study_id": session.study_id,
            "endpoint": endpoint,
            "status": status,
            "position": position,
            "problem": text,
        },
    )


# --------------------------------------------------------------------------------------------------
# finish


def session_missing_positions(*, session: Session) -> list[int]:
    """Positions of the session's trials that have no click yet, ascending."""
    return list(
        Trial.objects.filter(session=session, click__isnull=True)
        .order_by("position")
        .values_list("position", flat=True)
    )


def session_finish(*, session_id: int) -> Session:
    """Finish the session once every trial has its click: status finished, completion code, and
    ``tasks.validation.validate_session`` sent after commit. Idempotent: finishing again returns the same
    session and code without sending the task again.

    Raises SessionFinishRefused (with ``missing_positions``) while clicks are missing, or (without them)
    when the session expired.

    PostgreSQL, the common case (a started session holding every click): ``_finish_prepared``, two prepared
    statements and no transaction block; every other case (a retry, a refusal) is decided below.
    """
    if connection.vendor == "postgresql":
        finished = _finish_prepared(session_id=session_id)
        if finished is not None:
            return finished
    with transaction.atomic():
        # the study joined (not locked): the finish step's payload needs its platform
        session = (
            Session.objects.select_for_update(no_key=True, of=("self",))
            .select_related("study")
            .get(pk=session_id)
        )
        if session.status == Session.Status.FINISHED:
            return session
        if session.status != Session.Status.STARTED:
            raise SessionFinishRefused(
                _(
                    "session %(session)s is %(status)s; it can no longer be finished. "
                    "Open the task again to get a new batch."
                )
                % {"session": session.pk, "status": session.status}
            )
        missing = session_missing_positions(session=session)
        if missing and session.expires_at <= timezone.now():
            # No click can be added any more, so asking the browser to replay trials would loop.
            raise SessionFinishRefused(
                _(
                    "session %(session)s expired at %(time)s UTC before all clicks arrived; "
                    "open the task again to get a new batch."
                )
                % {"session": session.pk, "time": f"{session.expires_at:%H:%M:%S}"}
            )
        if missing:
            raise SessionFinishRefused(
                _("session %(session)s still lacks clicks for trial(s) %(positions)s.")
                % {"session": session.pk, "positions": ", ".join(map(str, missing))},
                missing_positions=missing,
            )
        session.status = Session.Status.FINISHED
        session.finished_at = timezone.now()
        session.completion_code = completion_code_make(
            session_id=session.pk, assignment_id=session.platform_assignment_id
        )
        session.save(update_fields=["status", "finished_at", "completion_code"])
        task_intent_add(name=task_names.VALIDATION_VALIDATE_SESSION, args=[session_id])
    logger.info("session finished", extra={"session_id": session.pk, "study_id": session.study_id})
    return session


#: What ``_finish_prepared`` reads and answers: the finish step's payload needs no more (the platform
#: adapters' ``finish_action``); any other field of the session answered loads when asked.
_FINISH_SESSION_FIELDS = ("id", "status", "platform_assignment_id", "platform_state", "study_id")
_FINISH_STUDY_FIELDS = ("id", "platform", "platform_config")


@functools.cache
def _finish_sql() -> tuple[str, str]:
    """PostgreSQL: the two statements of ``_finish_prepared`` (built once from the models' metadata)."""
    quote = connection.ops.quote_name
    session, study, trial, click = Session._meta, Study._meta, Trial._meta, Click._meta

    read = (
        f"SELECT {', '.join(f's.{column(session, name)}' for name in _FINISH_SESSION_FIELDS)}, "
        f"{', '.join(f'st.{column(study, name)}' for name in _FINISH_STUDY_FIELDS)} "
        f"FROM {quote(session.db_table)} s JOIN {quote(study.db_table)} st "
        f"ON st.{column(study, 'id')} = s.{column(session, 'study')} WHERE s.{column(session, 'id')} = %(session)s"
    )
    missing = (
        f"SELECT 1 FROM {quote(trial.db_table)} t WHERE t.{column(trial, 'session')} = %(session)s "
        f"AND NOT EXISTS (SELECT 1 FROM {quote(click.db_table)} c "
        f"WHERE c.{column(click, 'trial')} = t.{column(trial, 'id')})"
    )
    finish = (
        f"WITH done AS (UPDATE {quote(session.db_table)} SET {column(session, 'status')} = %(finished)s, "
        f"{column(session, 'finished_at')} = %(now)s, {column(session, 'completion_code')} = %(code)s "
        f"WHERE {column(session, 'id')} = %(session)s AND {column(session, 'status')} = %(started)s "
        f"AND {column(session, 'platform_assignment_id')} = %(assignment)s AND NOT EXISTS ({missing}) "
        f"RETURNING {column(session, 'id')}), "
        f"intent AS ({task_intent_insert_sql(source='done')}) "
        f"SELECT (SELECT {quote(TaskIntent._meta.pk.column)} FROM intent)"
    )  # fmt: skip
    return read, finish


def _finish_prepared(*, session_id: int) -> Session | None:
    """PostgreSQL, ``session_finish``'s common case in two prepared statements: read the session and its
    study's platform (no lock), then, with the completion code made from what was read, one statement that
    finishes the session only if it is still started and no trial lacks its click, and inserts the
    validation intent beside it (``task_intent_insert_sql``). The session answered carries the fields the
    finish step's payload needs (``_FINISH_SESSION_FIELDS``, its study's ``_FINISH_STUDY_FIELDS``; the rest
    load when asked). None when the session is missing, not started, or lacks a click: nothing was written,
    and ``session_finish``'s locked path answers (the same session again, or its refusal)."""
    read_sql, finish_sql = _finish_sql()
    with prepared_cursor() as cursor:
        cursor.execute(read_sql, {"session": session_id})
        row = cursor.fetchone()
        if row is None:
            return None
        n_session = len(_FINISH_SESSION_FIELDS)
        read = dict(zip(_FINISH_SESSION_FIELDS, row[:n_session], strict=True))
        study_read = dict(zip(_FINISH_STUDY_FIELDS, row[n_session:], strict=True))
        if read["status"] != Session.Status.STARTED:
            return None
        now = timezone.now()
        code = completion_code_make(session_id=session_id, assignment_id=read["platform_assignment_id"])
        args = [session_id]
        cursor.execute(
            finish_sql,
            {
                "session": session_id,
                "finished": Session.Status.FINISHED.value,
                "started": Session.Status.STARTED.value,
                "now": now,
                "code": code,
                "assignment": read["platform_assignment_id"],
                **task_intent_insert_params(name=task_names.VALIDATION_VALIDATE_SESSION, args=args, now=now),
            },
        )
        intent_id = cursor.fetchone()[0]
    if intent_id is None:
        return None
    task_intent_send_after_commit(intent_id=intent_id, name=task_names.VALIDATION_VALIDATE_SESSION, args=args)
    for values, model, name in ((read, Session, "platform_state"), (study_read, Study, "platform_config")):
        values[name] = model._meta.get_field(name).from_db_value(values[name], None, connection)
    session = _loaded(
        Session,
        {**read, "status": Session.Status.FINISHED.value, "finished_at": now, "completion_code": code},
    )
    session.study = _loaded(Study, study_read)
    logger.info("session finished", extra={"session_id": session.pk, "study_id": session.study_id})
    return session


def _loaded(model, values: dict):
    """An instance of ``model`` as the ORM loads one with ``only(*values)`` (``values`` by attname, as the
    database gave them after the fields' conversion): the other fields are deferred, loaded when asked."""
    names = [field.attname for field in model._meta.concrete_fields if field.attname in values]
    return model.from_db(connection.alias, names, [values[name] for name in names])
