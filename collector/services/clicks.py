"""Clicks: recording the one click of a trial exactly once, with the server-side timing rules.

``click_ingest`` stores the one click of a trial (one statement on PostgreSQL in the common case, no lock;
``click_record`` wraps it for callers that want the Click row), keyed by a client idempotency key so retried
uploads never store a click twice, and answers a ``ClickReceipt``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from django.db import connection, models, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from collector.models import Click, DisplayMode, Session, Study, Trial
from collector.services.prepared import column, in_model_order, prepared_cursor
from collector.services.presentations import (
    MAX_PRESENTATIONS,
    REPLAY_FLAG,
    presentation_append_sql,
    presented_answer,
    trial_server_flags,
)

logger = logging.getLogger(__name__)


#: A click may arrive this much sooner than phases A + B + C after the trial's ``presented`` report
#: (timer and frame granularity, and the report's own time on the wire).
CLICK_EARLY_TOLERANCE_MS = 250


class ClickRefused(Exception):
    """The click cannot be stored; the message names the field or state at fault, ``field`` the field (or
    None for a state), ``reason`` is a machine-readable code. The player shows the message to the worker:
    refusals of a state (any ``reason`` but ``invalid``) are translated; ``invalid`` ones answer a client
    that broke the API's contract and stay in English, like the parser's and the serializers' messages."""

    def __init__(self, message: str, *, reason: str = "invalid", field: str | None = None):
        super().__init__(message)
        self.reason = reason
        self.field = field


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


_HOT_TRIAL_FIELDS = in_model_order(Trial, ("id", "session_id", "position", "presentations", "holds_slot"))
_HOT_SESSION_FIELDS = in_model_order(Session, ("id", "status", "expires_at", "study_id"))
_HOT_STUDY_FIELDS = in_model_order(
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
