"""Trial presentations: the server learns when the player shows a trial, so replays are flagged and a
batch finished elsewhere is not played again.

The player reports each trial just before its phase A starts (wire format below). The server keeps the
report on the trial (``Trial.presentations``, idempotent per ``presentation_id``), and

* refuses it (HTTP 409) when the batch cannot take work any more: the session is finished (e.g. in
  another tab or window), expired, or the trial already has its click (clicked in another tab), or its
  slot was given back while the worker was away (``trial_released``: the player reloads, which
  re-reserves it, ``collector.services.reservations.session_reclaim``). The
  player then stops and shows the refusal instead of replaying the trial;
* flags the trial ``replayed`` when it is presented a second time (a reload in phase B, a second tab
  showing the same trial): the worker has seen the target before the timed sequence, so the click
  cannot be trusted and the validation judges the trial invalid (``trial_flagged``), like a trial the
  player flagged itself (tab hidden, focus lost).

Rules for other code (one place, so the click and finish endpoints and the player apply the same ones):
:func:`session_work_check` says whether a session still takes work; :func:`trial_server_flags` gives the
flags the server holds for a trial, which the click path must keep when it stores the client's flags.

Wire format (``annotation_ui.api.Presented``; every 4xx body is the error envelope of ``config.api_errors``)::

    POST /api/annotator/<session token>/presented
    {"position": 3, "presentation_id": "<client uuid, 1-64 chars>"}

    200 {"ok": true, "position": 3, "presentations": 1, "replayed": false}
    409 {"code": "session_finished" | "session_expired" | "trial_done" | "trial_released",
         "message": "<message for the worker>",
         "field": null, "position": 3}
    400 {"code": "invalid", "message": "<what is malformed, or no trial at that position>", "field": ...}
    404 bad token

Send it once per showing (a new ``presentation_id`` after a reload; the same one on a network retry).

The report of the trial after a click can ride on that click instead (``trial_presented_attached``)::

    POST /api/annotator/<session token>/click
    {..., "next_presentation": {"position": 4, "presentation_id": "<client uuid>"}}

    201 {"ok": true, "created": true, "position": 3, "missing": [...],
         "next_presentation": {"ok": true, "position": 4, "presentations": 1, "replayed": false}}
    (or "next_presentation": {"ok": false, "position": 4, "code": "trial_done", "message": "..."})
"""

from __future__ import annotations

import functools
import json
import logging

from django.db import connection, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from collector.models import Click, Session, Trial
from collector.services.prepared import column, prepared_cursor

logger = logging.getLogger(__name__)

REPLAY_FLAG = "replayed"
NOT_PRESENTED_FLAG = "not_presented"
MAX_PRESENTATIONS = 20
MAX_PRESENTATION_ID = 64


class PresentationRefused(Exception):
    """The trial must not be shown; ``reason`` is a machine-readable code, the message is for the worker."""

    def __init__(self, message: str, *, reason: str):
        super().__init__(message)
        self.reason = reason


def session_work_check(*, session: Session, now=None) -> None:
    """Raise PresentationRefused unless ``session`` still takes work (running and not expired).

    The rule a second tab replaying a finished batch hits; call it with the session row locked when the
    answer must hold until commit."""
    now = now or timezone.now()
    if session.status == Session.Status.FINISHED:
        raise PresentationRefused(
            _(
                "This batch is already finished (perhaps in another tab or window). Thank you! Nothing more to "
                "do here."
            ),
            reason="session_finished",
        )
    if session.status == Session.Status.EXPIRED or session.expires_at <= now:
        raise PresentationRefused(
            _("This batch expired before it was finished. Open the task again to get a new batch."),
            reason="session_expired",
        )


def _released_message() -> str:
    return _(
        "You were away for a while, so this image was given to someone else for now. Reload the page to "
        "continue your batch."
    )


def trial_server_flags(*, trial: Trial) -> list[str]:
    """Flags the server holds for ``trial`` whatever the client reports: ``replayed`` once it was
    presented more than once, ``not_presented`` while it was never reported as presented (an old client, or
    a click sent by hand: kept, but judged invalid). The click path stores
    ``sorted(set(client_flags) | set(these))``."""
    shown = len(trial.presentations or [])
    if shown == 0:
        return [NOT_PRESENTED_FLAG]
    return [REPLAY_FLAG] if shown > 1 else []


