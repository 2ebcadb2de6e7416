"""`make prod` (config/runner.py) as an operator runs it: migrate, collectstatic, gunicorn, a worker per
queue, beat and the outbox relay on loopback against PostgreSQL + Redis. A batch is played through it in
Chromium, the stack's own worker validates it, static files come compressed with hashed names, and SIGTERM
stops every process the runner started (issue 16.1)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from collector.models import Session, TaskIntent
from tests.annotation_ui.driver import (
    ClickPlan,
    entry_url,
    open_player,
    play_trial,
    press_start,
    wait_finished,
    wait_start_enabled,
)
from tests.factories import make_dataset, make_study
from tests.support.broker import broker_down, closed_port
from tests.support.celery_worker import PROJECT_ROOT, wait_until, worker_environment

pytestmark = [
    pytest.mark.browser,
    pytest.mark.celery,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not os.environ.get("DATABASE_URL"),
        reason="make prod is the PostgreSQL + Redis stack; this runs in the services run of make test",
    ),
]

SHORT = {"image_ms": 200, "target_ms": 200, "blocked_ms": 200}


def _group_members(pgids: set[int]) -> list[int]:
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) in pgids:
            alive.append(int(stat.parent.name))
    return alive


def _get(url: str, headers: dict | None = None):
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.status, dict(response.headers), response.read()


@pytest.fixture
def own_redis(tmp_path):
    """A Redis server of the stack's own on a free loopback port (the suite's workers never see its queue)."""
    port = closed_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_until(lambda: _listening(port), timeout_s=10, interval_s=0.05, what="redis-server")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        server.wait(timeout=10)


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_make_prod_serves_a_batch_validates_it_and_stops_cleanly(chromium, tmp_path, own_redis):
    # Published while the test's broker is "down": the stimuli render stays a pending task intent, which the
    # stack's outbox relay sends to the stack's own Redis, where its worker renders them.
    with broker_down():
        dataset = make_dataset(tmp_path, n_images=3, size=(320, 240))
        study = make_study(dataset, publish=True, batch_size=3, **SHORT)
    assert TaskIntent.objects.filter(sent_at__isnull=True).count() == 1
    port = closed_port()
    base = f"http://127.0.0.1:{port}"
    env = worker_environment()
    env.update(
        CELERY_BROKER_URL=own_redis,
        CLICKLAB_OUTBOX_RELAY_GRACE_S="0",
        CLICKLAB_VAR_DIR=str(tmp_path / "var"),
        CLICKLAB_STATIC_ROOT=str(tmp_path / "static"),
        ALLOWED_HOSTS="127.0.0.1",
        SECURE_SSL_REDIRECT="false",  # plain http on loopback; a TLS proxy sits in front in production
        DEBUG="false",
    )
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    log_path = tmp_path / "runner.log"
    t0 = time.monotonic()
    with open(log_path, "wb") as log:
        runner = subprocess.Popen(
            [sys.executable, "-m", "config.runner", "--port", str(port), "--web-workers", "1",
             "--default-concurrency", "1", "--grace", "4"],
            cwd=PROJECT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    pgids: set[int] = set()
    try:

        def web_up():
            if runner.poll() is not None:
                raise AssertionError(f"runner exited ({runner.returncode}):\n{log_path.read_text()}")
            try:
                return _get(f"{base}/s/not-a-token/")
            except urllib.error.HTTPError as answered:
                return answered.code
            except OSError:
                return None

        assert wait_until(web_up, timeout_s=90, interval_s=0.3, what="gunicorn to answer") == 404
        print(f"web answered {time.monotonic() - t0:.1f}s after the runner started")
        text = log_path.read_text()
        pgids = {int(pid) for pid in re.findall(r"started [\w-]+ \(pid (\d+)\)", text)}
        assert len(pgids) == 5, text

        # Static files: WhiteNoise serves collectstatic's hashed, compressed copies, cached for a long time.
        manifest = json.loads((tmp_path / "static" / "staticfiles.json").read_text())["paths"]
        hashed = next(v for k, v in manifest.items() if k.startswith("player/") and k.endswith(".js"))
        status, headers, _ = _get(f"{base}/static/{hashed}", {"Accept-Encoding": "gzip"})
        assert status == 200 and headers.get("Content-Encoding") == "gzip", headers
        assert "max-age=315360000" in headers.get("Cache-Control", ""), headers

        context = chromium.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        failed: list[str] = []
        page.on("response", lambda r: r.status >= 400 and failed.append(f"{r.status} {r.url[-60:]}"))
        url = open_player(page, entry_url(base, study))
        assert page.evaluate("() => [...document.scripts].some(s => /\\.[0-9a-f]{12}\\.js$/.test(s.src))"), (
            "the player page must load the hashed static names of the manifest"
        )
        try:
            wait_start_enabled(page, timeout_ms=30_000)
            press_start(page)
            for position in range(3):
                play_trial(page, position, ClickPlan(0.5, 0.5), touch=False, blocked_in=())
            wait_finished(page, timeout_ms=30_000)
        except Exception as exc:
            raise AssertionError(
                f"the batch did not finish: page says {page.inner_text('body')[:800]!r}; failed responses "
                f"{failed}; page errors {errors}; runner log:\n{log_path.read_text()[-3000:]}"
            ) from exc
        code = page.inner_text("#completion-code")
        print(f"batch played at {time.monotonic() - t0:.1f}s")
        context.close()
        assert errors == []
        session = Session.objects.get(study=study)
        assert session.status == "finished" and code == session.completion_code and url.endswith("/")
        wait_until(
            lambda: Session.objects.filter(pk=session.pk, validated_at__isnull=False).exists(),
            timeout_s=30,
            what=f"the stack's worker to validate the batch; runner log:\n{log_path.read_text()[-4000:]}",
        )
        print(f"batch validated at {time.monotonic() - t0:.1f}s")
    finally:
        if runner.poll() is None:
            runner.send_signal(signal.SIGTERM)
        try:
            code = runner.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(runner.pid, signal.SIGKILL)
            for pgid in pgids:
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            raise
    print(f"stack stopped at {time.monotonic() - t0:.1f}s")
    assert code == 0, log_path.read_text()[-4000:]
    deadline = time.monotonic() + 5
    while _group_members(pgids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _group_members(pgids) == [], f"processes left after SIGTERM:\n{log_path.read_text()[-4000:]}"
    assert "SIGTERM: stopping" in log_path.read_text()
