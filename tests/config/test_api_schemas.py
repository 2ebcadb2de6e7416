"""Issue 35 item 6: the three APIs' OpenAPI schemas match their answers. Schemathesis runs over each schema
against a live server (real sessions, a real run, a real study), with its conformance checks: every status
documented, every body the schema's (the error envelope included), every content type declared, no server
error, and a body the schema allows is not refused as malformed."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client
from rest_framework.authtoken.models import Token

from collector.services.corrective import corrective_items_ensure, corrective_update_apply
from collector.services.session_start import session_start
from collector.services.tokens import session_token_make
from tests.factories import make_dataset, make_researcher, make_study, make_validated_batch, make_worker

SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
CHECKS = ",".join((
    "not_a_server_error", "status_code_conformance", "content_type_conformance", "response_schema_conformance",
    "positive_data_acceptance",
))  # fmt: skip


#: operations whose body has rules an OpenAPI schema cannot state, with the reason; schemathesis runs every
#: check but positive_data_acceptance on them (a body the schema allows may still be refused, and named)
CONTENT_RULES = {
    "runs_create": "dataset or benchmark (one of the two), and a protocol a benchmark may fix",
    "runs_submit_create": "a PNG or COCO RLE mask (exactly one) of the served sample's size",
    "local_runs_create": "a summary.json that python -m benchmark run wrote",
    "studies_create": "rules between fields (the batch against the dataset's images, the minimum per session)",
    "client_create": "client_info's names are [A-Za-z0-9_]{1,40}: OpenAPI 3.0 cannot constrain an object's keys",
    "corrective_click_create": "a point inside the item's image (the size is the item's, in its state)",
}


def _pin(schema: dict, values: dict, body: dict | None = None) -> dict:
    """``schema`` with the path parameters named in ``values`` (name -> value, or a function of the path) and
    the request bodies' properties named in ``body`` (name -> allowed values) fixed to real rows, so the
    generated requests reach the services rather than a 404 (test data, not the schema's promise)."""
    for path, operations in schema["paths"].items():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "path" and parameter["name"] in values:
                    value = values[parameter["name"]]
                    value = value(path) if callable(value) else value
                    parameter["schema"] = {**parameter["schema"], "enum": [value]}
    for name, component in schema.get("components", {}).get("schemas", {}).items():
        for field, allowed in (body or {}).items():
            if name.endswith("Request") and field in component.get("properties", {}):
                component["properties"][field] = {**component["properties"][field], "enum": allowed}
    return schema


def _annotator(tmp_path, request) -> tuple[dict, list[str]]:
    study = make_study(
        make_dataset(tmp_path / "timed", n_images=4, size=(64, 48)), publish=True, batch_size=3
    )
    token = session_token_make(session_id=session_start(study=study, worker=make_worker(), device="pc").pk)
    campaign = make_study(
        make_dataset(tmp_path / "campaign", n_images=2, size=(64, 48)), publish=True, kind="corrective",
        batch_size=2, quota_pc=1, quota_mobile=1,
    )  # fmt: skip
    corrective = session_start(study=campaign, worker=make_worker(), device="pc")
    items = corrective_items_ensure(session=corrective, send=False)
    for item in items:
        corrective_update_apply(item_id=item.pk, round_number=0)
    corrective_token = session_token_make(session_id=corrective.pk)
    schema = Client().get("/api/annotator/schema/", {"format": "json"}).json()
    tokens = {"token": lambda path: corrective_token if "/corrective/" in path else token}
    body = {"position": [0, 1, 2], "item": [item.pk for item in items]}
    return _pin(schema, tokens, body), []


def _evaluation(tmp_path, request) -> tuple[dict, list[str]]:
    from rest_framework.test import APIClient

    from collector.services.datasets import dataset_import
    from evaluation.services import create_key

    grabcut = dataset_import(path=request.getfixturevalue("grabcut3"), layout="grabcut").dataset
    researcher = make_researcher("evaluator")
    _, key = create_key(user=researcher, name="schemathesis")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"EvalKey {key}")
    run_id = client.post("/api/eval/runs/", {"dataset": grabcut.name, "max_clicks": 1}, format="json").json()[
        "id"
    ]
    client.post(f"/api/eval/runs/{run_id}/next/", {}, format="json")
    schema = Client().get("/api/eval/schema/", {"format": "json"}).json()
    pinned = _pin(schema, {"run_id": run_id, "index": 0}, {"dataset": [grabcut.name]})
    return pinned, ["--header", f"Authorization: EvalKey {key}"]


def _researcher(tmp_path, request) -> tuple[dict, list[str]]:
    alice = make_researcher("alice")
    dataset = make_dataset(tmp_path / "researcher", n_images=3)
    study = make_study(dataset, publish=True, name="Alice's study", owner=alice, batch_size=3,
                       min_valid_per_session=2)  # fmt: skip
    make_validated_batch(study, device="pc", valid_positions={0, 1})
    target_id = study.rounds.get().targets.order_by("pk").first().pk
    token = Token.objects.create(user=alice).key
    staff = Client()
    staff.force_login(alice)
    schema = staff.get("/api/researcher/schema/", {"format": "json"}).json()
    values = {"study_id": study.pk, "target_id": target_id}
    return _pin(schema, values, {"dataset": [dataset.pk]}), ["--header", f"Authorization: Token {token}"]


SURFACES = {"annotator": _annotator, "evaluation": _evaluation, "researcher": _researcher}


@pytest.mark.slow
@pytest.mark.one_backend
@pytest.mark.parametrize(
    "surface", ["annotator", pytest.param("evaluation", marks=pytest.mark.dataset), "researcher"]
)
def test_schemathesis_finds_no_mismatch_between_a_schema_and_its_answers(
    surface, live_server, transactional_db, tmp_path, settings, request
):
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.EVAL_RATE_LIMIT = "100000/min"
    assert SCHEMATHESIS.exists(), (
        f"schemathesis is missing: `{sys.executable} -m pip install -r requirements-test.lock`"
    )
    schema, headers = SURFACES[surface](tmp_path, request)
    schema_file = tmp_path / f"{surface}-schema.json"
    schema_file.write_text(json.dumps(schema))
    operation_ids = {
        operation.get("operationId")
        for operations in schema["paths"].values()
        for operation in operations.values()
    }
    ruled = "^(" + "|".join(sorted(operation_ids & set(CONTENT_RULES))) + ")$"
    runs = [("all checks", CHECKS, ["--exclude-operation-id-regex", ruled])]
    if ruled != "^()$":
        lenient = CHECKS.replace(",positive_data_acceptance", "")
        runs.append(("content rules", lenient, ["--include-operation-id-regex", ruled]))
    for label, checks, selection in runs:
        command = [
            str(SCHEMATHESIS), "run", str(schema_file), "--url", live_server.url, *headers, *selection,
            "--checks", checks,
            "--phases", "examples,fuzzing",
            "--max-examples", "15",
            "--seed", "20261202",
            "--request-timeout", "30",
            "--generation-database", "none",
            "--report-dir", str(tmp_path / "report"),
            "--no-color",
        ]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, timeout=600)
        report = f"{surface}, {label}:\n" + result.stdout[-12000:] + result.stderr[-2000:]
        assert result.returncode == 0, report
        generated = re.search(r"(\d+) generated, (\d+) passed", result.stdout)
        assert generated and int(generated[1]) >= 15 and generated[1] == generated[2], report
