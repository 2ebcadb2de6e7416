"""config/gunicorn.py as the production server runs it: every worker listens on a socket of its own, so new
connections are spread over the workers, and a second server on a taken address refuses to start."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.support.broker import closed_port

PROJECT_ROOT = Path(__file__).resolve().parents[2]
WORKERS = 3


def _gunicorn(port: int, *extra: str) -> subprocess.Popen:
    # the configuration loads the project's settings (its logging); the test application needs no database
    env = {
        key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "CELERY_BROKER_URL")
    }
    return subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", str(PROJECT_ROOT / "config" / "gunicorn.py"),
         "tests.support.pid_app:application", "--bind", f"127.0.0.1:{port}", "--worker-class", "gthread",
         "--threads", "2", "--keep-alive", "30", *extra],
        cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def _listeners(port: int) -> int:
    """LISTEN sockets on 127.0.0.1:``port`` (/proc/net/tcp: local address in hex, state 0A)."""
    wanted = f"0100007F:{port:04X}"
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return sum(1 for row in rows if row.split()[1] == wanted and row.split()[3] == "0A")


def _stop(server: subprocess.Popen) -> str:
    server.terminate()
    try:
        out, _ = server.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()
        out, _ = server.communicate()
    return out


def test_each_worker_listens_on_its_own_socket_and_connections_are_spread_over_them():
    port = closed_port()
    server = _gunicorn(port, "--workers", str(WORKERS))
    try:
        deadline = time.monotonic() + 30
        while _listeners(port) < WORKERS:
            assert server.poll() is None, f"gunicorn exited: {_stop(server)}"
            assert time.monotonic() < deadline, f"{_listeners(port)} listeners after 30 s"
            time.sleep(0.1)
        # 90 kept-alive connections opened at once, as a crowd's browsers open them: which worker took each
        connections = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(90)]
        served = Counter()
        for connection in connections:
            connection.sendall(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
        for connection in connections:
            answer = b""
            while b"\r\n\r\n" not in answer or not answer.split(b"\r\n\r\n", 1)[1]:
                chunk = connection.recv(4096)
                assert chunk, f"connection closed after {answer!r}"
                answer += chunk
            served[answer.split(b"\r\n\r\n", 1)[1].decode()] += 1
        for connection in connections:
            connection.close()
    finally:
        log = _stop(server)
    assert _listeners(port) == 0
    assert len(served) == WORKERS, f"connections by worker pid: {dict(served)}\n{log}"
    # the kernel hashes each connection to one socket: about 30 each; one worker taking most would fail this
    assert min(served.values()) >= 10, f"connections by worker pid: {dict(served)}"


def test_a_second_server_on_a_taken_address_refuses_to_start_and_names_it():
    port = closed_port()
    with socket.socket() as taken:
        # as another server of ours listens (SO_REUSEPORT): without the check, the new one would bind beside it
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        taken.bind(("127.0.0.1", port))
        taken.listen()
        server = _gunicorn(port, "--workers", "1")
        try:
            out, _ = server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"gunicorn started on a taken address: {_stop(server)}")
    assert server.returncode == 1, out
    assert f"127.0.0.1:{port} is already in use by another server" in out
