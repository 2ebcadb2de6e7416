"""The annotator API's declared input contract (annotation_ui.api, .serializers, .parsers): hostile input
is a 400 naming the field, never a server error; a Hypothesis property test and a schemathesis run over
the annotator schema find no 5xx."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse
from drf_spectacular.validation import validate_schema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.models import Click, Session, Trial
from collector.services.corrective import corrective_items_ensure, corrective_update_apply
from collector.services.session_start import session_start
from collector.services.tokens import session_token_make
from tests.factories import make_dataset, make_study, make_worker, present_trials

SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
ENDPOINTS = ("click", "client", "presented", "problem", "heartbeat", "finish")
CORRECTIVE_ENDPOINTS = ("click", "undo", "submit", "skip", "done", "finish")


@pytest.fixture
def study(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    return make_study(make_dataset(tmp_path, n_images=4, size=(64, 48)), publish=True, batch_size=3)


@pytest.fixture
def token(study) -> str:
    session = session_start(study=study, worker=make_worker(), device="pc")
    return session_token_make(session_id=session.pk)


def _url(token: str, endpoint: str) -> str:
    return f"/api/annotator/{token}/{endpoint}"


def _send(token: str, endpoint: str, body) -> tuple[int, dict]:
    raw = body if isinstance(body, bytes | str) else json.dumps(body)
    response = Client().post(_url(token, endpoint), data=raw, content_type="application/json")
    return response.status_code, (response.json() if response.content else {})


def _click(**changes) -> dict:
    body = {"position": 0, "idempotency_key": "k-0", "x": 5.5, "y": 7.25, "shown_width": 640,
            "shown_height": 480, "pointer_type": "mouse", "reaction_ms": 400, "event_timestamp_ms": 9000.5,
            "phase_onsets_ms": {"A": 1, "B": 2, "C": 3, "D": 4}, "blocked_clicks": 1, "flags": [],
            "refresh_hz": 60}  # fmt: skip
    body.update(changes)
    return body


HUGE_INT = "1" + "0" * 400
HOSTILE_CLICKS = [
    # (raw JSON body, field the 400 must name)
    (json.dumps(_click()).replace('"x": 5.5', f'"x": {HUGE_INT}'), None),
    (json.dumps(_click()).replace('"y": 7.25', f'"y": {HUGE_INT}'), None),
    (json.dumps(_click()).replace('"reaction_ms": 400', f'"reaction_ms": {HUGE_INT}'), None),
    (json.dumps(_click()).replace('"x": 5.5', '"x": 1e400'), None),
    (json.dumps(_click()).replace('"x": 5.5', '"x": NaN'), None),
    (json.dumps(_click(x=1e300)), "x"),
    (json.dumps(_click(x=True)), "x"),
    (json.dumps(_click(x="5.5")), "x"),
    (json.dumps(_click(position=True)), "position"),
    (json.dumps(_click(idempotency_key="a\u0000b")), "idempotency_key"),
    (json.dumps(_click(idempotency_key={"k": 1})), "idempotency_key"),
    (json.dumps(_click(idempotency_key=12345)), "idempotency_key"),
    (json.dumps(_click(flags=["tab\u0000hidden"])), "flags"),
    (json.dumps(_click(flags=[1])), "flags"),
    (json.dumps(_click(phase_onsets_ms={"A\u0000": 1})), "phase_onsets_ms"),
    (json.dumps(_click(phase_onsets_ms={"D": True})), "phase_onsets_ms.D"),
    (json.dumps(_click(idempotency_key="\ud800")), "idempotency_key"),
    (json.dumps(_click(blocked_clicks=10**15)), "blocked_clicks"),
    (json.dumps(_click(pointer_type="laser")), "pointer_type"),
    (json.dumps(_click(shown_width=0)), "shown_width"),
    ("[" * 15_000, None),
    ('{"a": ' * 15_000, None),
    (json.dumps(_click(extra="x" * 20_000)), None),
    ('["not", "an", "object"]', None),
    (b"\xff\xfe{}", None),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("raw", "field"), HOSTILE_CLICKS, ids=range(len(HOSTILE_CLICKS)))
def test_hostile_clicks_are_400_naming_the_field(token, raw, field):
    status, body = _send(token, "click", raw)
    assert status == 400, body
    assert set(body) >= {"code", "message", "field"}, body
    assert body["field"] == field or body["field"].startswith((f"{field}[", f"{field}.")), body
    assert field is None or field.split(".")[0] in body["message"]
    assert not Click.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("client_info", "field"),
    [
        ('{"language": "en\\u0000"}', "client_info.language"),
        ('{"language": "\\udc00"}', "client_info.language"),
        ('{"refresh_hz": NaN}', None),
        ('{"nested": {"a": 1}}', "client_info"),
        ('{"bad key": 1}', "client_info"),
        ('"nope"', "client_info"),
    ],
)
def test_hostile_client_reports_are_400(token, client_info, field):
    status, body = _send(token, "client", f'{{"client_info": {client_info}, "detected_device": "pc"}}')
    assert status == 400 and body["field"] == field, body
    assert Session.objects.get().client_info == {}


@pytest.mark.django_db
def test_the_player_s_own_bodies_pass_and_a_missing_field_says_so(token):
    assert _send(token, "client", {"client_info": {"device_pixel_ratio": 2, "ua_mobile": None}})[0] == 200
    status, body = _send(token, "click", {k: v for k, v in _click().items() if k != "x"})
    assert status == 400 and body == {
        "code": "invalid",
        "message": "x is missing: This field is required. Send it with the request.",
        "field": "x",
    }
    assert _send(token, "click", _click())[0] == 201
    assert _send(token, "presented", {"position": 1, "presentation_id": "p1"})[0] == 200


@pytest.mark.django_db
def test_a_forged_token_is_a_json_404_on_every_endpoint(client):
    for endpoint in ENDPOINTS:
        response = client.post(_url("forged", endpoint), data="{}", content_type="application/json")
        assert response.status_code == 404 and response.json()["field"] == "token"
    assert client.get(_url("forged", "state")).json()["field"] == "token"


# ------------------------------------------------------------------------------------------------
# property test: arbitrary JSON (and not quite JSON) never makes a server error

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(st.characters(codec=None, categories=["Cc", "Cs", "L", "N", "P", "Zs"]), max_size=12)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
FIELDS = sorted(_click()) + ["client_info", "detected_device", "presentation_id", "scheduled_onsets_ms",
                             "load_wait_ms", "status", "endpoint", "message"]  # fmt: skip


def _bodies():
    mutated = st.builds(
        lambda base, changes: {**base, **changes},
        st.just(_click()),
        st.dictionaries(st.sampled_from(FIELDS), VALUES, min_size=1, max_size=3),
    )
    raw = st.binary(max_size=64) | st.text(max_size=64)
    return mutated | st.dictionaries(st.sampled_from(FIELDS), VALUES, max_size=5) | raw


@pytest.mark.django_db
@settings(max_examples=160, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(endpoint=st.sampled_from(ENDPOINTS), body=_bodies())
def test_property_no_body_makes_a_server_error(token, endpoint, body):
    # ensure_ascii: lone surrogates travel as \\udXXX escapes; NaN/Infinity as the non-JSON literals.
    raw = json.dumps(body, allow_nan=True) if isinstance(body, dict) else body
    response = Client().post(_url(token, endpoint), data=raw, content_type="application/json")
    assert response.status_code < 500, response.content[:500]
    if response.status_code >= 400:
        answer = response.json()
        assert isinstance(answer["message"], str) and answer["message"] and "field" in answer


# ------------------------------------------------------------------------------------------------
# the schema, and schemathesis over it


@pytest.mark.django_db
def test_schema_is_served_validates_and_holds_only_annotator_endpoints(client):
    schema = client.get(reverse("annotation_ui:api_schema"), {"format": "json"}).json()
    validate_schema(schema)
    assert set(schema["paths"]) == {f"/api/annotator/{{token}}/{name}" for name in (*ENDPOINTS, "state")} | {
        f"/api/annotator/{{token}}/corrective/{name}" for name in (*CORRECTIVE_ENDPOINTS, "state")
    }
    click = schema["components"]["schemas"]["ClickInRequest"]
    assert click["properties"]["x"]["type"] == "number" and click["properties"]["x"]["maximum"] == 100000
    assert click["properties"]["idempotency_key"]["type"] == "string"


@pytest.mark.slow
@pytest.mark.one_backend
def test_schemathesis_over_the_annotator_api_finds_no_server_error(
    live_server, transactional_db, study, tmp_path
):
    # Real sessions (a timed batch; a corrective campaign whose items take clicks), so the generated requests
    # reach the input rules and the services, not just the 404.
    session = session_start(study=study, worker=make_worker(), device="pc")
    token = session_token_make(session_id=session.pk)
    campaign = make_study(
        make_dataset(tmp_path / "campaign", n_images=2, size=(64, 48)), publish=True, kind="corrective",
        batch_size=2, quota_pc=1, quota_mobile=1,
    )  # fmt: skip
    corrective = session_start(study=campaign, worker=make_worker(), device="pc")
    for item in corrective_items_ensure(session=corrective, send=False):
        corrective_update_apply(item_id=item.pk, round_number=0)
    corrective_token = session_token_make(session_id=corrective.pk)
    schema = Client().get(reverse("annotation_ui:api_schema"), {"format": "json"}).json()
    for path, operations in schema["paths"].items():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                if parameter["name"] == "token":
                    named = corrective_token if "/corrective/" in path else token
                    parameter["schema"] = {"type": "string", "enum": [named]}
    schema_file = tmp_path / "annotator-schema.json"
    schema_file.write_text(json.dumps(schema))
    command = [
        str(SCHEMATHESIS), "run", str(schema_file), "--url", live_server.url,
        "--checks", "not_a_server_error",
        "--phases", "fuzzing",  # coverage/stateful phases add ~50 s on a loaded 2-core machine
        "--max-examples", "25",
        "--seed", "20261123",
        "--request-timeout", "30",
        "--generation-database", "none",
        "--report-dir", str(tmp_path / "report"),
        "--no-color",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    report = result.stdout[-6000:] + result.stderr[-2000:]
    assert result.returncode == 0, report
    generated = re.search(r"(\d+) generated, (\d+) passed", result.stdout)
    assert generated and int(generated[1]) > 250 and generated[1] == generated[2], report


# ------------------------------------------------------------------------------------------------
# server-side timing rules (contract item 2), scheduled onsets and load wait, and a lean click


def _session_of(token):
    return Session.objects.get()  # the only one: the ``token`` fixture's


@pytest.mark.django_db
def test_a_click_sent_by_hand_during_phase_b_is_refused_and_one_in_phase_d_is_stored(token):
    assert _send(token, "presented", {"position": 0, "presentation_id": "show-0"})[0] == 200
    status, body = _send(token, "click", _click())  # 0.1 s after the report: the target is still shown
    assert (status, body["code"], body["position"]) == (409, "click_too_early", 0), body
    assert "only in phase D" in body["message"] and not Click.objects.exists()

    present_trials(_session_of(token), seconds_ago=5.0)  # phases A + B + C (1.5 + 2 + 1.5 s) are over
    status, body = _send(token, "click", _click(event_timestamp_ms=3.5))  # but before its own onset D (4)
    assert (status, body["code"], body["field"]) == (409, "click_before_phase_d", "event_timestamp_ms")

    scheduled = {"A": 0.5, "B": 1.5, "C": 2.5, "D": 3.5}
    status, body = _send(token, "click", _click(scheduled_onsets_ms=scheduled, load_wait_ms=812.5))
    assert status == 201, body
    trial = Trial.objects.get(position=0)
    assert trial.scheduled_onsets_ms == scheduled and trial.load_wait_ms == 812.5
    assert trial.phase_onsets_ms == {"A": 1, "B": 2, "C": 3, "D": 4} and trial.flags == []


@pytest.mark.django_db
def test_a_click_for_a_trial_never_presented_is_kept_but_flagged(token):
    assert _send(token, "click", _click(flags=["focus_lost"]))[0] == 201
    assert Trial.objects.get(position=0).flags == ["focus_lost", "not_presented"]


@pytest.mark.django_db
def test_a_click_request_is_one_statement_on_postgresql_and_a_retry_one(token):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    present_trials(_session_of(token))
    # Token -> session id needs no query. PostgreSQL: one statement reads the session with its trials and
    # inserts the click with its trial's update; SQLite: the read, then the insert and the trial update in
    # one transaction. A retry: the same statement (nothing inserted) on PostgreSQL, the read on SQLite.
    with CaptureQueriesContext(connection) as first:
        assert _send(token, "click", _click())[0] == 201
    with CaptureQueriesContext(connection) as retry:
        assert _send(token, "click", _click())[0] == 200
    statements = [
        q["sql"] for q in first.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))
    ]
    assert len(statements) == (1 if connection.vendor == "postgresql" else 3), statements
    assert not any("FOR UPDATE" in sql or "FOR NO KEY UPDATE" in sql for sql in statements)
    assert len(retry.captured_queries) == 1, [q["sql"] for q in retry.captured_queries]


@pytest.mark.django_db
def test_the_click_statements_are_prepared_once_per_connection_and_reused(study, token):
    """PostgreSQL planned each click's statement anew (planning cost more than running it); it is prepared
    on the connection's first click and reused by every later one, whatever the session. SQLite
    has nothing to prepare: the click path must work there unchanged."""
    from django.db import connection

    def prepared() -> dict[str, tuple[int, int]]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")
            return {sql: (generic, custom) for sql, generic, custom in cursor.fetchall()}

    more = [session_start(study=study, worker=make_worker(), device="pc") for _ in range(2)]
    tokens = [token, *(session_token_make(session_id=session.pk) for session in more)]
    for session in Session.objects.all():
        present_trials(session)
    clicks = 0
    for number, session_token in enumerate(tokens):
        for position in range(Trial.objects.filter(session=Session.objects.order_by("pk")[number]).count()):
            status, body = _send(
                session_token, "click", _click(position=position, idempotency_key=f"k-{clicks}")
            )
            assert status == 201, body
            clicks += 1
    assert Click.objects.count() == clicks > 3
    if connection.vendor != "postgresql":
        return
    statements = prepared()
    click_path = {
        sql: plans
        for sql, plans in statements.items()
        if "collector_click" in sql and "collector_trial" in sql
    }
    assert len(click_path) == 1, statements  # the read-and-insert statement, prepared once
    assert all(sum(plans) == clicks for plans in click_path.values()), click_path
    # The plan kept for it looks each trial's click up by its index: a plan made while the click table was
    # small must not scan the whole table on every click once it has grown. Its first parameter is the
    # session id; the others are left NULL (EXPLAIN without ANALYZE runs nothing).
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name, cardinality(parameter_types) FROM pg_prepared_statements "
            "WHERE statement LIKE 'WITH base%%' AND generic_plans > 0"
        )
        (name, n_params) = cursor.fetchone()
        session_pk = Session.objects.order_by("pk").first().pk
        cursor.execute(f"EXPLAIN EXECUTE {name}({', '.join([str(session_pk)] + ['NULL'] * (n_params - 1))})")
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Seq Scan on collector_click" not in plan and "collector_click_trial_id" in plan, plan
    # ... and finds the session by its key: a condition on the session's status and expiry once let the
    # generic plan walk the (status, expires_at) index over every running session
    sessions = [line for line in plan.splitlines() if " on collector_session " in line]
    assert sessions and all("collector_session_pkey" in line for line in sessions), plan
    # Django's own statements stay unprepared (client-side binding, its default): the prepared ones are the
    # click's and the session start's (services.clicks, services.session_start, services.allocation),
    # written by hand
    ours = ("WITH base ", "WITH seen ", "SELECT s.id, r.", 'SELECT "id" FROM "collector_worker" WHERE "id" = $1 FOR',
            'SELECT "state" FROM "collector_round" WHERE "id" = $1 FOR')  # fmt: skip
    assert len(statements) == 5 and all(sql.startswith(ours) for sql in statements), statements


# ------------------------------------------------------------------------------------------------
# problem reports (contract item 4)


@pytest.mark.django_db
def test_a_problem_report_is_stored_bounded_and_logged_with_the_session_id(token, caplog):
    session = _session_of(token)
    report = {"status": 409, "endpoint": "click", "message": "trial 3 already\nhas its click.", "position": 3}
    with caplog.at_level("WARNING", logger="collector.services.session_problems"):
        response = Client().post(
            _url(token, "problem"), data=json.dumps(report), content_type="application/json"
        )
    assert response.status_code == 204 and response.content == b""
    session.refresh_from_db()
    assert [{k: v for k, v in p.items() if k != "at"} for p in session.problems] == [
        {"status": 409, "endpoint": "click", "message": "trial 3 already has its click.", "position": 3}
    ]
    record = next(r for r in caplog.records if r.getMessage() == "annotator shown a refusal")
    assert (record.session_id, record.endpoint, record.status) == (session.pk, "click", 409)

    for _ in range(60):
        _send(token, "problem", {"status": 400, "endpoint": "finish", "message": "m", "position": None})
    session.refresh_from_db()
    assert len(session.problems) == 50
    status, body = _send(token, "problem", {"status": 409, "endpoint": "upload", "message": "m"})
    assert (status, body["field"]) == (400, "endpoint") and "upload" in body["message"]
    status, body = _send(token, "problem", {"status": 409, "endpoint": "click", "message": "m" * 501})
    assert (status, body["field"]) == (400, "message")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (None, 201),  # no header: the bench's clients, curl without -H
        ("*/*", 201),  # what fetch() sends by default: the player
        ("application/json", 201),
        ("application/json, text/plain, */*", 201),  # axios and most HTTP libraries
        ("text/html, */*;q=0.1", 201),  # negotiated by DRF: */* admits JSON
        ("text/html", 406),  # negotiated by DRF: nothing this endpoint answers
        ("application/xml", 406),
        ("*/*?format=xml", 404),  # DRF's format override: no renderer for it
        ("*/*?format=json", 201),
    ],
)
def test_the_accept_header_is_answered_as_drf_negotiates_it(token, accept, expected):
    """AnnotatorNegotiation answers the common Accept headers at once; every header still gets DRF's answer:
    JSON where JSON is acceptable, a 406 in the error envelope where it is not, and nothing stored then."""
    present_trials(_session_of(token))
    accept, _, query = (accept or "").partition("?")
    headers = {"HTTP_ACCEPT": accept} if accept else {}
    url = _url(token, "click") + (f"?{query}" if query else "")
    response = Client().post(url, data=json.dumps(_click()), content_type="application/json", **headers)
    assert response.status_code == expected, response.content
    assert response["Content-Type"] == "application/json"
    body = response.json()
    if expected == 406:
        assert body["code"] == "not_acceptable" and "Accept" in body["message"], body
    elif expected == 404:
        assert body["code"] == "not_found", body
    else:
        assert body["position"] == 0, body
    assert Click.objects.count() == (1 if expected == 201 else 0)
