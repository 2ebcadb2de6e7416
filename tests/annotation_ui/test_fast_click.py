"""annotation_ui.fast_click: a stored click (a recorded presentation) is answered before the other middleware
and DRF, with exactly the answer the DRF view gives (status, bytes, headers); everything else is answered by
the DRF view, as before; the plain input checks never take what the serializers refuse, nor give other
values."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from annotation_ui import serializers as contract
from annotation_ui.api import ClickView, Finish, Presented
from annotation_ui.fast_click import click_input, presented_input
from collector.models import Click, Session
from collector.services.sessions import session_start
from collector.services.tokens import session_token_make
from tests.factories import make_dataset, make_study, make_worker, present_trials

PLAYER_CLICK = {"position": 0, "idempotency_key": "0b9e4c1e-5d1f-4a59-9d0c-2f6b8a7e9c11", "x": 5.5, "y": 7.25,
                "shown_width": 640, "shown_height": 480, "pointer_type": "touch", "reaction_ms": 412.3,
                "event_timestamp_ms": 9000.5, "phase_onsets_ms": {"A": 1000.1, "B": 2500.2, "C": 4500.3, "D": 6000.4},
                "scheduled_onsets_ms": {"A": 1000, "B": 2500, "C": 4500, "D": 6000}, "load_wait_ms": 0,
                "blocked_clicks": 1, "flags": ["focus_lost"], "refresh_hz": 59.94,
                "next_presentation": {"position": 1, "presentation_id": "7c1d2e3f-0a4b-4c5d-8e6f-9a0b1c2d3e4f"}}  # fmt: skip


@pytest.fixture
def study(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    return make_study(make_dataset(tmp_path, n_images=4, size=(64, 48)), publish=True, batch_size=3)


def _token(study) -> str:
    session = session_start(study=study, worker=make_worker(), device="pc")
    present_trials(session)
    return session_token_make(session_id=session.pk)


def _count_calls(monkeypatch, view_class) -> list[int]:
    """How many requests reached ``view_class``'s POST handler (the fast path answers without it)."""
    calls: list[int] = []
    post = view_class.post

    def counted(self, request, token):
        calls.append(1)
        return post(self, request, token)

    monkeypatch.setattr(view_class, "post", counted)
    return calls


@pytest.fixture
def view_calls(monkeypatch) -> list[int]:
    return _count_calls(monkeypatch, ClickView)


@pytest.fixture
def presented_view_calls(monkeypatch) -> list[int]:
    return _count_calls(monkeypatch, Presented)


def _post(token: str, body, endpoint: str = "click", **headers):
    raw = body if isinstance(body, bytes | str) else json.dumps(body)
    content_type = headers.pop("content_type", "application/json")
    response = Client().post(
        f"/api/annotator/{token}/{endpoint}", data=raw, content_type=content_type, **headers
    )
    # the two runs use two sessions and run at two moments: a session id and how early a click came are the
    # expected differences in a message
    return (
        response.status_code,
        re.sub(rb"(session|arrived) \d+", rb"\1 N", response.content),
        sorted(response.headers.items()),
    )


def _exchange(study, settings, *, fast: bool) -> list:
    """The same conversation, on a fresh session: a click, its retry, the next click in Russian with a
    charset, and the refusals (a key reused, a trial done, a bad token, a malformed field, too early)."""
    settings.CLICK_FAST_PATH = fast
    token = _token(study)
    run = "fast" if fast else "view"  # idempotency keys are unique across sessions
    # a click carrying a showing the rules refuse (its own trial, answered by it): the click is stored all the
    # same (a carried showing the rules take is in tests/collector/test_services_presentations.py)
    first = {
        **PLAYER_CLICK,
        "idempotency_key": f"{run}-0",
        "next_presentation": {"position": 0, "presentation_id": f"{run}-n0"},
    }
    answers = [
        _post(token, first),
        _post(token, first),
        _post(token, {**first, "position": 1, "idempotency_key": f"{run}-1"}, HTTP_ACCEPT_LANGUAGE="ru",
              content_type="application/json; charset=utf-8"),
        _post(token, {**first, "position": 2, "idempotency_key": f"{run}-1"}),
        _post(token, {**first, "idempotency_key": f"{run}-new"}),
        _post(token[:-3] + "xyz", {**first, "position": 2, "idempotency_key": f"{run}-2"}),
        _post(token, {**first, "position": 2, "idempotency_key": f"{run}-2", "x": "5.5"}),
        _post(token, {**first, "position": 2, "idempotency_key": f"{run}-2", "next_presentation": {"position": 0}}),
    ]  # fmt: skip
    fresh = session_start(study=study, worker=make_worker(), device="pc")  # presented just now: too early
    present_trials(fresh, seconds_ago=0.0)
    answers.append(_post(session_token_make(session_id=fresh.pk), {**first, "idempotency_key": f"{run}-3"}))
    return answers


