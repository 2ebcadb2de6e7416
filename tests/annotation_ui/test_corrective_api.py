"""Issue 20.1 for the corrective-click API (``annotation_ui.corrective_api``): every body passes the bounded
parser and the endpoint's declared serializer before a service runs, so a hostile value is a 400 naming the
field, never stored coerced (``"x": true`` as 1.0, an idempotency key sent as an object stringified, an item
id ``true`` taken for item 1) and never a server error."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.models import CorrectiveClick, CorrectiveItem, Session
from collector.services.corrective import corrective_items_ensure, corrective_update_apply
from collector.services.session_start import session_start
from collector.services.tokens import session_token_make
from tests.factories import make_dataset, make_study, make_worker

pytestmark = pytest.mark.django_db
ENDPOINTS = ("click", "undo", "submit", "skip", "done", "finish")


@pytest.fixture
def campaign(tmp_path, settings):
    """A box-start campaign session whose two items are clicking in round 1."""
    settings.MEDIA_ROOT = tmp_path / "media"
    dataset = make_dataset(tmp_path, n_images=2, size=(120, 90))
    study = make_study(dataset, publish=True, kind="corrective", batch_size=2, quota_pc=1, quota_mobile=1)
    session = session_start(study=study, worker=make_worker(), device="pc")
    items = corrective_items_ensure(session=session)
    for item in items:
        corrective_update_apply(item_id=item.pk, round_number=0)
    return {"token": session_token_make(session_id=session.pk), "items": [item.pk for item in items]}


def _post(token: str, endpoint: str, raw) -> tuple[int, dict]:
    raw = raw if isinstance(raw, bytes | str) else json.dumps(raw)
    response = Client().post(
        f"/api/annotator/{token}/corrective/{endpoint}", data=raw, content_type="application/json"
    )
    return response.status_code, (response.json() if response.content else {})


def _click(item_id: int, **changes) -> dict:
    return {"item": item_id, "idempotency_key": "c-1", "x": 60.5, "y": 45.0, "positive": True,
            "pointer_type": "mouse", "item_ms": 812.5, **changes}  # fmt: skip


def _hostile(item: int) -> list[tuple[str, object, str | None]]:
    """(endpoint, body, the field the 400 names); bodies as JSON-able values or raw text."""
    return [
        ("click", _click(item, x=True), "x"),
        ("click", _click(item, y="45"), "y"),
        ("click", _click(item, x=1e300), "x"),
        ("click", json.dumps(_click(item)).replace("60.5", "1" + "0" * 400), None),
        ("click", json.dumps(_click(item)).replace("60.5", "NaN"), None),
        ("click", _click(item, idempotency_key={"k": 1}), "idempotency_key"),
        ("click", _click(item, idempotency_key=[1]), "idempotency_key"),
        ("click", _click(item, idempotency_key=12345), "idempotency_key"),
        ("click", _click(item, idempotency_key="c\u0000"), "idempotency_key"),
        ("click", _click(item, idempotency_key="\ud800"), "idempotency_key"),
        ("click", _click(item, item=True), "item"),
        ("click", _click(item, item=item + 0.7), "item"),
        ("click", _click(item, item=str(item)), "item"),
        ("click", _click(item, positive=1), "positive"),
        ("click", _click(item, pointer_type={"a": 1}), "pointer_type"),
        ("click", _click(item, item_ms=True), "item_ms"),
        ("click", {k: v for k, v in _click(item).items() if k != "x"}, "x"),
        ("click", "[" * 15_000, None),
        ("undo", {"item": item, "idempotency_key": {"k": 1}}, "idempotency_key"),
        ("undo", {"item": True, "idempotency_key": "c-1"}, "item"),
        ("submit", {"item": item, "round": True}, "round"),
        ("submit", {"item": item, "round": 1.0}, "round"),
        ("submit", {"item": item, "round": 1, "round_ms": "12"}, "round_ms"),
        ("skip", {"item": item, "round_ms": False}, "round_ms"),
        ("skip", {"item": [item]}, "item"),
        ("done", {"item": {"id": item}}, "item"),
        ("done", '{"item": 1, "round_ms": Infinity}', None),
    ]


def test_hostile_bodies_are_400_naming_the_field_and_change_nothing(campaign):
    token, item = campaign["token"], campaign["items"][0]
    for endpoint, body, field in _hostile(item):
        status, answer = _post(token, endpoint, body)
        assert status == 400, (endpoint, body, answer)
        assert isinstance(answer.get("message"), str) and answer["message"], answer
        assert answer.get("field") == field, (endpoint, body, answer)
        if field:
            assert field in answer["message"], answer
    assert not CorrectiveClick.objects.exists()
    assert set(CorrectiveItem.objects.values_list("state", "round")) == {("clicking", 1)}


def test_the_players_own_bodies_still_pass(campaign):
    token, item = campaign["token"], campaign["items"][0]
    status, answer = _post(token, "click", _click(item))
    assert status == 201 and answer["created"], answer
    assert _post(token, "click", _click(item))[0] == 200  # a retry of the stored click
    assert _post(token, "click", _click(item, idempotency_key="c-2", x=61, y=46, positive=False))[0] == 201
    status, answer = _post(token, "undo", {"item": item, "idempotency_key": "c-2"})
    assert status == 200 and [c["key"] for c in answer["item"]["clicks"]] == ["c-1"], answer
    status, answer = _post(token, "submit", {"item": item, "round": 1, "round_ms": 1500.25})
    assert status == 200 and answer["item"]["state"] == "updating", answer
    status, answer = _post(token, "skip", {"item": campaign["items"][1]})
    assert status == 200 and answer["item"]["state"] == "skipped", answer
    click = CorrectiveClick.objects.get(idempotency_key="c-1")
    assert (click.x, click.y, click.is_positive, click.pointer_type, click.item_ms) == (
        60.5, 45.0, True, "mouse", 812.5,
    )  # fmt: skip
    assert CorrectiveItem.objects.get(pk=item).round_ms == {"1": 1500.25}


SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(st.characters(codec=None, categories=["Cc", "Cs", "L", "N", "P", "Zs"]), max_size=8)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
FIELDS = ["item", "idempotency_key", "x", "y", "positive", "pointer_type", "item_ms", "round", "round_ms"]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    endpoint=st.sampled_from(ENDPOINTS),
    body=st.dictionaries(st.sampled_from(FIELDS), VALUES, max_size=6) | st.text(max_size=40),
)
def test_property_no_body_makes_a_server_error(campaign, endpoint, body):
    raw = json.dumps(body, allow_nan=True) if isinstance(body, dict) else body
    status, answer = _post(campaign["token"], endpoint, raw)
    assert status < 500, answer
    if status >= 400:
        assert isinstance(answer["message"], str) and answer["message"], answer


def test_a_refused_finish_says_whether_to_wait_or_stop_and_the_refusal_can_be_reported(campaign):
    """The corrective player waits while items are unfinished (model updates pending) and stops, showing and
    reporting the message, on any other refusal (issue 20.4): the 409's ``reason`` tells the two apart."""
    token = campaign["token"]
    status, answer = _post(token, "finish", {})
    assert (status, answer["code"]) == (409, "items_unfinished"), answer
    Session.objects.update(status=Session.Status.EXPIRED)
    response = Client(HTTP_ACCEPT_LANGUAGE="ru").post(
        f"/api/annotator/{token}/corrective/finish", data="{}", content_type="application/json"
    )
    assert response.status_code == 409 and response.json()["code"] == "session_closed", response.content
    assert "ответы больше не принимаются" in response.json()["message"], response.json()
    report = {"status": 409, "endpoint": "corrective/finish", "message": response.json()["message"]}
    assert (
        Client()
        .post(f"/api/annotator/{token}/problem", data=json.dumps(report), content_type="application/json")
        .status_code
        == 204
    )
    assert [p["endpoint"] for p in Session.objects.get().problems] == ["corrective/finish"]
