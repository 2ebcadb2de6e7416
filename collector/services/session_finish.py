"""Finishing a batch: once the server holds every click, the session closes with its completion code and its
validation is enqueued after commit (on PostgreSQL, the common case in two prepared statements)."""

from __future__ import annotations

import functools
import logging

from django.db import connection, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from collector.models import Click, Session, Study, TaskIntent, Trial
from collector.services.codes import completion_code_make
from collector.services.outbox import (
    task_intent_add,
    task_intent_insert_params,
    task_intent_insert_sql,
    task_intent_send_after_commit,
)
from collector.services.prepared import column, prepared_cursor
from tasks import names as task_names

logger = logging.getLogger(__name__)


class SessionFinishRefused(Exception):
    """The session cannot be finished yet; ``missing_positions`` lists trials still without a click."""

    def __init__(self, message: str, *, missing_positions: list[int] | None = None):
        super().__init__(message)
        self.missing_positions = missing_positions or []


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
