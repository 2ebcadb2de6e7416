"""The evaluation API's OpenAPI schema validates, exposes no ground truth, and schemathesis finds no server error."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.validation import validate_schema

SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"


def test_schema_validates_and_no_response_can_hold_a_ground_truth_mask():
    schema = SchemaGenerator(urlconf="evaluation.schema_urls").get_schema(request=None, public=True)
    validate_schema(schema)
    paths = set(schema["paths"])
    assert "/api/eval/runs/{run_id}/submit/" in paths and all(p.startswith("/api/eval/") for p in paths)
    assert "evalKey" in schema["components"]["securitySchemes"]
    for path, operations in schema["paths"].items():
        for operation in operations.values():
            for response in operation.get("responses", {}).values():
                text = str(response)
                refs = re.findall(r"#/components/schemas/(\w+)", text)
                bodies = text + "".join(str(schema["components"]["schemas"][r]) for r in refs)
                # masks only ever go *to* the server (Submit* request); no response shape names one
                assert "mask" not in bodies.lower() and "gt" not in re.findall(r"'(\w+)':", bodies), path


@pytest.mark.slow
@pytest.mark.one_backend
@pytest.mark.dataset
@pytest.mark.django_db(transaction=True)
def test_schemathesis_finds_no_server_error_on_the_evaluation_api(
    live_server, eval_dataset, eval_key, tmp_path, api_for_run
):
    run_id = api_for_run(eval_key)
    command = [
        str(SCHEMATHESIS), "run", f"{live_server.url}/api/eval/schema/?format=json",
        "--header", f"Authorization: EvalKey {eval_key}",
        "--checks", "not_a_server_error",
        "--max-examples", "4",
        "--phases", "examples,fuzzing",  # the coverage and stateful phases alone take minutes on 2 cores
        "--seed", "20261123",
        "--request-timeout", "30",
        "--generation-database", "none",
        "--report-dir", str(tmp_path),
        "--no-color",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    report = result.stdout[-6000:] + result.stderr[-2000:]
    print(result.stdout[-1500:])
    assert result.returncode == 0, report
    generated = re.search(r"(\d+) generated, (\d+) passed", result.stdout)
    assert generated and int(generated[1]) > 20 and generated[1] == generated[2], report
    assert run_id


@pytest.fixture
def api_for_run(settings):
    """A run with a served interaction, so submit/report paths have a real run to hit."""

    def make(key: str) -> str:
        from rest_framework.test import APIClient

        settings.EVAL_RATE_LIMIT = "100000/min"
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"EvalKey {key}")
        run_id = client.post(
            "/api/eval/runs/", {"dataset": "GrabCut", "max_clicks": 1}, format="json"
        ).json()["id"]
        client.post(f"/api/eval/runs/{run_id}/next/", {}, format="json")
        return run_id

    return make