def _both_paths(exchange, study, settings, view_calls: list[int]) -> tuple[list, tuple[int, int]]:
    """Run ``exchange`` with the fast path on, then off; assert every answer is the same. Returns the
    answers and how many requests reached the view in each run."""
    fast = exchange(study, settings, fast=True)
    by_view_fast = len(view_calls)
    normal = exchange(study, settings, fast=False)
    for index, (answer, expected) in enumerate(zip(fast, normal, strict=True)):
        assert answer == expected, f"request {index}: fast path {answer} != DRF view {expected}"
    return normal, (by_view_fast, len(view_calls) - by_view_fast)


@pytest.mark.django_db
def test_the_fast_path_answers_stored_clicks_exactly_as_the_view_and_leaves_the_rest_to_it(
    study, settings, view_calls
):
    normal, by_view = _both_paths(_exchange, study, settings, view_calls)
    assert [status for status, _body, _headers in normal] == [201, 200, 201, 409, 409, 404, 400, 400, 409]
    # the three stored clicks (201, 200, 201) were answered without the view; the six refusals by it
    assert by_view == (6, 9)
    carried = json.loads(normal[0][1])["next_presentation"]
    assert (carried["ok"], carried["position"], carried["code"]) == (False, 0, "trial_done")
    assert json.loads(normal[7][1])["field"] == "next_presentation.presentation_id"
    assert sorted(Click.objects.values_list("idempotency_key", flat=True)) == [
        "fast-0", "fast-1", "view-0", "view-1"
    ]  # fmt: skip


def _presented_exchange(study, settings, *, fast: bool) -> list:
    """A first showing, its network retry, a replay (a new id), in Russian; then the refusals: a trial with its
    click, no such position, a malformed id, a bad token."""
    settings.CLICK_FAST_PATH = fast
    session = session_start(study=study, worker=make_worker(), device="pc")
    token = session_token_make(session_id=session.pk)
    run = "fast" if fast else "view"
    answers = [
        _post(token, {"position": 0, "presentation_id": f"{run}-p1"}, "presented"),
        _post(token, {"position": 0, "presentation_id": f"{run}-p1"}, "presented"),
        _post(token, {"position": 0, "presentation_id": f"{run}-p2", "other": 1}, "presented",
              HTTP_ACCEPT_LANGUAGE="ru"),
    ]  # fmt: skip
    present_trials(session, positions=[1])
    assert _post(token, {**PLAYER_CLICK, "position": 1, "idempotency_key": f"{run}-c"})[0] == 201
    answers += [
        _post(token, {"position": 1, "presentation_id": f"{run}-p3"}, "presented"),
        _post(token, {"position": 99, "presentation_id": f"{run}-p4"}, "presented"),
        _post(token, {"position": 2, "presentation_id": "a b"}, "presented"),
        _post(token[:-3] + "xyz", {"position": 2, "presentation_id": f"{run}-p5"}, "presented"),
    ]
    return answers


@pytest.mark.django_db
def test_the_fast_path_records_presentations_exactly_as_the_view_and_leaves_refusals_to_it(
    study, settings, presented_view_calls
):
    normal, by_view = _both_paths(_presented_exchange, study, settings, presented_view_calls)
    assert [status for status, _body, _headers in normal] == [200, 200, 200, 409, 400, 400, 404]
    assert json.loads(normal[2][1])["replayed"] is True
    assert by_view == (4, 7)


