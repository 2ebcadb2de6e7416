"""Django's PostgreSQL backend with a health check that costs no round trip.

``CONN_HEALTH_CHECKS`` makes Django check a persistent connection before its first use in each request; the
stock check sends ``SELECT 1``, one more round trip to the server per request (on the click endpoint, a third
of its statements). A server that ends a connection (a restart, ``pg_terminate_backend``, an idle timeout)
writes its error message and closes the socket, so the client's socket turns readable. Here an idle connection
whose socket has nothing to read is usable without asking the server; when there is something to read, the
transaction status is not idle, or the socket cannot be polled, the stock ``SELECT 1`` decides. A peer that
vanished without closing (a cut cable) is found by neither check until TCP gives up: the first statement then
fails and ``config.unavailable`` answers 503 with Retry-After.
"""

from __future__ import annotations

import select

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


class DatabaseWrapper(base.DatabaseWrapper):
    def is_usable(self):
        if self.connection is not None and socket_quiet(self.connection):
            return True
        return super().is_usable()
