"""The researcher API's OpenAPI schema: it validates, holds only researcher endpoints, and a schemathesis
run against the live API (token-authenticated, bounded examples) finds no server error."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.validation import validate_schema
from rest_framework.authtoken.models import Token

from tests.factories import make_validated_batch

SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"


def test_schema_validates_and_holds_only_researcher_endpoints():
    schema = SchemaGenerator(urlconf="collector.api.schema_urls").get_schema(request=None, public=True)
    validate_schema(schema)  # raises on an invalid OpenAPI 3 document
    paths = set(schema["paths"])
    assert "/api/researcher/studies/{study_id}/progress/" in paths
    assert all(p.startswith("/api/researcher/") for p in paths), paths
    assert not any("annotator" in p for p in paths)
    assert {"tokenAuth", "cookieAuth"} <= set(schema["components"]["securitySchemes"])


@pytest.mark.django_db
def test_schema_is_served(client):
    response = client.get("/api/researcher/schema/", {"format": "json"})
    assert response.status_code == 200
    assert response.json()["info"]["title"] == "Clicklab researcher API"


@pytest.mark.slow
@pytest.mark.one_backend
def test_schemathesis_finds_no_server_error(live_server, alice, alice_study, bob_study, tmp_path):
    assert SCHEMATHESIS.exists(), (
        f"schemathesis is missing: install it with `{sys.executable} -m pip install schemathesis`"
    )
    make_validated_batch(alice_study, device="pc", valid_positions={0, 1})
    make_validated_batch(alice_study, device="mobile")
    token = Token.objects.create(user=alice).key
    command = [
        str(SCHEMATHESIS), "run", f"{live_server.url}/api/researcher/schema/?format=json",
        "--header", f"Authorization: Token {token}",
        "--checks", "not_a_server_error",
        "--max-examples", "8",
        "--seed", "20261122",
        "--request-timeout", "30",
        "--generation-database", "none",
        "--report-dir", str(tmp_path),
        "--no-color",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=480)
    report = result.stdout[-6000:] + result.stderr[-2000:]
    assert result.returncode == 0, report
    generated = re.search(r"(\d+) generated, (\d+) passed", result.stdout)
    assert generated and int(generated[1]) > 100 and generated[1] == generated[2], report
