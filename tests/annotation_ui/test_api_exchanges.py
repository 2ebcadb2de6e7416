"""The annotator API's one path, over real HTTP (a live server, the whole middleware stack, the DRF view and its
serializer, the service): a click stored, a retry with its idempotency key stored once, bad fields refused with
the error envelope naming the field, a presentation report and a finish. These fail if the path breaks (a
middleware, the view, the contract or the service)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

from collector.models import Click, Session, Trial
from collector.services.session_start import session_start
from collector.services.tokens import session_token_make
from tests.factories import make_dataset, make_study, make_worker

PHASE_MS = 20
BATCH = 3


@pytest.fixture
def exchange_study(tmp_path, settings):
    settings.ALLOWED_HOSTS = ["localhost", "127.0.0.1"]
    return make_study(
        make_dataset(tmp_path, n_images=4, size=(64, 48)), publish=True, batch_size=BATCH,
        image_ms=PHASE_MS, target_ms=PHASE_MS, blocked_ms=PHASE_MS,
    )  # fmt: skip


@pytest.fixture
def started(exchange_study, live_server, exclusive_broker) -> tuple[Session, str]:
    """A started session and the base URL of its annotator API; the shared worker steps aside, and the queue is
    emptied afterwards (the finish sends the validation task: a worker running it during the teardown's flush
    deadlocked there)."""
    from tests.support.celery_worker import purge_queues

    session = session_start(study=exchange_study, worker=make_worker(), device="pc")
    yield session, f"{live_server.url}/api/annotator/{session_token_make(session_id=session.pk)}"
    purge_queues()


def _post(url: str, body) -> tuple[int, dict, dict]:
    """POST ``body`` (JSON, or raw bytes) over HTTP: (status, JSON answer, headers)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, raw, headers = response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as error:
        status, raw, headers = error.code, error.read(), dict(error.headers)
    return status, (json.loads(raw) if raw else {}), headers


def _click(position: int, key: str, **changes) -> dict:
    body = {"position": position, "idempotency_key": key, "x": 10.5, "y": 20.25, "shown_width": 640,
            "shown_height": 480, "pointer_type": "mouse", "reaction_ms": 350.0,
            "phase_onsets_ms": {"A": 1.0, "B": 2.0, "C": 3.0, "D": 4.0}, "blocked_clicks": 0, "flags": [],
            "refresh_hz": 60}  # fmt: skip
    body.update(changes)
    return body


def _present(base: str, position: int) -> dict:
    status, body, _ = _post(
        f"{base}/presented", {"position": position, "presentation_id": f"show-{position}"}
    )
    assert status == 200, body
    time.sleep(4 * PHASE_MS / 1000)  # phases A-C over: the click is due
    return body


