"""Issue 20 for the evaluation API: an evaluation-key holder is outside the lab, so a hostile body (15,000 ``[``,
NUL or a lone surrogate in a name, an integer too large for a float, NaN) is a 400 ``invalid_json`` naming the
problem, never a server error, and nothing is stored."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from evaluation.models import EvaluationRun
from tests.factories import make_dataset

pytestmark = pytest.mark.django_db

HUGE_INT = "1" + "0" * 400


@pytest.fixture
def post(eval_key):
    client = Client(HTTP_AUTHORIZATION=f"EvalKey {eval_key}")

    def send(url: str, raw: str) -> tuple[int, dict]:
        response = client.post(
            url, data=raw.encode("utf-8", "surrogatepass"), content_type="application/json"
        )
        return response.status_code, response.json()

    return send


@pytest.fixture
def dataset(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    return make_dataset(tmp_path, name="hostile-eval", n_images=1, size=(40, 30))


def _run(**fields) -> str:
    return json.dumps({"dataset": "hostile-eval", "method": "probe", **fields})


@pytest.mark.parametrize(
    ("url", "raw", "words"),
    [
        ("/api/eval/runs/", "[" * 15_000, "deep"),
        ("/api/eval/runs/", '{"dataset": ' + "[" * 50 + "]" * 50 + "}", "deep"),
        ("/api/eval/runs/", json.dumps({"dataset": "hostile-eval\u0000"}), "U+0000"),
        ("/api/eval/runs/", _run(method="m\u0000"), "U+0000"),
        ("/api/eval/runs/", _run().replace('"probe"', '"\\ud800"'), "U+D800"),
        ("/api/eval/runs/", _run().replace('"probe"', '"probe", "max_time_s": ' + HUGE_INT), "401 digits"),
        ("/api/eval/runs/", _run().replace('"probe"', '"probe", "threshold": NaN'), "NaN"),
        ("/api/eval/runs/", _run().replace('"probe"', '"probe", "max_time_s": 1e400'), "range of a float"),
        ("/api/eval/runs/", "{nope", "not valid JSON"),
        ("/api/eval/runs/00000000-0000-0000-0000-000000000000/next/", "[" * 15_000, "deep"),
        ("/api/eval/runs/00000000-0000-0000-0000-000000000000/submit/", "[" * 15_000, "deep"),
    ],
)
def test_hostile_bodies_are_400_invalid_json(post, dataset, url, raw, words):
    status, answer = post(url, raw)
    assert status == 400 and answer["code"] == "invalid_json", answer
    assert words in answer["message"], answer
    assert not EvaluationRun.objects.exists()


def test_a_key_name_with_nul_is_400_for_a_logged_in_researcher(researcher):
    client = Client()
    client.force_login(researcher)
    response = client.post("/api/eval/keys/", data='{"name": "k\\u0000"}', content_type="application/json")
    assert response.status_code == 400 and "U+0000" in response.json()["message"], response.content
    assert (
        client.post("/api/eval/keys/", data={"name": "k"}, content_type="application/json").status_code == 201
    )


def test_a_well_formed_run_is_still_created(post, dataset):
    status, answer = post("/api/eval/runs/", _run(max_time_s=30, group_bounds=None, seed=2**63 - 1))
    assert status == 201, answer
    assert EvaluationRun.objects.get().method == "probe"


def test_the_key_form_refuses_a_name_with_nul_and_says_so(researcher):
    """The researcher page's key form (evaluation.pages.key_create): NUL was a PostgreSQL DataError (500)."""
    from evaluation.models import EvaluationKey

    client = Client()
    client.force_login(researcher)
    response = client.post("/eval/keys/new/", {"name": "lap\x00top"}, follow=True)
    assert response.status_code == 200 and "control character" in response.content.decode()
    assert not EvaluationKey.objects.filter(name__startswith="lap").exists()
    client.post("/eval/keys/new/", {"name": "laptop"})
    assert EvaluationKey.objects.filter(name="laptop").count() == 1
