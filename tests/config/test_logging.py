"""Issues 19 and 20.3: log lines carry their ids (JSON in production, readable locally) and never a token.

The batch test plays a whole batch over HTTP against gunicorn started the way production starts it
(``gunicorn -c config/gunicorn.py config.wsgi`` with ``LOG_FORMAT=json``), reads the captured lines back, finds
the session's ids on the service lines, the redaction marker on the access and Django request lines, and the
token nowhere.
"""

from __future__ import annotations

import json
import logging
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from collector.models import Session
from collector.services.tokens import session_token_make, study_link_token_make
from config.log_format import JsonFormatter, ReadableFormatter, logging_config
from config.logging_filters import TOKEN_MARK, RedactSecretsFilter
from tests.factories import make_dataset, make_study
from tests.support.celery_worker import PROJECT_ROOT, worker_environment


def _record(msg, args=(), *, name="collector.services.session_start", exc_info=None, **extra):
    record = logging.LogRecord(name, logging.INFO, __file__, 1, msg, args, exc_info)
    record.__dict__.update(extra)
    return record


def _written(record, formatter) -> str:
    assert RedactSecretsFilter().filter(record)
    return formatter.format(record)


@pytest.fixture
def token(settings):
    return session_token_make(session_id=4242)


def test_json_lines_carry_every_extra_field_and_readable_lines_too():
    extra = {"session_id": 7, "study_id": 3, "round_id": 2, "trials": 10, "reason": "broker down", "ok": True}
    line = json.loads(_written(_record("session started", **extra), JsonFormatter()))
    assert line["message"] == "session started" and line["level"] == "INFO"
    assert line["logger"] == "collector.services.session_start" and line["ts"].endswith("+00:00")
    assert {key: line[key] for key in extra} == extra
    text = _written(_record("session started", **extra), ReadableFormatter())
    assert text.endswith(
        ' session started session_id=7 study_id=3 round_id=2 trials=10 reason="broker down" ok=True'
    )


def test_tokens_are_redacted_from_message_args_fields_tracebacks_and_encoded_paths(token, settings):
    settings.TOLOKA_TOKEN = "toloka-secret-value-123"
    encoded = token.replace(":", "%3A")
    try:
        raise ValueError(f"bad link /a/{token}/")
    except ValueError:
        exc_info = sys.exc_info()
    records = [
        _record("Not Found: %s", (f"/a/{token}/nope",), name="django.request", status_code=404),
        _record(
            '"%s" %s %s', (f"GET /api/annotator/{encoded}/state HTTP/1.1", 200, 55), name="django.server"
        ),
        # gunicorn's access line: the format string with a dict of atoms
        _record(
            '%(h)s "%(r)s" %(s)s "%(f)s"',
            ({"h": "1.2.3.4", "r": f"GET /a/{token}/ HTTP/1.1", "s": "200", "f": f"https://x/a/{token}/"},),
            name="gunicorn.access",
        ),  # fmt: skip
        _record(
            "calling Toloka with %s", ("toloka-secret-value-123",), link=f"/s/{token}/", nested={"t": [token]}
        ),
        _record("failed", exc_info=exc_info, session_id=9),
    ]
    for formatter in (JsonFormatter(), ReadableFormatter()):
        for record in records:
            record.__dict__.pop("message", None)
            text = _written(logging.makeLogRecord(dict(vars(record))), formatter)
            assert token not in text and encoded not in text and token.rsplit(":", 1)[1] not in text, text
            assert "toloka-secret-value-123" not in text
            assert TOKEN_MARK in text or "[redacted]" in text, text


def test_a_study_link_token_is_redacted_too(token):
    link = study_link_token_make(study_id=12, device="pc")
    text = _written(_record("GET /s/%s/", (link,)), ReadableFormatter())
    assert link not in text and "GET /s/[token]/" in text


def test_settings_and_gunicorn_share_one_handler_with_the_filter():
    for config in (logging_config("json"), logging_config("text", gunicorn=True)):
        assert config["handlers"]["console"]["filters"] == ["redact_secrets"]
        assert set(config["handlers"]) == {"console"}
        for logger in config["loggers"].values():
            assert logger.get("handlers", ["console"]) == ["console"]
    assert {"gunicorn.access", "gunicorn.error"} <= set(logging_config("json", gunicorn=True)["loggers"])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.one_backend
