"""config.postgresql: the persistent connection's health check asks the socket, not the server. A healthy
idle connection is checked without a statement (the stock check sent ``SELECT 1``, one more round trip per
request); a connection the server ended (what a restart does to each) is found and replaced."""

from __future__ import annotations

import time
import uuid

import pytest
from django.db import connection, connections


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