def _finish_exchange(study, settings, *, fast: bool) -> list:
    """A finish with clicks missing, the finish once all are in (with a prolific code to show), its retry in
    Russian, an empty body; then the refusals: a body that is not an object, a bad token, an expired session."""
    settings.CLICK_FAST_PATH = fast
    session = session_start(study=study, worker=make_worker(), device="pc", platform_assignment_id="A")
    token = session_token_make(session_id=session.pk)
    run = "fast" if fast else "view"
    answers = [_post(token, {}, "finish")]
    for position in range(3):
        present_trials(session, positions=[position])
        assert _post(token, {**PLAYER_CLICK, "position": position, "idempotency_key": f"{run}-f{position}",
                             "next_presentation": None})[0] == 201  # fmt: skip
    answers += [
        _post(token, {"unknown": 1}, "finish", HTTP_ACCEPT_LANGUAGE="ru"),
        _post(token, {}, "finish"),
        _post(token, b"", "finish"),
        _post(token, [], "finish"),
        _post(token[:-3] + "xyz", {}, "finish"),
    ]
    expired = session_start(study=study, worker=make_worker(), device="pc")
    Session.objects.filter(pk=expired.pk).update(status=Session.Status.EXPIRED)
    answers.append(_post(session_token_make(session_id=expired.pk), {}, "finish"))
    # the code is the session's own, and a session id may have another number of digits in the other run
    # (the Content-Length of a message naming it); the clicks' tests compare Content-Length
    code = Session.objects.get(pk=session.pk).completion_code
    return [
        (
            status,
            body.replace(code.encode(), b"<code>"),
            [item for item in headers if item[0] != "Content-Length"],
        )
        for status, body, headers in answers
    ]


@pytest.mark.django_db
def test_the_fast_path_finishes_exactly_as_the_view_and_leaves_refusals_to_it(study, settings, monkeypatch):
    calls = _count_calls(monkeypatch, Finish)
    normal, by_view = _both_paths(_finish_exchange, study, settings, calls)
    assert [status for status, _body, _headers in normal] == [409, 200, 200, 200, 400, 404, 409]
    assert json.loads(normal[0][1])["missing"] == [0, 1, 2]
    assert json.loads(normal[1][1])["finish"]["code"] == "<code>"
    # two finishes by the fast path; by the view the refusals and the empty body (the test client sends no
    # content type with it, which the fast path leaves to the view)
    assert by_view == (5, 7)


@pytest.mark.parametrize(
    "body",
    [{"position": 0, "presentation_id": "p-1"}, {"position": 10_000, "presentation_id": "x" * 64, "z": None},
     {"position": 10_001, "presentation_id": "p"}, {"position": -1, "presentation_id": "p"},
     {"position": True, "presentation_id": "p"}, {"position": 1.0, "presentation_id": "p"},
     {"position": 0, "presentation_id": "x" * 65}, {"position": 0, "presentation_id": ""},
     {"position": 0, "presentation_id": "p\n"}, {"position": 0, "presentation_id": 5}, {"position": 0},
     {"presentation_id": "p"}, {"position": 0, "presentation_id": None}],
)  # fmt: skip
def test_the_plain_presented_check_agrees_with_the_serializer(body):
    serializer = contract.PresentedIn(data=body)
    plain = presented_input(body)
    assert (plain is not None) == serializer.is_valid(), body
    if plain is not None:
        assert plain == dict(serializer.validated_data)


@pytest.mark.django_db
def test_the_fast_path_stores_the_click_the_view_stores(study, settings, view_calls):
    stored = {}
    for fast in (True, False):
        settings.CLICK_FAST_PATH = fast
        token = _token(study)
        assert _post(token, {**PLAYER_CLICK, "idempotency_key": f"k-{fast}"})[0] == 201
        click = Click.objects.select_related("trial").get(idempotency_key=f"k-{fast}")
        stored[fast] = (
            [getattr(click, name) for name in ("x", "y", "shown_width", "shown_height", "pointer_type",
                                               "reaction_ms", "event_timestamp_ms")],
            [getattr(click.trial, name) for name in ("phase_onsets_ms", "scheduled_onsets_ms", "load_wait_ms",
                                                     "blocked_clicks", "flags", "refresh_hz")],
        )  # fmt: skip
    assert len(view_calls) == 1
    assert stored[True] == stored[False]