def trial_presented_record(*, session_id: int, position: int, presentation_id: str) -> dict:
    """Record that the player is about to show the trial at ``position`` of session ``session_id``; see the
    module docstring.

    Returns ``{"position", "presentations", "replayed"}``. Raises PresentationRefused (session finished
    or expired, trial already clicked), ValueError for a malformed ``presentation_id`` / unknown position
    (the message names it), Session.DoesNotExist.

    The common case (a running session, a trial without a click, a new presentation id) is one prepared
    UPDATE on PostgreSQL (``_record_new_presentation``); everything else, and SQLite, takes the locked
    path below, which gives the precise refusal or the idempotent answer to a retried report."""
    key = str(presentation_id or "").strip()
    if not key or len(key) > MAX_PRESENTATION_ID:
        raise ValueError(
            f"presentation_id must be 1-{MAX_PRESENTATION_ID} characters; got {presentation_id!r}."
        )
    if connection.vendor == "postgresql":
        recorded = _record_new_presentation(session_id=session_id, position=position, key=key)
        if recorded is not None:
            trial_id, count = recorded
            return _presented(session_id=session_id, trial_id=trial_id, position=position, shown=count)
    with transaction.atomic():
        locked = Session.objects.select_for_update(no_key=True).get(pk=session_id)
        session_work_check(session=locked)
        trial = (
            Trial.objects.select_for_update(no_key=True, of=("self",))
            .select_related("click")
            .filter(session=locked, position=position)
            .first()
        )
        if trial is None:
            raise ValueError(f"session {locked.pk} has no trial at position {position!r}.")
        if hasattr(trial, "click"):
            raise PresentationRefused(
                _("This image was already answered (perhaps in another tab or window); continue there."),
                reason="trial_done",
            )
        if not trial.holds_slot:
            raise PresentationRefused(_released_message(), reason="trial_released")
        shown = list(trial.presentations or [])
        if not any(entry.get("id") == key for entry in shown) and len(shown) < MAX_PRESENTATIONS:
            shown.append({"id": key, "at": timezone.now().isoformat()})
            trial.presentations = shown
            fields = ["presentations"]
            server_flags = trial_server_flags(trial=trial)
            if server_flags and not set(server_flags) <= set(trial.flags or []):
                trial.flags = sorted(set(trial.flags or []) | set(server_flags))
                fields.append("flags")
            trial.save(update_fields=fields)
    return _presented(session_id=session_id, trial_id=trial.pk, position=position, shown=len(shown))


def trial_presented_attached(*, session_id: int, position: int, presentation_id: str) -> dict:
    """The showing a click carries for the batch's next trial (its ``next_presentation``, wire format in the
    module docstring), recorded as :func:`trial_presented_record` records a report of its own. Returns the
    click answer's ``next_presentation`` object: ``{"ok": true, "position", "presentations", "replayed"}``, or ``{"ok":
    false, "position", "code", "message"}`` when the report is refused (``code`` as the 409 of ``presented``:
    ``session_finished``, ``session_expired``, ``trial_done``) or names no trial (``invalid``). A refused
    showing never changes the click's own answer: the click is stored before it.

    Why: a player reports each trial just before its phase A, and the next trial starts the moment the
    previous one is clicked. Carried on that click, the report costs no request of its own; per trial the
    player then sends one request instead of two. A player that cannot carry it (the first trial, a click
    queued behind an unanswered one, no answer in time) sends ``presented`` itself with the same
    ``presentation_id``, which counts once."""
    try:
        return {"ok": True, **trial_presented_record(session_id=session_id, position=position,
                                                     presentation_id=presentation_id)}  # fmt: skip
    except PresentationRefused as exc:
        return {"ok": False, "position": position, "code": exc.reason, "message": str(exc)}
    except ValueError as exc:
        return {"ok": False, "position": position, "code": "invalid", "message": str(exc)}


def _presented(*, session_id: int, trial_id: int, position: int, shown: int) -> dict:
    replayed = shown > 1
    if replayed:
        logger.info(
            "trial replayed", extra={"session_id": session_id, "trial_id": trial_id, "presentations": shown}
        )
    return {"position": position, "presentations": shown, "replayed": replayed}


