"""`make demo`'s command on the embedded default: data, links, a web server and a real worker; Ctrl-C stops both."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.support.celery_worker import PROJECT_ROOT

pytestmark = pytest.mark.slow


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_demo_serves_the_annotator_link_and_stops_on_ctrl_c(tmp_path, chromium):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "SECRET_KEY", "DJANGO_SETTINGS_MODULE"}
    }
    env.update({"CLICKLAB_VAR_DIR": str(tmp_path), "PYTHONUNBUFFERED": "1"})
    migrate = subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=PROJECT_ROOT, env=env,
                             capture_output=True, text=True, timeout=300)  # fmt: skip
    assert migrate.returncode == 0, migrate.stderr
    port = _free_port()
    log_path = tmp_path / "demo.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "manage.py", "demo", "--port", str(port)], cwd=PROJECT_ROOT, env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        text = ""
        while time.monotonic() < deadline and "Ctrl-C stops both" not in text:
            assert proc.poll() is None, log_path.read_text()
            time.sleep(0.5)
            text = log_path.read_text()
        assert "Ctrl-C stops both" in text, text
        link = re.search(r"Annotator link.*?: (http://127\.0\.0\.1:\d+/s/\S+/)", text).group(1)
        login = re.search(r"Researcher login: researcher / (\S+)", text).group(1)
        assert login and (tmp_path / "demo" / "credentials.txt").read_text().strip() == login
        pids = [int(p) for p in re.search(r"pids (\d+), (\d+)", text).groups()]

        # open the printed link as a person would: the entry page posts the detected device back, which
        # starts a session and hands over to the player page
        for _ in range(60):  # the web server needs a moment after the worker line is printed
            try:
                urllib.request.urlopen(link, timeout=10)
                break
            except OSError:
                time.sleep(0.5)
        context = chromium.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        page.goto(link)
        page.wait_for_url("**/a/**", timeout=60_000)
        page.wait_for_selector("#start-button:enabled", timeout=120_000)  # every stimulus loaded and decoded
        context.close()

        # the real worker rendered the stimuli of every round-1 target (task sent when the study was published)
        db = sqlite3.connect(tmp_path / "clicklab.sqlite3")
        deadline = time.monotonic() + 120
        pending = None
        while time.monotonic() < deadline:
            pending = db.execute(
                "SELECT COUNT(*) FROM collector_target WHERE stimuli = '{}' OR stimuli IS NULL"
            ).fetchone()[0]
            if pending == 0:
                break
            time.sleep(1)
        total = db.execute("SELECT COUNT(*) FROM collector_target").fetchone()[0]
        assert total == 9 and pending == 0, log_path.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
    text = log_path.read_text()
    assert "Stopped the web server and the worker." in text
    assert proc.returncode == 0
    time.sleep(0.5)
    assert not any(_pid_alive(pid) for pid in pids), "a child of `demo` survived Ctrl-C"