@pytest.mark.django_db(transaction=True)
def test_a_batch_played_over_http_leaves_its_ids_and_no_token_in_the_log(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    # gunicorn boots (imports the app) while this process draws and imports the dataset
    port = _free_port()
    env = {**worker_environment(), "LOG_FORMAT": "json", "DEBUG": "true", "ALLOWED_HOSTS": "127.0.0.1"}
    log_path = tmp_path / "gunicorn.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.py", "-b", f"127.0.0.1:{port}", "-w", "1",
             "--no-control-socket", "config.wsgi"],
            cwd=PROJECT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    study = make_study(make_dataset(tmp_path, n_images=3), publish=True, batch_size=3)
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=30) as http:
            for _ in range(150):
                try:
                    http.get("/")
                    break
                except httpx.TransportError:
                    assert server.poll() is None, log_path.read_text()
                    time.sleep(0.2)
            link = study_link_token_make(study_id=study.pk)
            assert http.get(f"/s/{link}/").status_code == 200
            # the redirect form of the entry (the player answers the POST with its page otherwise), so the
            # log also holds a GET of the /a/<token>/ path
            entry = http.post(f"/s/{link}/?then=redirect", data={"device": "pc"})
            assert entry.status_code == 303, entry.text
            player = entry.headers["location"]
            token = player.split("/")[2]
            assert http.get(player).status_code == 200
            state = http.get(f"/api/annotator/{token}/state").json()
            for url in [state["bundle_url"]] + [
                value["url"]
                for trial in state["trials"]
                for value in trial.values()
                if isinstance(value, dict)
            ]:
                assert http.get(url).status_code == 200, url
            client = {"client_info": {"viewport_width": 1280}, "detected_device": "pc"}
            assert http.post(f"/api/annotator/{token}/client", json=client).status_code == 200
            session = Session.objects.get(pk=int(state["session"]["id"]))
            for trial in session.trials.select_related("target__instance__image").order_by("position"):
                image = trial.target.instance.image
                click = {
                    "position": trial.position, "idempotency_key": f"k{trial.position}", "x": 5.5, "y": 5.5,
                    "shown_width": image.width, "shown_height": image.height, "pointer_type": "mouse",
                    "reaction_ms": 500.0, "event_timestamp_ms": 5500.0, "refresh_hz": 60.0,
                    "phase_onsets_ms": {"A": 0.0, "B": 1500.0, "C": 3500.0, "D": 5000.0},
                }  # fmt: skip
                assert http.post(f"/api/annotator/{token}/click", json=click).status_code == 201
            # the 4xx lines Django writes with the path: a missing page, a refused click
            assert http.get(f"/a/{token}/no-such-page").status_code == 404
            refused = http.post(
                f"/api/annotator/{token}/click", json={**click, "position": 99, "idempotency_key": "z"}
            )
            assert refused.status_code == 409
            assert http.post(f"/api/annotator/{token}/finish").status_code == 200
    finally:
        server.send_signal(signal.SIGINT)  # quick shutdown; every line is written by then
        server.wait(timeout=30)
    text = log_path.read_text()
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]  # every line is one JSON object
    assert token not in text and token.replace(":", "%3A") not in text and link not in text
    assert token.rsplit(":", 1)[1] not in text  # not even the signature
    ids = {"session_id": session.pk}
    started = [line for line in lines if line["message"] == "session started"]
    assert started and started[0]["session_id"] == session.pk and started[0]["study_id"] == study.pk
    clicks = [line for line in lines if line["message"] == "click recorded" and line.items() >= ids.items()]
    assert sorted(line["position"] for line in clicks) == [0, 1, 2]
    assert any(line["message"] == "session finished" and line["study_id"] == study.pk for line in lines)
    access = [line["message"] for line in lines if line["logger"] == "gunicorn.access"]
    assert len(access) >= 12 and all("/[token]/" in line for line in access if "/annotator/" in line), access
    not_found = [line for line in lines if line["logger"] == "django.request" and line["status_code"] == 404]
    assert not_found and not_found[0]["message"] == "Not Found: /a/[token]/no-such-page"
    assert not_found[0]["request"] == "GET /a/[token]/no-such-page"
    assert Path(log_path).stat().st_size > 0