def _record_new_presentation(*, session_id: int, position: int, key: str) -> tuple[int, int] | None:
    """PostgreSQL: append presentation ``key`` to the trial at ``position`` in one statement, under exactly
    the conditions the locked path appends it (the session neither finished nor expired, the trial without a
    click, ``key`` not there yet, fewer than MAX_PRESENTATIONS), adding the ``replayed`` flag the way
    ``trial_server_flags`` and the locked path do (sorted, by code point). Returns (trial id, presentations
    now), or None when the statement changed nothing: then the locked path decides. The UPDATE locks only the
    trial row; a finish racing it cannot lose anything, as finishing needs every trial's click and a trial
    with a click is never updated here."""
    now = timezone.now()
    params = {
        "key": key,
        "at": now.isoformat(),
        "session": session_id,
        "position": position,
        "finished": Session.Status.FINISHED.value,
        "expired": Session.Status.EXPIRED.value,
        "now": now,
        "most": MAX_PRESENTATIONS,
    }
    with prepared_cursor() as cursor:
        cursor.execute(_new_presentation_sql(), params)
        row = cursor.fetchone()
    return (row[0], row[1]) if row else None


def presentation_append_sql(*, key: str, at: str) -> tuple[str, str, str]:
    """PostgreSQL: the parts of an UPDATE of trial ``t`` (the alias) that appends the presentation whose id
    and time are the named parameters ``key`` and ``at``, as the locked path appends it: (SET clause, the
    row's own conditions: fewer than MAX_PRESENTATIONS (parameter ``most``) and ``key`` not there yet,
    RETURNING list: the trial's id and its presentations now). The session's conditions and the trial's
    click are the caller's. Shared by ``_record_new_presentation`` and the click statement that carries the
    next trial's report (``services.clicks``)."""
    trial = Trial._meta
    shown = f"COALESCE(t.{column(trial, 'presentations')}, '[]'::jsonb)"
    flags = f"COALESCE(t.{column(trial, 'flags')}, '[]'::jsonb)"
    replay = json.dumps([REPLAY_FLAG])
    assignments = (
        f"{column(trial, 'presentations')} = {shown} || jsonb_build_array(jsonb_build_object("
        f"'id', %({key})s::text, 'at', %({at})s::text)), "
        f"{column(trial, 'flags')} = CASE WHEN jsonb_array_length({shown}) >= 1 AND NOT {flags} @> '{replay}'::jsonb "
        f"THEN (SELECT jsonb_agg(flag ORDER BY flag COLLATE \"C\") FROM (SELECT DISTINCT "
        f"jsonb_array_elements_text({flags} || '{replay}'::jsonb) AS flag) AS merged) "
        f"ELSE t.{column(trial, 'flags')} END"
    )  # fmt: skip
    conditions = (
        f"t.{column(trial, 'holds_slot')} AND jsonb_array_length({shown}) < %(most)s "
        f"AND NOT {shown} @> jsonb_build_array(jsonb_build_object('id', %({key})s::text))"
    )
    returning = f"t.{column(trial, 'id')}, jsonb_array_length(t.{column(trial, 'presentations')})"
    return assignments, conditions, returning


def presented_answer(*, session_id: int, trial_id: int, position: int, shown: int) -> dict:
    """The ``next_presentation`` answer of a showing recorded with ``shown`` presentations now (the click
    statement's, as ``trial_presented_attached`` would give it)."""
    return {
        "ok": True,
        **_presented(session_id=session_id, trial_id=trial_id, position=position, shown=shown),
    }


@functools.cache
def _new_presentation_sql() -> str:
    """The statement of ``_record_new_presentation`` (PostgreSQL), built once from the models' metadata."""
    trial, session, click = (model._meta for model in (Trial, Session, Click))
    quote = connection.ops.quote_name

    assignments, conditions, returning = presentation_append_sql(key="key", at="at")
    return (
        f"UPDATE {quote(trial.db_table)} AS t SET {assignments} "
        f"FROM {quote(session.db_table)} AS s "
        f"WHERE t.{column(trial, 'session')} = %(session)s AND t.{column(trial, 'position')} = %(position)s "
        f"AND s.{column(session, 'id')} = t.{column(trial, 'session')} "
        f"AND s.{column(session, 'status')} NOT IN (%(finished)s, %(expired)s) "
        f"AND s.{column(session, 'expires_at')} > %(now)s "
        f"AND NOT EXISTS (SELECT 1 FROM {quote(click.db_table)} AS c "
        f"WHERE c.{column(click, 'trial')} = t.{column(trial, 'id')}) "
        f"AND {conditions} "
        f"RETURNING {returning}"
    )  # fmt: skip
