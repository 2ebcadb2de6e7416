"""Django's PostgreSQL backend with a health check that costs no round trip.

``CONN_HEALTH_CHECKS`` makes Django check a persistent connection before its first use in each request; the
stock check sends ``SELECT 1``, one more round trip to the server per request (on the click endpoint, a third
of its statements). A server that ends a connection (a restart, ``pg_terminate_backend``, an idle timeout)
writes its error message and closes the socket, so the client's socket turns readable. Here an idle connection
whose socket has nothing to read is usable without asking the server; when there is something to read, the
transaction status is not idle, or the socket cannot be polled, the stock ``SELECT 1`` decides. A peer that
vanished without closing (a cut cable) is found by neither check until TCP gives up: the first statement then
fails, and ``config.unavailable`` runs a request that is safe to repeat once more on a new connection or
answers 503 with Retry-After.

A new connection that the server refuses for a moment (nothing listening during a restart, or "the database
system is starting up / shutting down", SQLSTATE 57P03) is tried again every 100 ms for up to
``DB_CONNECT_WAIT_S`` seconds (``CLICKLAB_DB_CONNECT_WAIT_S``, default 5) before the error goes up: a
request that opens a connection while PostgreSQL restarts waits rather than answering 503. A statement
already running when the server goes down still fails; ``config.unavailable`` then runs the request once
more (a GET, the annotator's click, presented, finish and client reports, the link entry: safe to repeat),
and that second run's new connection waits here; any other request gets a 503 with Retry-After. Other
failures (a wrong password, an unknown database, a host that cannot be resolved) go up at once.
"""

from __future__ import annotations

import select
import time

import psycopg
from django.conf import settings
from django.db.backends.postgresql import base
from psycopg import pq

_READY = select.POLLIN | select.POLLPRI | select.POLLERR | select.POLLHUP


def socket_quiet(connection) -> bool:
    """True when psycopg ``connection`` is open, idle outside a transaction, and its socket has nothing
    from the server to read (no termination notice, no end of file)."""
    if connection.closed or connection.broken:
        return False
    pgconn = connection.pgconn
    if pgconn.transaction_status != pq.TransactionStatus.IDLE:
        return False
    try:
        poller = select.poll()
        poller.register(pgconn.socket, _READY)
        return not poller.poll(0)
    except (OSError, ValueError, RuntimeError, AttributeError):
        return False


#: SQLSTATE of "the database system is starting up / shutting down / in recovery mode" (cannot_connect_now)
CANNOT_CONNECT_NOW = "57P03"
CONNECT_RETRY_EVERY_S = 0.1


def refused_for_now(error: Exception) -> bool:
    """True for a connection attempt the server turned away for the moment: nothing listening (connection
    refused) or SQLSTATE 57P03. False for anything that waiting does not mend."""
    if not isinstance(error, psycopg.OperationalError):
        return False
    if getattr(error, "sqlstate", None) == CANNOT_CONNECT_NOW:
        return True
    text = str(error)
    return "Connection refused" in text or "the database system is" in text


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params):
        deadline = time.monotonic() + float(getattr(settings, "DB_CONNECT_WAIT_S", 0.0))
        while True:
            try:
                return super().get_new_connection(conn_params)
            except psycopg.OperationalError as error:
                if not refused_for_now(error) or time.monotonic() + CONNECT_RETRY_EVERY_S > deadline:
                    raise
            time.sleep(CONNECT_RETRY_EVERY_S)

    def is_usable(self):
        if self.connection is not None and socket_quiet(self.connection):
            return True
        return super().is_usable()