def test_a_click_is_stored_and_its_retry_is_stored_once(started):
    session, base = started
    assert _present(base, 0) == {"ok": True, "position": 0, "presentations": 1, "replayed": False}

    status, body, headers = _post(f"{base}/click", _click(0, "key-0"))
    assert status == 201, body
    assert body["ok"] is True and body["created"] is True and body["position"] == 0
    assert body["missing"] == [1, 2]
    assert headers["Cache-Control"] == "no-store" and headers["Content-Type"] == "application/json"
    stored = Click.objects.get(trial__session=session)
    assert (stored.idempotency_key, stored.x, stored.y, stored.pointer_type) == (
        "key-0",
        10.5,
        20.25,
        "mouse",
    )
    assert Trial.objects.get(session=session, position=0).flags == []

    status, again, _ = _post(f"{base}/click", _click(0, "key-0"))  # the network retry
    assert status == 200 and again["created"] is False and again["missing"] == [1, 2], again
    assert Click.objects.filter(trial__session=session).count() == 1

    status, refused, _ = _post(f"{base}/click", _click(0, "key-other"))  # a second click on the trial
    assert status == 409 and refused["code"] == "trial_done" and refused["position"] == 0, refused
    assert Click.objects.filter(trial__session=session).count() == 1


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"x": "10.5"}, "x"),
        ({"y": True}, "y"),
        ({"shown_width": 0}, "shown_width"),
        ({"position": 1.5}, "position"),
        ({"idempotency_key": "spaces are refused"}, "idempotency_key"),
        ({"pointer_type": "laser"}, "pointer_type"),
        ({"blocked_clicks": -1}, "blocked_clicks"),
        ({"flags": ["ok", "tab hidden"]}, "flags[1]"),
        ({"phase_onsets_ms": {"D": "4"}}, "phase_onsets_ms.D"),
        ({"next_presentation": {"position": 1, "presentation_id": ""}}, "next_presentation.presentation_id"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_a_bad_field_is_refused_with_the_envelope_naming_it(started, changes, field):
    session, base = started
    _present(base, 0)
    status, body, _ = _post(f"{base}/click", {**_click(0, "key-0"), **changes})
    assert status == 400, body
    assert set(body) >= {"code", "message", "field"} and body["code"] == "invalid", body
    assert body["field"] == field, body
    assert field.split(".")[0].split("[")[0] in body["message"], body
    assert not Click.objects.filter(trial__session=session).exists()


def test_a_missing_field_and_a_bad_body_are_refused_with_the_envelope(started):
    session, base = started
    body = _click(0, "key-0")
    del body["x"]
    status, answer, _ = _post(f"{base}/click", body)
    assert (status, answer["code"], answer["field"]) == (400, "invalid", "x"), answer
    assert "missing" in answer["message"]
    status, answer, _ = _post(f"{base}/click", b'{"position": 0, "x": NaN}')
    assert (status, answer["code"]) == (400, "invalid_json"), answer
    status, answer, _ = _post(f"{base}/presented", {"position": -1, "presentation_id": "p"})
    assert (status, answer["field"]) == (400, "position"), answer
    status, answer, _ = _post(f"{base[: -len('x')]}bad/click", _click(0, "key-0"))  # a token that is not one
    assert (status, answer["code"], answer["field"]) == (404, "not_found", "token"), answer
    assert not Click.objects.filter(trial__session=session).exists()


def test_a_click_carries_the_next_report_and_the_batch_finishes(started):
    session, base = started
    _present(base, 0)
    for position in range(BATCH):
        carried = {"position": position + 1, "presentation_id": f"show-{position + 1}"}
        body = _click(
            position, f"key-{position}", next_presentation=carried if position + 1 < BATCH else None
        )
        status, answer, _ = _post(f"{base}/click", body)
        assert status == 201, answer
        if position + 1 < BATCH:
            assert answer["next_presentation"] == {
                "ok": True, "position": position + 1, "presentations": 1, "replayed": False,
            }  # fmt: skip
            time.sleep(4 * PHASE_MS / 1000)
    assert answer["missing"] == []

    status, finished, _ = _post(f"{base}/finish", {})
    assert status == 200 and finished["ok"] is True, finished
    assert finished["finish"]["code"], finished
    session.refresh_from_db()
    assert session.status == Session.Status.FINISHED and session.completion_code == finished["finish"]["code"]
    status, again, _ = _post(f"{base}/finish", {})  # a retried finish answers the same code
    assert status == 200 and again["finish"]["code"] == finished["finish"]["code"], again
    assert Click.objects.filter(trial__session=session).count() == BATCH
    assert sorted(Trial.objects.filter(session=session).values_list("flags", flat=True)) == [[]] * BATCH


def test_a_finish_before_every_click_is_refused_naming_the_missing_positions(started):
    session, base = started
    _present(base, 0)
    assert _post(f"{base}/click", _click(0, "key-0"))[0] == 201
    status, answer, _ = _post(f"{base}/finish", {})
    assert status == 409 and answer["code"] == "clicks_missing" and answer["missing"] == [1, 2], answer
    session.refresh_from_db()
    assert session.status == Session.Status.STARTED
