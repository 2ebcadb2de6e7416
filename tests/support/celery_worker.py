"""A real Celery worker process bound to the test database, for integration tests.

The worker runs ``celery -A config worker`` in a subprocess with the environment pointing at the
database pytest-django created (PostgreSQL test database or the SQLite test file) and at the same broker
as the test process (Redis in CI, the file-system transport on the embedded default).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from django.db import connection

PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent


def worker_environment() -> dict[str, str]:
    """Environment for a subprocess that must see the test database."""
    env = os.environ.copy()
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        env.pop("DATABASE_URL", None)
        env["CLICKLAB_SQLITE_PATH"] = str(db["NAME"])
    else:
        user = db.get("USER") or "postgres"
        password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
        host = db.get("HOST") or "127.0.0.1"
        port = db.get("PORT") or 5432
        env["DATABASE_URL"] = f"postgres://{user}{password}@{host}:{port}/{db['NAME']}"
    from django.conf import settings

    env["SECRET_KEY"] = settings.SECRET_KEY  # tokens and codes made by one process must check in the other
    env["CLICKLAB_MEDIA_ROOT"] = str(settings.MEDIA_ROOT)
    env.pop("CLICKLAB_IMPORT_ROOT", None)
    if settings.DATASET_IMPORT_ROOT is not None:  # the folder imports' root, as the test set it
        env["CLICKLAB_IMPORT_ROOT"] = str(settings.DATASET_IMPORT_ROOT)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class CeleryWorkerProcess:
    """Start, kill and restart a real worker; ``log()`` returns what it printed."""

    def __init__(
        self,
        *,
        queues: str = "default,models",
        concurrency: int = 1,
        log_dir: Path | None = None,
        environment: dict[str, str] | None = None,
    ):
        """``environment``: variables set for this worker on top of the test's (e.g. the relay interval)."""
        self.queues = queues
        self.extra_environment = dict(environment or {})
        self.concurrency = concurrency
        self.log_dir = log_dir or (PROJECT_ROOT / "var" / "test-logs")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.log_dir / f"celery-{uuid.uuid4().hex[:8]}.log"
        self.process: subprocess.Popen | None = None
        self._log_offset = 0

    def _environment(self) -> dict[str, str]:
        from django.conf import settings

        env = {**worker_environment(), **self.extra_environment}
        self.media_root = env["CLICKLAB_MEDIA_ROOT"]
        self.files = (self.media_root, str(settings.DATASET_IMPORT_ROOT))
        return env

    def follow_media_root(self) -> None:
        """Restart (if running) when the test's MEDIA_ROOT (or import root) is not the one this worker was started
        with: a worker shared by the session reads files where the test that started it wrote them."""
        from django.conf import settings

        files = (str(settings.MEDIA_ROOT), str(settings.DATASET_IMPORT_ROOT))
        if self.running and getattr(self, "files", None) != files:
            self.stop()
            self.start()

    def start(self, *, timeout_s: float = 90.0) -> None:
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        handle = open(self.log_path, "ab")
        cmd = [
            sys.executable, "-m", "celery", "-A", "config", "worker",
            "-Q", self.queues, "-c", str(self.concurrency), "--pool", "prefork",
            "--without-mingle", "--without-gossip", "-l", "INFO",
            "-n", f"test-{uuid.uuid4().hex[:6]}@%h",
        ]  # fmt: skip
        self.process = subprocess.Popen(
            cmd, cwd=PROJECT_ROOT, env=self._environment(), stdout=handle, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        handle.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"celery worker exited with {self.process.returncode}:\n{self.log()}")
            if " ready." in self.log():
                return
            time.sleep(0.2)
        raise RuntimeError(f"celery worker not ready after {timeout_s}s:\n{self.log()}")

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        if not self.log_path.exists():
            return ""
        return self.log_path.read_bytes()[self._log_offset :].decode("utf-8", "replace")

    def kill(self) -> None:
        """SIGKILL the whole process group (main process and pool children), as a crash would."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def restart(self) -> None:
        self.stop()
        self.start()


def purge_queues() -> None:
    """Drop messages left in the broker by earlier runs."""
    from config.celery import app

    with app.connection_for_write() as conn:
        channel = conn.default_channel
        for queue in app.amqp.queues.values():
            try:
                queue.bind(channel).purge()
            except Exception:  # a queue that was never declared has nothing to purge
                pass
        if conn.transport.driver_type == "redis":
            # The Redis server outlives test runs: forget messages a killed worker of an earlier run left
            # unacknowledged, or their restores (10 at a time, throttled) delay this run's redeliveries.
            channel.client.delete(channel.unacked_key, channel.unacked_index_key, channel.unacked_mutex_key)


def wait_until(predicate, *, timeout_s: float = 60.0, interval_s: float = 0.2, what: str = "condition"):
    """Poll ``predicate`` until truthy; fail with ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
