"""A cursor for the hot paths' hand-written statements that PostgreSQL plans once per connection.

The click request runs one statement in the common case (``services.clicks``: read the session's trials,
insert the click and update its trial), and the presented report one UPDATE. Planning cost PostgreSQL more
than running: EXPLAIN ANALYZE of the trials read alone gave 1.7 ms planning against 0.25 ms execution, so
(with the then separate insert) about 2.5 ms of database CPU per click went to plans that never change. A
session start's row locks and reads (``services.session_start``, ``services.allocation``) use it too.
``prepared_cursor()`` gives a cursor whose ``execute`` prepares the statement on the server (psycopg's
``prepare=True``, server-side parameters) the first time a connection sees it and reuses it after;
Django's own cursors keep client-side binding and no preparation (its default, chosen for connection poolers).

What it keeps from ``connection.cursor()``: the health check of a reused connection, opening it, Django's
error translation (``OperationalError`` and friends, which ``config.unavailable`` turns into a 503) and the
query log of a debug cursor (tests count queries through it). Prepared statements live in the server
session: behind PgBouncer, use session pooling or PgBouncer >= 1.21 with ``max_prepared_statements`` set
(docs/architecture.md, "Database"). SQLite has no prepared statements to keep: it gets Django's cursor.
"""

from __future__ import annotations

import functools

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.utils import CursorWrapper

_NEVER_BY_COUNT = 2**62


@functools.cache
def _preparing_cursor_class():
    """Django's server-binding psycopg cursor, preparing every statement it executes (imported on first use:
    only PostgreSQL needs psycopg's classes)."""
    from django.db.backends.postgresql.base import ServerBindingCursor

    class PreparingCursor(ServerBindingCursor):
        def execute(self, query, params=None, *, prepare=None, binary=None):
            return super().execute(query, params, prepare=True if prepare is None else prepare, binary=binary)

        def _send_query_prepared(self, name, pgq, *, binary=None):
            # Django's query log (a debug cursor) reads the statement from _query, which psycopg sets only
            # for statements it does not prepare.
            self._query = pgq
            super()._send_query_prepared(name, pgq, binary=binary)

    return PreparingCursor


def column(meta, name: str) -> str:
    """The quoted column of field ``name`` of the model whose ``_meta`` is ``meta``, for the hand-written
    statements (built from the models' metadata, so a renamed column follows)."""
    return connections[DEFAULT_DB_ALIAS].ops.quote_name(meta.get_field(name).column)


def in_model_order(model, attnames: tuple[str, ...]) -> tuple[str, ...]:
    """``attnames`` in the order of the model's concrete fields, the order ``Model.from_db`` expects (the
    hand-written reads build their rows' instances with it)."""
    order = [field.attname for field in model._meta.concrete_fields]
    return tuple(sorted(attnames, key=order.index))


def prepared_cursor() -> CursorWrapper:
    """A Django cursor wrapper (use it as a context manager) whose statements are prepared on PostgreSQL."""
    # The thread's wrapper itself: each attribute of the ``connection`` proxy is a context-local lookup (about
    # 5 % of the web process's time under the load suite, most of it here).
    db = connections[DEFAULT_DB_ALIAS]
    if db.vendor != "postgresql":
        return db.cursor()
    # What connection.cursor() does (BaseDatabaseWrapper._cursor), with our cursor class.
    db.close_if_health_check_failed()
    db.ensure_connection()
    raw = db.connection
    if raw.prepare_threshold is None:
        # Django opens connections with prepare_threshold=None, which makes psycopg ignore prepare=True.
        # A threshold no other cursor reaches: only this cursor's explicit prepare=True prepares (Django's
        # default client-binding cursors never prepare, whatever the threshold).
        raw.prepare_threshold = _NEVER_BY_COUNT
    with db.wrap_database_errors:
        return db._prepare_cursor(_preparing_cursor_class()(raw))
