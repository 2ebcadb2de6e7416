"""Evaluation API: order of calls, idempotent retries, resume after a client crash, and bad input (a clear 4xx
naming the problem, the run's state unchanged)."""

from __future__ import annotations

import base64
import io
from datetime import timedelta

import numpy as np
import pytest
from PIL import Image

from benchmark.maskcodec import encode_png, encode_rle

pytestmark = [pytest.mark.dataset, pytest.mark.django_db]


@pytest.fixture
def api(eval_key):
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"EvalKey {eval_key}")
    return client


@pytest.fixture(autouse=True)
def _fresh_throttle_cache():
    from django.core.cache import cache

    cache.clear()


def start(api, **config):
    response = api.post("/api/eval/runs/", {"dataset": "GrabCut", "max_clicks": 2, **config}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def serve(api, run_id, key="n1"):
    response = api.post(f"/api/eval/runs/{run_id}/next/", {}, format="json", HTTP_IDEMPOTENCY_KEY=key)
    assert response.status_code == 200, response.content
    return response.json()


def png_b64(mask) -> str:
    return base64.b64encode(encode_png(mask)).decode()


def snapshot(run_id):
    from evaluation.models import EvaluationRun

    run = EvaluationRun.objects.get(pk=run_id)
    return (
        run.state,
        run.interaction,
        run.round,
        run.unit_index,
        run.clicks,
        run.rows.count(),
        run.submit_key,
    )


def test_order_of_calls_and_idempotent_retries(api, eval_dataset):
    run_id = start(api)
    served = serve(api, run_id, key="n1")
    assert served["interaction"] == 1 and served["is_new"] and len(served["clicks"]) == 1
    assert set(served["sample"]) >= {"sample_id", "width", "height", "image_url"} and "mask" not in str(
        served
    )
    assert serve(api, run_id, key="n1") == served  # a retried next gets the same interaction
    again = api.post(f"/api/eval/runs/{run_id}/next/", {}, format="json", HTTP_IDEMPOTENCY_KEY="n2")
    assert again.status_code == 409 and again.json()["code"] == "awaiting_mask"
    assert "submit it" in again.json()["message"]
    summary = api.get(f"/api/eval/runs/{run_id}/summary/")
    assert summary.status_code == 409 and summary.json()["code"] == "not_finished"

    shape = (served["sample"]["height"], served["sample"]["width"])
    body = {"interaction": 1, "timing_s": 0.1, "mask_png": png_b64(np.zeros(shape, bool))}
    first = api.post(f"/api/eval/runs/{run_id}/submit/", body, format="json", HTTP_IDEMPOTENCY_KEY="s1")
    assert first.status_code == 200 and first.json()["result"]["status"] == "accepted"
    assert first.json()["result"]["iou"] == 0.0
    rows = snapshot(run_id)[5]
    retry = api.post(f"/api/eval/runs/{run_id}/submit/", body, format="json", HTTP_IDEMPOTENCY_KEY="s1")
    assert retry.json() == first.json() and snapshot(run_id)[5] == rows  # scored once
    replay = api.post(f"/api/eval/runs/{run_id}/submit/", body, format="json", HTTP_IDEMPOTENCY_KEY="s2")
    assert replay.status_code == 409 and replay.json()["code"] == "not_awaiting_mask"

    second = serve(api, run_id, key="n3")
    assert second["interaction"] == 2 and not second["is_new"] and len(second["clicks"]) == 2
    body = {"interaction": 2, "timing_s": 0.1, "mask_rle": encode_rle(np.ones(shape, bool))}
    assert api.post(f"/api/eval/runs/{run_id}/submit/", body, format="json").status_code == 200
    third = serve(api, run_id, key="n4")
    assert third["is_new"] and third["sample"]["index"] == 1  # max_clicks=2: the next sample


def test_client_killed_mid_run_resumes_with_the_same_key(grabcut3, eval_dataset, eval_key, wsgi_transport):
    from benchmark.session import ClickSession

    def predict(sample, clicks):
        mask = np.zeros((sample.height, sample.width), bool)
        for click in clicks:
            if click.is_positive:
                mask[
                    max(int(click.y) - 20, 0) : int(click.y) + 20,
                    max(int(click.x) - 20, 0) : int(click.x) + 20,
                ] = True
        return mask

    where = dict(
        host="http://testserver", key=eval_key, transport=wsgi_transport, dataset="GrabCut", max_clicks=2
    )
    crashed = ClickSession(**where)
    with crashed:
        for _ in range(3):
            assert crashed.next()
            sample, clicks, _ = crashed.get_clicks()
            crashed.submit_masks(predict(sample, clicks))
        assert crashed.next()
        crashed.get_clicks()  # ... and the process dies before submitting
    from evaluation import services

    services._truth.cache_clear()  # and the server restarts: nothing but the database is left
    services._size.cache_clear()
    resumed = ClickSession(**where, resume=crashed.run_id)
    with resumed:
        while resumed.next():
            sample, clicks, _ = resumed.get_clicks()
            resumed.submit_masks(predict(sample, clicks))
        report = resumed.get_report()
    assert list(report["click_index"]) == [1, 2] * 3 and report["status"].eq("accepted").all()
    assert resumed.get_global_summary()["samples"] == 3

    with ClickSession(**{**where, "max_clicks": 1}) as fresh:  # the same script, uninterrupted
        while fresh.next():
            sample, clicks, _ = fresh.get_clicks()
            fresh.submit_masks(predict(sample, clicks))
    assert list(fresh.get_report()["iou"]) == list(report[report["click_index"] == 1]["iou"])


def _png_bytes(array, mode=None) -> str:
    buffer = io.BytesIO()
    Image.fromarray(array, mode=mode).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


BAD = {
    "wrong size png": (lambda s: {"mask_png": png_b64(np.zeros((s[0] + 1, s[1]), bool))}, 400, "invalid_mask", "must be"),
    "non-binary png": (lambda s: {"mask_png": _png_bytes(np.full(s, 7, np.uint8))}, 400, "invalid_mask", "not binary"),
    "colour png": (
        lambda s: {"mask_png": _png_bytes(np.dstack([np.zeros(s, np.uint8), np.full(s, 255, np.uint8), np.zeros(s, np.uint8)]))},
        400, "invalid_mask", "colour",
    ),
    "corrupt png": (lambda s: {"mask_png": base64.b64encode(encode_png(np.zeros(s, bool))[:60]).decode()}, 400, "invalid_mask", "not a readable PNG"),
    "jpeg instead of png": (lambda s: {"mask_png": base64.b64encode(b"\xff\xd8\xff\xe0" + b"0" * 50).decode()}, 400, "invalid_mask", "PNG"),
    "not base64": (lambda s: {"mask_png": "%%%not-base64%%%"}, 400, "invalid_mask", "base64"),
    "rle wrong size": (lambda s: {"mask_rle": encode_rle(np.zeros((s[0], s[1] + 2), bool))}, 400, "invalid_mask", "mask_rle.size"),
    "rle short": (lambda s: {"mask_rle": {"size": list(s), "counts": [5, 5]}}, 400, "invalid_mask", "covers 10 pixels"),
    "rle garbage": (lambda s: {"mask_rle": {"size": list(s), "counts": "\x01\x02zz"}}, 400, "invalid_mask", "mask_rle.counts"),
    "rle negative": (lambda s: {"mask_rle": {"size": list(s), "counts": [-1, s[0] * s[1] + 1]}}, 400, "invalid_mask", "negative"),
    "rle not an object": (lambda s: {"mask_rle": "abc"}, 400, "invalid_mask", "mask_rle must be"),
    "both masks": (lambda s: {"mask_png": png_b64(np.zeros(s, bool)), "mask_rle": encode_rle(np.zeros(s, bool))}, 400, "invalid_mask", "exactly one"),
    "no mask": (lambda s: {}, 400, "invalid_mask", "exactly one"),
    "wrong sample (old interaction)": (lambda s: {"interaction": 0, "mask_png": png_b64(np.zeros(s, bool))}, 409, "wrong_interaction", "awaits the mask of interaction 1"),
    "negative timing": (lambda s: {"timing_s": -1, "mask_png": png_b64(np.zeros(s, bool))}, 400, "invalid_timing", "timing_s"),
    "logits not base64": (lambda s: {"logits": "%%%", "mask_png": png_b64(np.zeros(s, bool))}, 400, "invalid_logits", "base64"),
    "logits not a string": (lambda s: {"logits": [1, 2], "mask_png": png_b64(np.zeros(s, bool))}, 400, "invalid_logits", "base64 string"),
}  # fmt: skip


def test_a_claimed_time_beyond_the_servers_clock_counts_as_the_servers(api, eval_dataset):
    """max_time_s counts the client's method time, bounded by what the server saw pass (serve -> submit)."""
    from evaluation.models import EvaluationRow

    run_id = start(api, max_time_s=3600)
    served = serve(api, run_id)
    shape = (served["sample"]["height"], served["sample"]["width"])
    body = {"interaction": 1, "timing_s": 5000.0, "mask_png": png_b64(np.zeros(shape, bool))}
    assert api.post(f"/api/eval/runs/{run_id}/submit/", body, format="json").status_code == 200
    row = EvaluationRow.objects.get(run_id=run_id)
    assert row.timing_s == row.server_timing_s < 60, (row.timing_s, row.server_timing_s)


def test_bad_submissions_are_4xx_naming_the_problem_and_change_nothing(api, eval_dataset):
    run_id = start(api)
    served = serve(api, run_id)
    shape = (served["sample"]["height"], served["sample"]["width"])
    before = snapshot(run_id)
    for name, (make, status, code, words) in BAD.items():
        body = {"interaction": 1, "timing_s": 0.5, **make(shape)}
        response = api.post(
            f"/api/eval/runs/{run_id}/submit/", body, format="json", HTTP_IDEMPOTENCY_KEY=f"bad-{name}"
        )
        assert response.status_code == status, (name, response.content)
        assert response.json()["code"] == code and words in response.json()["message"], (
            name,
            response.json(),
        )
        assert snapshot(run_id) == before, name
    not_json = api.post(f"/api/eval/runs/{run_id}/submit/", "[1, 2]", content_type="application/json")
    assert not_json.status_code == 400 and "JSON object" in not_json.json()["message"]
    ok = {"interaction": 1, "timing_s": 0.5, "mask_png": png_b64(np.zeros(shape, bool))}
    assert api.post(f"/api/eval/runs/{run_id}/submit/", ok, format="json").status_code == 200


def test_keys_runs_and_limits(api, eval_dataset, eval_key, researcher, settings):
    from rest_framework.test import APIClient

    from evaluation.models import EvaluationKey, EvaluationRun
    from tests.factories import make_researcher

    assert EvaluationKey.objects.get(user=researcher).key_hash != eval_key and eval_key not in str(
        list(EvaluationKey.objects.values())
    )
    wrong = APIClient()
    wrong.credentials(HTTP_AUTHORIZATION="EvalKey ek_not-a-key")
    response = wrong.post("/api/eval/runs/", {"dataset": "GrabCut"}, format="json")
    assert response.status_code == 401 and "not recognised" in response.json()["message"]

    bad = api.post("/api/eval/runs/", {"dataset": "Nope"}, format="json")
    assert (
        bad.status_code == 400
        and bad.json()["code"] == "unknown_dataset"
        and "GrabCut" in bad.json()["message"]
    )
    bad = api.post("/api/eval/runs/", {"dataset": "GrabCut", "max_clicks": 0}, format="json")
    assert bad.status_code == 400 and "max_clicks=0" in bad.json()["message"]
    bad = api.post("/api/eval/runs/", {"dataset": "GrabCut", "clicker": "annotator"}, format="json")
    assert bad.status_code == 400 and "clicker='annotator' is not served remotely" in bad.json()["message"]
    bad = api.post("/api/eval/runs/", {"dataset": "GrabCut", "clicker": "replay"}, format="json")
    assert bad.status_code == 400 and bad.json()["code"] == "no_real_clicks"

    twice = [
        api.post("/api/eval/runs/", {"dataset": "GrabCut"}, format="json", HTTP_IDEMPOTENCY_KEY="c1")
        for _ in range(2)
    ]
    assert twice[0].json()["id"] == twice[1].json()["id"]  # a retried create makes one run
    settings.EVAL_MAX_ACTIVE_RUNS = 2
    start(api)
    too_many = api.post("/api/eval/runs/", {"dataset": "GrabCut"}, format="json")
    assert too_many.status_code == 429 and too_many.json()["code"] == "too_many_runs"

    run_id = twice[0].json()["id"]
    other = APIClient()
    other.force_authenticate(make_researcher("mallory"))
    assert other.post(f"/api/eval/runs/{run_id}/next/", {}, format="json").status_code == 404

    EvaluationRun.objects.filter(pk=run_id).update(
        expires_at=EvaluationRun.objects.get(pk=run_id).created_at - timedelta(seconds=1)
    )
    expired = api.post(f"/api/eval/runs/{run_id}/next/", {}, format="json")
    assert expired.status_code == 410 and expired.json()["code"] == "run_expired"
    assert EvaluationRun.objects.get(pk=run_id).state == "expired"

    settings.EVAL_MAX_UPLOAD_BYTES = 100
    run_id = (
        start(api, dataset="GrabCut") if False else EvaluationRun.objects.filter(state="ready").first().pk
    )
    serve(api, run_id)
    big = api.post(
        f"/api/eval/runs/{run_id}/submit/", {"interaction": 1, "mask_png": "A" * 200}, format="json"
    )
    assert big.status_code == 413 and "limit is 100" in big.json()["message"]

    from django.core.cache import cache

    cache.clear()
    settings.EVAL_RATE_LIMIT = "3/min"
    statuses = [api.get(f"/api/eval/runs/{run_id}/").status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]


def test_a_revoked_key_is_refused_at_once_where_it_was_revoked_and_within_the_cache_time_elsewhere(
    api, eval_dataset, eval_key, researcher, client, settings
):
    from django.utils import timezone

    from evaluation.models import EvaluationKey
    from evaluation.services import create_key

    settings.EVAL_KEY_CACHE_S = 30
    assert api.get("/api/eval/datasets/").status_code == 200  # looked up once, then remembered
    EvaluationKey.objects.filter(user=researcher).update(revoked_at=timezone.now())  # "another process"
    assert api.get("/api/eval/datasets/").status_code == 200  # within EVAL_KEY_CACHE_S: still known here
    settings.EVAL_KEY_CACHE_S = 0
    refused = api.get("/api/eval/datasets/")
    assert refused.status_code == 401 and "revoked" in refused.json()["message"]

    settings.EVAL_KEY_CACHE_S = 30
    other, raw = create_key(user=researcher, name="second")
    api.credentials(HTTP_AUTHORIZATION=f"EvalKey {raw}")
    assert api.get("/api/eval/datasets/").status_code == 200
    client.force_login(researcher)
    client.post(f"/eval/keys/{other.pk}/revoke/")  # revoked through the page, in this process
    assert api.get("/api/eval/datasets/").status_code == 401
