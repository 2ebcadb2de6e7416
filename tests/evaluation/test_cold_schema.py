"""A freshly started gunicorn worker answers a burst of concurrent schema requests without a server error, and
the health endpoint of a server whose database is unreachable says so.

drf-spectacular resolved its extension classes lazily and without a lock, so the first concurrent requests of a
cold gthread worker found ``None`` in their place: 3-4 of 8 ``GET /api/eval/schema/`` were 500s. The worker now
resolves them and generates the evaluation schema while it boots (config/wsgi.py, evaluation/schema.py).
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.broker import closed_port

PROJECT_ROOT = Path(__file__).resolve().parents[2]
BURST = ["/api/eval/schema/"] * 8 + ["/api/researcher/schema/"] * 4 + ["/api/annotator/schema/"] * 4

pytestmark = pytest.mark.one_backend  # the schema does not touch the database or the broker


def _start_gunicorn(port: int, var_dir: Path, **environment: str) -> subprocess.Popen:
    env = {**os.environ, "CLICKLAB_VAR_DIR": str(var_dir), "ALLOWED_HOSTS": "127.0.0.1",
           "SECRET_KEY": "cold-schema-" + "s" * 50, "SECURE_SSL_REDIRECT": "0", **environment}  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", str(PROJECT_ROOT / "config" / "gunicorn.py"), "config.wsgi",
         "--bind", f"127.0.0.1:{port}", "--worker-class", "gthread", "--workers", "1", "--threads", "8"],
        cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def _burst(port: int) -> list[tuple[str, int, bytes]]:
    """Every request of BURST at once (one barrier), each on its own connection: (path, status, body)."""
    answers: list[tuple[str, int, bytes]] = []
    barrier = threading.Barrier(len(BURST))

    def ask(path: str) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        barrier.wait()
        connection.request("GET", path, headers={"Accept": "application/vnd.oai.openapi+json"})
        response = connection.getresponse()
        answers.append((path, response.status, response.read()))
        connection.close()

    threads = [threading.Thread(target=ask, args=(path,)) for path in BURST]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def _wait_listening(server: subprocess.Popen, port: int) -> None:
    deadline = time.monotonic() + 60
    while (
        True
    ):  # the master listens before its worker has loaded the app: a first request meets a cold worker
        assert server.poll() is None, server.communicate()[0][-3000:]
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline, "gunicorn did not listen within 60 s"
            time.sleep(0.05)


def test_the_health_endpoint_answers_503_naming_the_database_when_it_is_unreachable(tmp_path):
    """A server whose PostgreSQL does not answer says so on /api/eval/health/ (a 503 the remote session reports)."""
    port = closed_port()
    nowhere = f"postgres://postgres@127.0.0.1:{closed_port()}/clicklab_nowhere"
    server = _start_gunicorn(port, tmp_path / "var", DATABASE_URL=nowhere, CLICKLAB_DB_CONNECT_WAIT_S="0")
    try:
        _wait_listening(server, port)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        connection.request("GET", "/api/eval/health/")
        response = connection.getresponse()
        status, body = response.status, json.loads(response.read())
    finally:
        server.terminate()
        log = server.communicate(timeout=30)[0]
    assert status == 503, log[-3000:]
    assert body["service"] == "clicklab-evaluation" and body["status"] == "unavailable"
    assert body["database"].startswith("unavailable (OperationalError)")


@pytest.mark.slow
def test_a_cold_gunicorn_worker_answers_concurrent_schema_requests_without_a_server_error(tmp_path):
    for start in range(3):  # the race showed on every cold start
        port = closed_port()
        server = _start_gunicorn(port, tmp_path / f"var{start}")
        try:
            deadline = time.monotonic() + 60
            while (
                True
            ):  # the master listens before its worker has loaded the app: the burst meets a cold worker
                assert server.poll() is None, server.communicate()[0][-3000:]
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "gunicorn did not listen within 60 s"
                    time.sleep(0.05)
            answers = _burst(port)
        finally:
            server.terminate()
            log = server.communicate(timeout=30)[0]
        statuses = [(path, status) for path, status, _ in answers]
        assert all(status == 200 for _, status in statuses), f"cold start {start}: {statuses}\n{log[-4000:]}"
        evaluation = {body for path, _, body in answers if path == "/api/eval/schema/"}
        assert len(evaluation) == 1, "concurrent requests got different evaluation schemas"
        schema = json.loads(evaluation.pop())
        assert schema["info"]["title"] == "Clicklab evaluation API"
        assert "evalKey" in schema["components"]["securitySchemes"]
        assert "/api/eval/runs/{run_id}/submit/" in schema["paths"]