def _serializer_answer(data: dict):
    serializer = contract.ClickIn(data=data)
    if not serializer.is_valid():
        return None
    return json.loads(json.dumps(serializer.validated_data))


def _same_json(value) -> str:
    """Values and types (5 and 5.0 differ), nested key order kept, top-level keys sorted (they become kwargs)."""
    return json.dumps({key: value[key] for key in sorted(value)})


NUMBERS = st.one_of(
    st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(
        [0, 1, -1, 0.5, 999.99, 1000.0, 1000.5, 1e10, -1e10, 1e10 + 1, 100_000.0, 100_000.5, 10**400]
    ),
)
ANY = st.one_of(
    NUMBERS,
    st.booleans(),
    st.none(),
    st.text(max_size=70),
    st.lists(st.text(alphabet="abc_.:-\n ", max_size=45), max_size=22),
    st.dictionaries(
        st.sampled_from(["A", "B", "C", "D", "click", "E"]), st.one_of(NUMBERS, st.none(), st.text())
    ),
)
FIELDS = {
    "position": st.one_of(st.integers(min_value=-2, max_value=10_002), ANY),
    "idempotency_key": st.one_of(st.from_regex(r"[A-Za-z0-9_.:-]{0,66}", fullmatch=True), ANY),
    "x": NUMBERS, "y": NUMBERS, "shown_width": NUMBERS, "shown_height": NUMBERS,
    "pointer_type": st.one_of(st.sampled_from(["mouse", "touch", "pen", "", "Mouse"]), ANY),
    "reaction_ms": ANY, "event_timestamp_ms": ANY, "load_wait_ms": ANY, "refresh_hz": ANY,
    "phase_onsets_ms": ANY, "scheduled_onsets_ms": ANY,
    "blocked_clicks": st.one_of(st.integers(min_value=-2, max_value=10_002), ANY),
    "flags": st.one_of(st.lists(st.from_regex(r"[a-z_]{0,42}", fullmatch=True), max_size=22), ANY),
    "next_presentation": st.one_of(
        st.fixed_dictionaries(
            {"position": st.one_of(st.integers(min_value=-2, max_value=10_002), ANY),
             "presentation_id": st.one_of(st.from_regex(r"[A-Za-z0-9_.:-]{0,66}", fullmatch=True), ANY)},
            optional={"other": ANY},
        ),
        ANY,
    ),
    "extra": ANY,
}  # fmt: skip


@st.composite
def click_bodies(draw) -> dict:
    body = {}
    for name, values in FIELDS.items():
        choice = draw(st.sampled_from(["player", "drawn", "absent"]))
        if choice == "player" and name in PLAYER_CLICK:
            body[name] = PLAYER_CLICK[name]
        elif choice == "drawn" or (choice == "player" and name != "extra"):
            body[name] = draw(values)
    return body


@given(click_bodies())
@example(PLAYER_CLICK)
@example(
    {
        key: PLAYER_CLICK[key]
        for key in ("position", "idempotency_key", "x", "y", "shown_width", "shown_height")
    }
)
@example({**PLAYER_CLICK, "flags": None, "phase_onsets_ms": None, "reaction_ms": None, "pointer_type": ""})
@example({**PLAYER_CLICK, "phase_onsets_ms": {"click": 1, "D": None, "A": 2, "E": "x"}, "x": True})
@example({**PLAYER_CLICK, "idempotency_key": "abc\n"})
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_plain_check_takes_only_what_the_serializer_takes_and_gives_its_values(body):
    plain = click_input(body)
    if plain is None:
        return
    expected = _serializer_answer(body)
    assert expected is not None, f"the plain check took a body the serializer refuses: {body!r}"
    assert _same_json(plain) == _same_json(expected)


