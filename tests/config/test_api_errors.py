"""Issue 35 item 2: every error status of the annotator, evaluation and researcher APIs answers the one envelope
of ``config.api_errors`` (``{"code", "message", "field"}``), over HTTP, whatever raised it (a serializer, the
bounded parser, an authentication class, a service, Django's URL resolver, a middleware); and the statuses
stay what they were. Also: revoking another user's evaluation key is a 404, as a key that does not exist."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from rest_framework.authtoken.models import Token

from collector.services.session_start import session_start
from collector.services.tokens import session_token_make
from evaluation.models import EvaluationKey
from evaluation.services import create_key
from tests.factories import make_dataset, make_researcher, make_study, make_worker

pytestmark = pytest.mark.django_db
FORGED = "eyJzIjoxfQ:1xVTne:" + "A" * 43
CLICK = {
    "position": 0,
    "idempotency_key": "k-0",
    "x": 5.0,
    "y": 6.0,
    "shown_width": 64.0,
    "shown_height": 48.0,
}


@pytest.fixture
def world(tmp_path, settings):
    """A published study with a started session, a researcher who owns it (with a token), another researcher,
    a user who is not one, and an evaluation key."""
    settings.MEDIA_ROOT = tmp_path / "media"
    alice = make_researcher("alice")
    study = make_study(
        make_dataset(tmp_path, n_images=3, size=(64, 48)), publish=True, owner=alice, batch_size=3
    )
    session = session_start(study=study, worker=make_worker(), device="pc")
    from django.contrib.auth.models import User

    plain = User.objects.create_user(username="plain", password="pw-for-tests-1")
    return {
        "token": session_token_make(session_id=session.pk),
        "study": study,
        "alice": Token.objects.create(user=alice).key,
        "bob": Token.objects.create(user=make_researcher("bob")).key,
        "plain": Token.objects.create(user=plain).key,
        "eval_key": create_key(user=alice, name="tests")[1],
    }


def _json(method: str, path: str, body=None, **headers):
    def send(client: Client, world: dict):
        raw = body if isinstance(body, str) or body is None else json.dumps(body)
        return getattr(client, method)(
            path.format(**world), data=raw, content_type="application/json", **headers
        )

    return send


def _eval(method: str, path: str, body=None):
    return lambda client, world: _json(method, path, body, HTTP_AUTHORIZATION=f"EvalKey {world['eval_key']}")(
        client, world
    )


def _researcher(
    method: str, path: str, body=None, *, who: str = "alice", content_type: str = "application/json"
):
    def send(client: Client, world: dict):
        raw = body if isinstance(body, str) or body is None else json.dumps(body)
        return getattr(client, method)(
            path.format(study=world["study"].pk), data=raw, content_type=content_type,
            HTTP_AUTHORIZATION=f"Token {world[who]}",
        )  # fmt: skip

    return send


def _closed_then(send):
    def closed(client: Client, world: dict):
        _researcher("post", "/api/researcher/studies/{study}/close/")(client, world)
        return send(client, world)

    return closed


A = "/api/annotator/{token}"
# (id, request, status, code, field); code None: any code
FAILING = [
    # the annotator API (the player's)
    ("annotator-field-missing", _json("post", A + "/click", {k: v for k, v in CLICK.items() if k != "x"}), 400,
     "invalid", "x"),
    ("annotator-field-wrong-type", _json("post", A + "/click", {**CLICK, "x": True}), 400, "invalid", "x"),
    ("annotator-not-json", _json("post", A + "/click", "{nope"), 400, "invalid_json", None),
    ("annotator-control-character", _json("post", A + "/problem", {"status": 409, "endpoint": "click",
     "message": "a\u0000b"}), 400, "invalid_json", "message"),
    ("annotator-too-deep", _json("post", A + "/click", "[" * 15_000), 400, "invalid_json", None),
    ("annotator-bad-token", _json("get", f"/api/annotator/{FORGED}/state"), 404, "not_found", "token"),
    ("annotator-bad-token-stimulus", _json("get", f"/api/annotator/{FORGED}/stimuli/abc.bin"), 404, "not_found",
     None),
    ("annotator-unknown-address", _json("get", A + "/nothing-here"), 404, "not_found", None),
    ("annotator-wrong-method", _json("get", A + "/click"), 405, "method_not_allowed", None),
    ("annotator-not-json-media", lambda client, world: client.post(
        f"/api/annotator/{world['token']}/click", data="x=1", content_type="application/x-www-form-urlencoded"),
     415, "unsupported_media_type", None),
    ("annotator-finish-refused", _json("post", A + "/finish", {}), 409, "clicks_missing", None),
    ("annotator-presented-no-trial", _json("post", A + "/presented", {"position": 9, "presentation_id": "p"}),
     400, "invalid", "position"),
    # the evaluation API (model developers')
    ("evaluation-no-credentials", _json("get", "/api/eval/runs/"), 401, "not_authenticated", None),
    ("evaluation-bad-key", _json("get", "/api/eval/runs/", HTTP_AUTHORIZATION="EvalKey nope"), 401,
     "authentication_failed", None),
    ("evaluation-not-json", _eval("post", "/api/eval/runs/", "{nope"), 400, "invalid_json", None),
    ("evaluation-nul", _eval("post", "/api/eval/runs/", {"dataset": "a\u0000"}), 400, "invalid_json", "dataset"),
    ("evaluation-not-an-object", _eval("post", "/api/eval/runs/", "[1]"), 400, "invalid_json", None),
    ("evaluation-unknown-dataset", _eval("post", "/api/eval/runs/", {"dataset": "nope"}), 400, "unknown_dataset",
     None),
    ("evaluation-unknown-run", _eval("get", "/api/eval/runs/00000000-0000-0000-0000-000000000000/"), 404,
     "unknown_run", None),
    ("evaluation-run-id-not-a-uuid", _eval("get", "/api/eval/runs/12/"), 404, "not_found", None),
    ("evaluation-wrong-method", _eval("delete", "/api/eval/runs/"), 405, "method_not_allowed", None),
    ("evaluation-keys-need-a-researcher-login", _eval("get", "/api/eval/keys/"), 401, "not_authenticated", None),
    # the researcher API
    ("researcher-no-credentials", _json("get", "/api/researcher/studies/"), 401, "not_authenticated", None),
    ("researcher-not-a-researcher", _researcher("get", "/api/researcher/studies/", who="plain"), 403,
     "permission_denied", None),
    ("researcher-another-owners-study", _researcher("get", "/api/researcher/studies/{study}/", who="bob"), 404,
     "not_found", None),
    ("researcher-field-missing", _researcher("post", "/api/researcher/studies/", {"name": "x"}), 400, "required",
     "dataset"),
    ("researcher-too-deep", _researcher("post", "/api/researcher/studies/", "[" * 15_000), 400, "invalid_json",
     None),
    ("researcher-not-json-media", _researcher("post", "/api/researcher/studies/", "x", content_type="text/plain"),
     415, "unsupported_media_type", None),
    ("researcher-state-conflict", _closed_then(_researcher("post", "/api/researcher/studies/{study}/publish/")), 409,
     "state_conflict", None),
    ("researcher-round-not-a-number", _researcher("get", "/api/researcher/studies/{study}/targets/?round=x"), 400,
     "invalid", "round"),
    ("researcher-unknown-chart", _researcher("get", "/api/researcher/studies/{study}/charts/nope.png"), 404,
     "not_found", None),
    ("researcher-unknown-address", _researcher("get", "/api/researcher/nothing/"), 404, "not_found", None),
]  # fmt: skip


@pytest.mark.parametrize(("send", "status", "code", "field"), [case[1:] for case in FAILING],
                         ids=[case[0] for case in FAILING])  # fmt: skip
def test_every_error_status_answers_the_envelope(world, send, status, code, field):
    response = send(Client(), world)
    assert response.status_code == status, response.content[:400]
    assert response["Content-Type"].startswith("application/json"), response.content[:400]
    body = response.json()
    assert {"code", "message", "field"} <= set(body), body
    assert isinstance(body["message"], str) and len(body["message"]) > 10, body
    assert body["code"] == code and body["field"] == field, body
    assert not {"error", "detail", "reason"} & set(body), body  # the three old shapes are gone


def test_a_form_with_several_faults_lists_them_all_under_errors(world):
    body = json.dumps({"name": "", "dataset": 0, "batch_size": 0})
    response = _researcher("post", "/api/researcher/studies/", body)(Client(), world)
    assert response.status_code == 400
    answer = response.json()
    fields = [error["field"] for error in answer["errors"]]
    assert {"name", "dataset"} <= set(fields), answer
    assert answer["field"] == fields[0] and answer["message"].startswith(f"{fields[0]}: "), answer
    assert all(error["code"] and error["message"] for error in answer["errors"]), answer


def test_a_throttled_key_is_a_429_in_the_envelope_with_retry_after(world, settings):
    from django.core.cache import cache

    cache.clear()
    settings.EVAL_RATE_LIMIT = "1/min"
    send = _eval("get", "/api/eval/runs/")
    assert send(Client(), world).status_code == 200
    refused = send(Client(), world)
    assert refused.status_code == 429 and refused.json()["code"] == "throttled" and refused["Retry-After"]


def test_revoking_another_users_key_is_a_404_and_leaves_the_key_working(world):
    bob_user = make_researcher("carol")
    bob_key, raw = create_key(user=bob_user, name="carol's")
    alice = Token.objects.get(key=world["alice"]).user
    page = Client()
    page.force_login(alice)
    refused = page.post(f"/eval/keys/{bob_key.pk}/revoke/")
    assert refused.status_code == 404, refused.content[:300]
    assert b"The key is revoked" not in refused.content
    missing = page.post("/eval/keys/987654/revoke/")  # a key that does not exist: the same answer
    assert missing.status_code == 404
    assert EvaluationKey.objects.get(pk=bob_key.pk).revoked_at is None
    api = Client(HTTP_AUTHORIZATION=f"EvalKey {raw}")
    assert api.get("/api/eval/runs/").status_code == 200  # still carol's working key
    own = EvaluationKey.objects.get(user=alice)
    revoked = page.post(f"/eval/keys/{own.pk}/revoke/", follow=True)
    assert revoked.status_code == 200 and b"The key is revoked" in revoked.content
    assert EvaluationKey.objects.get(pk=own.pk).revoked_at is not None
