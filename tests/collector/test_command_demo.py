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
from tests.support.media_probe import fetch, leaks, probe_urls

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


def _demo_env(tmp_path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in {
            "DATABASE_URL",
            "CELERY_BROKER_URL",
            "SECRET_KEY",
            "DJANGO_SETTINGS_MODULE",
            "PUBLIC_BASE_URL",
        }
    }
    env.update({"CLICKLAB_VAR_DIR": str(tmp_path), "PYTHONUNBUFFERED": "1"})
    return env


def test_make_demo_passes_port_and_host_to_the_command():
    dry_run = subprocess.run(["make", "-n", "demo", "PORT=8123", "HOST=0.0.0.0"], cwd=PROJECT_ROOT,
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    assert dry_run.returncode == 0, dry_run.stderr
    assert "manage.py demo --port 8123 --host 0.0.0.0" in dry_run.stdout
    # a shell's own HOST (zsh exports the machine name) does not move the demo off loopback
    plain = subprocess.run(["make", "-n", "demo"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60,
                           env={**os.environ, "HOST": "some-machine", "PORT": "1"})  # fmt: skip
    assert "manage.py demo --port 8000 --host 127.0.0.1" in plain.stdout


def test_a_busy_port_is_a_clear_failure(tmp_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run([sys.executable, "manage.py", "demo", "--port", str(port)], cwd=PROJECT_ROOT,
                                env=_demo_env(tmp_path), capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"port {port} on 127.0.0.1 is already in use" in result.stderr
    assert f"make demo PORT={port + 1}" in result.stderr
    assert "ready" not in result.stdout.lower()
    assert not (tmp_path / "demo").exists(), "nothing is set up when the demo cannot serve"


@pytest.mark.embedded_smoke
def test_demo_serves_the_annotator_link_and_stops_on_ctrl_c(tmp_path, chromium):
    env = _demo_env(tmp_path)
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

        # the default binds loopback and says so; DEBUG is on here, and still no file under MEDIA_ROOT (ground
        # truth, originals, stimuli) comes back to a visitor without the login, whatever the URL
        assert "reachable from this machine only (loopback)" in text
        probes = probe_urls(tmp_path / "media")
        assert len(probes) >= 4 * 9 * 2, "the demo wrote its images and masks under MEDIA_ROOT"
        leaked = [url for path, url in probes if leaks(*fetch("127.0.0.1", port, url), path)]
        assert not leaked, leaked[:5]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
    text = log_path.read_text()
    assert "Stopped the web server and the worker." in text
    assert proc.returncode == 0
    time.sleep(0.5)
    assert not any(_pid_alive(pid) for pid in pids), "a child of `demo` survived Ctrl-C"

    # HOST=0.0.0.0 (set up again on the same data, not served: tests bind loopback only): a warning, and
    # links that name this machine's LAN address, never 0.0.0.0.
    again = subprocess.run([sys.executable, "manage.py", "demo", "--setup-only", "--host", "0.0.0.0", "--port", "8765"],
                           cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "HOST=0.0.0.0: the app is reachable from every machine" in again.stderr
    assert "Ground-truth masks stay private" in again.stderr
    from collector.management.commands.demo import lan_address

    links = re.findall(r"(http://\S+?)/s/\S+/", again.stdout)
    assert len(links) == 3 and set(links) == {f"http://{lan_address()}:8765"}, again.stdout
    assert "0.0.0.0" not in again.stdout and "already imported" in again.stdout