def test_the_plain_check_takes_what_the_player_sends():
    assert click_input(PLAYER_CLICK) is not None
    minimal = {key: PLAYER_CLICK[key] for key in ("position", "idempotency_key", "x", "y", "shown_width",
                                                  "shown_height")}  # fmt: skip
    assert _same_json(click_input(minimal)) == _same_json(_serializer_answer(minimal))


def _edges(lowest: float, highest: float) -> list:
    return [lowest, highest, lowest - 0.5, highest + 0.5, int(lowest), int(highest), int(highest) + 1, 0, 0.0]


EDGES = {name: _edges(*bounds) for name, bounds in {
    "position": (0, contract.MAX_POSITION), "x": (-1e5, 1e5), "y": (-1e5, 1e5), "shown_width": (1.0, 1e5),
    "shown_height": (1.0, 1e5), "reaction_ms": (-1e10, 1e10), "event_timestamp_ms": (-1e10, 1e10),
    "load_wait_ms": (0.0, 1e10), "refresh_hz": (0.0, 1000.0), "blocked_clicks": (0, 10_000)}.items()
}  # fmt: skip
OTHERS = [None, True, False, "1", "", [], {}, 10**400, -(10**400), "mouse", ["a"], {"A": 1}]


@pytest.mark.parametrize("name", [*EDGES, "idempotency_key", "pointer_type", "flags", "phase_onsets_ms",
                                  "scheduled_onsets_ms", "next_presentation"])  # fmt: skip
def test_the_plain_check_agrees_with_the_serializer_on_each_fields_edges(name):
    values = EDGES.get(name, []) + OTHERS + [
        "k" * 64, "k" * 65, "a b", "é", "pen", "Mouse", ["x" * 40], ["x" * 41], ["ok"] * 20, ["ok"] * 21,
        ["bad flag"], {"A": 1e10, "click": -1e10}, {"A": 1e10 + 1}, {"B": "1"}, {"C": None, "Z": "z"},
        {"position": 0, "presentation_id": "p"}, {"position": 10_000, "presentation_id": "p" * 64, "z": 1},
        {"position": 10_001, "presentation_id": "p"}, {"position": 1, "presentation_id": "a b"},
        {"position": True, "presentation_id": "p"}, {"position": 1.0, "presentation_id": "p"},
        {"position": 1, "presentation_id": None}, {"position": 1}, {"presentation_id": "p"},
    ]  # fmt: skip
    for value in [*values, "absent"]:
        body = dict(PLAYER_CLICK)
        if value == "absent":
            body.pop(name)
        else:
            body[name] = value
        plain, expected = click_input(body), _serializer_answer(body)
        if plain is not None:
            assert expected is not None, (
                f"{name}={value!r}: taken by the plain check, refused by the serializer"
            )
            assert _same_json(plain) == _same_json(expected), f"{name}={value!r}"
        elif expected is not None and (value is None or type(value) in (int, float) or value == "absent"):
            pytest.fail(f"{name}={value!r}: the serializer takes it, the plain check sends it the slow way")


@pytest.mark.django_db
def test_an_unexpected_error_in_the_fast_path_is_logged_and_the_view_answers(
    study, settings, view_calls, monkeypatch, caplog
):
    import annotation_ui.fast_click as fast_click

    def broken(**fields):
        raise RuntimeError("a bug in the fast path")

    monkeypatch.setattr(fast_click, "click_ingest", broken)
    token = _token(study)
    status, body, _headers = _post(token, {**PLAYER_CLICK, "idempotency_key": "k-bug"})
    assert status == 201 and json.loads(body)["created"] is True
    assert len(view_calls) == 1
    warnings = [r for r in caplog.records if r.name == "annotation_ui.fast_click"]
    assert (
        len(warnings) == 1
        and warnings[0].exc_info
        and "a bug in the fast path" in str(warnings[0].exc_info[1])
    )
    assert Click.objects.filter(idempotency_key="k-bug").count() == 1
