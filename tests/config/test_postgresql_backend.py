"""config.postgresql: the persistent connection's health check asks the socket, not the server. A healthy
idle connection is checked without a statement (the stock check sent ``SELECT 1``, one more round trip per
request); a connection the server ended (what a restart does to each) is found and replaced."""

from __future__ import annotations

import socket
import threading
import time
import uuid

import pytest
from django.db import OperationalError, connection, connections


def _other_connection_query(sql: str, params: list) -> list[tuple]:
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()
    finally:
        other.close()


def _needs_postgresql() -> None:
    if connection.vendor != "postgresql":
        pytest.fail(
            "this test needs PostgreSQL (it reads and ends the test's server connection): run it with "
            "DATABASE_URL=postgres://postgres@127.0.0.1:5432/<db>, as `make test-services` does."
        )


def _health_check() -> None:
    """What Django does before the first statement of a request (CONN_HEALTH_CHECKS)."""
    connection.health_check_done = False
    connection.close_if_health_check_failed()


@pytest.mark.one_backend
@pytest.mark.django_db(transaction=True)
def test_the_health_check_sends_no_statement_and_replaces_a_connection_the_server_ended():
    _needs_postgresql()
    assert connection.settings_dict["CONN_HEALTH_CHECKS"] is True
    marker = f"SELECT 'marker-{uuid.uuid4().hex}'"
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
        cursor.execute(marker)
    raw = connection.connection

    _health_check()
    assert connection.connection is raw, "a healthy connection was replaced"
    # pg_stat_activity.query is the backend's last statement: the stock check would have made it SELECT 1
    last = _other_connection_query("SELECT query FROM pg_stat_activity WHERE pid = %s", [pid])
    assert last == [(marker,)], f"the health check sent a statement: {last}"

    _other_connection_query("SELECT pg_terminate_backend(%s)", [pid])
    deadline = time.monotonic() + 10
    while _other_connection_query("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]):
        assert time.monotonic() < deadline, f"backend {pid} still listed 10 s after pg_terminate_backend"
        time.sleep(0.05)

    _health_check()
    assert connection.connection is None, "a connection the server ended passed the health check"
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        assert cursor.fetchone()[0] != pid


@pytest.mark.one_backend
@pytest.mark.django_db(transaction=True)
def test_the_health_check_inside_a_transaction_falls_back_to_the_stock_statement():
    _needs_postgresql()
    from django.db import transaction

    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            pid = cursor.fetchone()[0]
        assert connection.is_usable()
        last = _other_connection_query("SELECT query FROM pg_stat_activity WHERE pid = %s", [pid])
        assert last == [("SELECT 1",)], last


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _listen_later(port: int, delay_s: float, target: tuple[str, int]) -> threading.Thread:
    """After ``delay_s`` (connections to ``port`` refused until then, as during a restart), accept one
    connection on ``port`` and relay its bytes to ``target``, the real server, both ways."""

    def pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                end.close()

    def run() -> None:
        time.sleep(delay_s)
        with socket.socket() as listener:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", port))
            listener.listen()
            listener.settimeout(10)
            try:
                inbound, _ = listener.accept()
            except OSError:
                return
            outbound = socket.create_connection(target)
            threading.Thread(target=pump, args=(outbound, inbound), daemon=True).start()
            pump(inbound, outbound)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _wrapper_at(**changes):
    """A new connection object for the test database with ``changes`` to its settings (the shared ones stay)."""
    return type(connections["default"])({**connection.settings_dict, **changes}, alias="default")


@pytest.mark.one_backend
@pytest.mark.django_db(transaction=True)
def test_a_new_connection_refused_for_a_moment_waits_and_anything_else_fails_at_once(settings):
    """A restart refuses connections for about a second: the request waits for the server instead of answering
    503. A refusal that lasts, a wrong database name, fail as before (the wait is bounded, names are not
    retried)."""
    _needs_postgresql()
    settings.DB_CONNECT_WAIT_S = 5.0
    port = _free_port()
    target = (connection.settings_dict["HOST"] or "127.0.0.1", int(connection.settings_dict["PORT"] or 5432))
    relay = _listen_later(port, 0.6, target)
    waiting = _wrapper_at(PORT=str(port))
    started = time.monotonic()
    try:
        with waiting.cursor() as cursor:
            cursor.execute("SELECT 41 + 1")
            assert cursor.fetchone() == (42,)
    finally:
        waiting.close()
    assert 0.5 <= time.monotonic() - started < 5.0
    relay.join(timeout=5)

    settings.DB_CONNECT_WAIT_S = 0.4  # nothing ever listens: the error once the wait is over
    started = time.monotonic()
    with pytest.raises(OperationalError, match="Connection refused"):
        _wrapper_at(PORT=str(_free_port())).ensure_connection()
    assert 0.3 <= time.monotonic() - started < 3.0

    settings.DB_CONNECT_WAIT_S = 5.0  # a database that does not exist is not a moment's refusal
    started = time.monotonic()
    with pytest.raises(OperationalError, match="does not exist"):
        _wrapper_at(NAME=f"no_such_database_{uuid.uuid4().hex[:8]}").ensure_connection()
    assert time.monotonic() - started < 1.0


def test_which_connection_errors_are_a_moments_refusal():
    import psycopg

    from config.postgresql.base import refused_for_now

    assert refused_for_now(psycopg.errors.CannotConnectNow("the database system is starting up"))
    assert refused_for_now(
        psycopg.OperationalError('connection to server at "127.0.0.1", port 1 failed: Connection refused')
    )
    assert not refused_for_now(psycopg.OperationalError('FATAL:  database "x" does not exist'))
    assert not refused_for_now(
        psycopg.OperationalError('FATAL:  password authentication failed for user "a"')
    )
    assert not refused_for_now(ValueError("Connection refused"))
