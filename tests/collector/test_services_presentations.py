"""Trial presentations (collector.services.presentations) and their endpoint
``POST /api/annotator/<token>/presented`` (or a click's ``next_presentation``): a replayed trial is flagged and
does not count; a batch finished elsewhere is refused; link-mode workers are recognised again (collector.services.link_workers)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core import signing
from django.test import Client
from django.utils import timezone

from collector.models import Session, Trial, Worker
from collector.services.clicks import click_record
from collector.services.link_workers import link_worker_cookie, link_worker_cookie_name, link_worker_identify
from collector.services.presentations import (
    PresentationRefused,
    session_work_check,
    trial_presented_record,
    trial_server_flags,
)
from collector.services.session_finish import session_finish
from collector.services.session_start import session_start
from collector.services.tokens import session_token_make
from collector.services.validation import session_validate
from tests.factories import make_rect_dataset, make_study, make_worker, present_trials

pytestmark = pytest.mark.django_db


@pytest.fixture
def session(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    study = make_study(
        make_rect_dataset(tmp_path, n_images=4), publish=True, batch_size=4, min_valid_per_session=3
    )
    return session_start(study=study, worker=make_worker(), device="pc")


def _post(session, body) -> tuple[int, dict]:
    response = Client().post(
        f"/api/annotator/{session_token_make(session_id=session.pk)}/presented",
        data=json.dumps(body),
        content_type="application/json",
    )
    return response.status_code, response.json()


def _click(session, position: int, *, flags=None) -> None:
    # The trial was presented (now, by _post, or 30 s ago by present_trials) long enough ago for phase D.
    trial = Trial.objects.get(session=session, position=position)
    if trial.presentations:
        at = (timezone.now() - timedelta(seconds=30)).isoformat()
        Trial.objects.filter(pk=trial.pk).update(presentations=[{**e, "at": at} for e in trial.presentations])
    else:
        present_trials(session, positions=[position])
    # inside the rectangle of make_rect_dataset (x 150-249, y 100-199)
    click_record(
        session=session, position=position, idempotency_key=f"k-{session.pk}-{position}", x=200.5, y=150.5,
        shown_width=400.0, shown_height=300.0, pointer_type="mouse", reaction_ms=500.0, flags=flags,
    )  # fmt: skip


def test_first_showing_is_clean_and_a_retry_of_the_same_report_counts_once(session):
    assert _post(session, {"position": 0, "presentation_id": "p-1"}) == (
        200,
        {"ok": True, "position": 0, "presentations": 1, "replayed": False},
    )
    assert _post(session, {"position": 0, "presentation_id": "p-1"})[1]["presentations"] == 1
    trial = Trial.objects.get(session=session, position=0)
    assert trial.flags == [] and trial_server_flags(trial=trial) == []


def test_a_reload_mid_trial_flags_the_replay_and_the_click_does_not_count(session):
    """Phase B of trial 0 was on screen, the page reloaded, the player shows trial 0 again."""
    _post(session, {"position": 0, "presentation_id": "before-reload"})
    status, body = _post(session, {"position": 0, "presentation_id": "after-reload"})
    assert (status, body["presentations"], body["replayed"]) == (200, 2, True)
    trial = Trial.objects.get(session=session, position=0)
    assert trial.flags == ["replayed"] and trial_server_flags(trial=trial) == ["replayed"]
    # The click path keeps the server's flags with the client's, and the validation judges the trial.
    _click(session, 0, flags=["focus_lost"])
    assert Trial.objects.get(pk=trial.pk).flags == ["focus_lost", "replayed"]
    for position in (1, 2, 3):
        _post(session, {"position": position, "presentation_id": f"p-{position}"})
        _click(session, position)
    session_finish(session_id=session.pk)
    validated = session_validate(session_id=session.pk)
    replayed_click = Trial.objects.get(session=session, position=0).click
    assert (replayed_click.is_valid, replayed_click.invalid_reason) == (False, "trial_flagged")
    assert validated.valid_clicks == 3


def test_a_second_tab_cannot_replay_a_finished_batch(session):
    for position in range(4):
        _click(session, position)
    session_finish(session_id=session.pk)
    status, body = _post(session, {"position": 2, "presentation_id": "tab-2"})
    assert (status, body["code"], body["position"]) == (409, "session_finished", 2)
    assert "already finished" in body["message"]
    with pytest.raises(PresentationRefused) as refused:
        session_work_check(session=Session.objects.get(pk=session.pk))
    assert refused.value.reason == "session_finished"
    assert "tab-2" not in [
        entry["id"] for entry in Trial.objects.get(session=session, position=2).presentations
    ]


def test_a_trial_clicked_in_another_tab_is_refused(session):
    _post(session, {"position": 1, "presentation_id": "tab-1"})
    _click(session, 1)
    status, body = _post(session, {"position": 1, "presentation_id": "tab-2"})
    assert (status, body["code"]) == (409, "trial_done")


def test_an_expired_batch_is_refused(session):
    Session.objects.filter(pk=session.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert _post(session, {"position": 0, "presentation_id": "late"})[1]["code"] == "session_expired"


@pytest.mark.parametrize(
    ("body", "text"),
    [
        ({"position": "0", "presentation_id": "x"}, "position='0' must be an integer"),
        ({"position": 9, "presentation_id": "x"}, "no trial at position 9"),
        (
            {"position": 0, "presentation_id": ""},
            "presentation_id='' is refused: This field may not be blank.",
        ),
        ({"position": 0, "presentation_id": "x" * 65}, "must be 1-64 letters"),
    ],
)
def test_malformed_reports_name_the_field(session, body, text):
    status, answer = _post(session, body)
    assert status == 400 and text in answer["message"]


def test_a_forged_token_is_404(session):
    response = Client().post("/api/annotator/forged/presented", data="{}", content_type="application/json")
    assert response.status_code == 404


def test_presentations_are_bounded(session):
    for index in range(30):
        trial_presented_record(session_id=session.pk, position=3, presentation_id=f"p{index}")
    assert len(Trial.objects.get(session=session, position=3).presentations) == 20


def test_a_new_showing_is_one_statement_on_postgresql_and_stores_what_the_locked_path_stores(session):
    """The common report is one prepared UPDATE on PostgreSQL (no transaction block, no session lock): the
    same presentations, the same ``replayed`` flag merged into the client's flags in code-point order (as
    Python's ``sorted``; "a_b" sorts before "ab" there, not under a language collation), the same answer.
    On SQLite (and for every refusal or retry) the locked path answers; this test runs on both."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    Trial.objects.filter(session=session, position=2).update(flags=["tab_hidden", "ab", "a_b", "ab"])
    with CaptureQueriesContext(connection) as first:
        assert trial_presented_record(session_id=session.pk, position=2, presentation_id="one") == {
            "position": 2, "presentations": 1, "replayed": False,
        }  # fmt: skip
    trial = Trial.objects.get(session=session, position=2)
    assert [entry["id"] for entry in trial.presentations] == ["one"]
    assert timezone.now() - timezone.datetime.fromisoformat(trial.presentations[0]["at"]) < timedelta(
        seconds=60
    )
    assert trial.flags == ["tab_hidden", "ab", "a_b", "ab"]  # one showing: nothing to add, left as it was
    with CaptureQueriesContext(connection) as second:
        assert trial_presented_record(session_id=session.pk, position=2, presentation_id="two") == {
            "position": 2, "presentations": 2, "replayed": True,
        }  # fmt: skip
    trial = Trial.objects.get(session=session, position=2)
    assert [entry["id"] for entry in trial.presentations] == ["one", "two"]
    assert (
        trial.flags
        == sorted({"tab_hidden", "ab", "a_b", "replayed"})
        == ["a_b", "ab", "replayed", "tab_hidden"]
    )
    assert (
        trial_presented_record(session_id=session.pk, position=2, presentation_id="three")["presentations"]
        == 3
    )
    assert Trial.objects.get(pk=trial.pk).flags == ["a_b", "ab", "replayed", "tab_hidden"]  # already there
    if connection.vendor == "postgresql":
        for captured in (first, second):
            statements = [query["sql"] for query in captured.captured_queries]
            assert len(statements) == 1 and statements[0].startswith("UPDATE"), statements


def _click_carrying(session, position: int, key: str, next_presentation) -> tuple[int, dict]:
    """POST a click at ``position`` (inside the target) whose body carries ``next_presentation``."""
    body = {"position": position, "idempotency_key": key, "x": 200.5, "y": 150.5, "shown_width": 400.0,
            "shown_height": 300.0, "pointer_type": "mouse", "reaction_ms": 500.0, "flags": [],
            "next_presentation": next_presentation}  # fmt: skip
    response = Client().post(
        f"/api/annotator/{session_token_make(session_id=session.pk)}/click",
        data=json.dumps(body),
        content_type="application/json",
    )
    return response.status_code, response.json()


def _age_presentations(session, position: int) -> None:
    """Move the trial's recorded showings 30 s back, so its click is not too early."""
    trial = Trial.objects.get(session=session, position=position)
    at = (timezone.now() - timedelta(seconds=30)).isoformat()
    Trial.objects.filter(pk=trial.pk).update(presentations=[{**e, "at": at} for e in trial.presentations])


def test_a_click_carries_the_next_trials_report_which_counts_once_however_often_it_comes(session):
    """The player reports trial 1 on trial 0's click; the click's retry, and the player's own report with the
    same id (sent when the click's answer was late), are that same showing; trial 1 is then clicked clean."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    present_trials(session, positions=[0])
    carried = {"position": 1, "presentation_id": "next-1"}
    with CaptureQueriesContext(connection) as statements:
        status, body = _click_carrying(session, 0, "c-0", carried)
    assert status == 201 and body["created"] is True
    assert body["next_presentation"] == {"ok": True, "position": 1, "presentations": 1, "replayed": False}
    if connection.vendor == "postgresql":  # the click's one statement records the carried report too
        assert len(statements.captured_queries) == 1, [q["sql"][:80] for q in statements.captured_queries]
    status, body = _click_carrying(session, 0, "c-0", carried)  # the network retry of the same click
    assert (status, body["created"], body["next_presentation"]["presentations"]) == (200, False, 1)
    assert _post(session, carried) == (
        200,
        {"ok": True, "position": 1, "presentations": 1, "replayed": False},
    )
    trial = Trial.objects.get(session=session, position=1)
    assert [entry["id"] for entry in trial.presentations] == ["next-1"] and trial.flags == []
    _age_presentations(session, 1)
    status, body = _click_carrying(session, 1, "c-1", None)  # null: nothing carried
    assert status == 201 and "next_presentation" not in body
    clicked = Trial.objects.get(session=session, position=1)
    assert clicked.flags == [], "a carried report is a report: the click is not flagged not_presented"
    # a carried report of a trial shown before (a reload) is a replay, as on its own
    present_trials(session, positions=[2, 3])
    Trial.objects.filter(session=session, position=2).update(flags=["tab_hidden"])
    status, body = _click_carrying(session, 3, "c-3", {"position": 2, "presentation_id": "again-2"})
    assert status == 201, body
    assert body["next_presentation"] == {"ok": True, "position": 2, "presentations": 2, "replayed": True}
    assert Trial.objects.get(session=session, position=2).flags == ["replayed", "tab_hidden"]


def test_a_carried_report_the_rules_refuse_never_refuses_the_click_that_carried_it(session):
    _click(session, 1)  # trial 1 answered (in another tab)
    present_trials(session, positions=[0, 2])
    status, body = _click_carrying(session, 0, "c-0", {"position": 1, "presentation_id": "late-1"})
    assert status == 201 and body["created"] is True
    refused = body["next_presentation"]
    assert (refused["ok"], refused["position"], refused["code"]) == (False, 1, "trial_done")
    assert "already answered" in refused["message"]
    status, body = _click_carrying(session, 2, "c-2", {"position": 9, "presentation_id": "nowhere"})
    assert status == 201
    assert (
        body["next_presentation"]["code"] == "invalid"
        and "no trial at position 9" in (body["next_presentation"]["message"])
    )
    assert sorted(Trial.objects.filter(session=session, click__isnull=False).values_list("position", flat=True)) == [
        0, 1, 2
    ]  # fmt: skip
    assert "late-1" not in [e["id"] for e in Trial.objects.get(session=session, position=1).presentations]


@pytest.mark.parametrize(
    ("carried", "field", "text"),
    [
        (
            {"position": 1, "presentation_id": "a b"},
            "next_presentation.presentation_id",
            "must be 1-64 letters",
        ),
        ({"position": "1", "presentation_id": "p"}, "next_presentation.position", "must be an integer"),
        ({"presentation_id": "p"}, "next_presentation.position", "is missing"),
        ("p-1", "next_presentation", ""),
    ],
)
def test_a_malformed_carried_report_refuses_the_request_naming_the_field_and_stores_nothing(
    session, carried, field, text
):
    present_trials(session, positions=[0])
    status, body = _click_carrying(session, 0, "c-0", carried)
    assert (status, body["field"]) == (400, field) and text in body["message"], body
    assert not Trial.objects.filter(session=session, click__isnull=False).exists()
    assert Trial.objects.get(session=session, position=1).presentations in (None, [])


def test_a_link_worker_is_recognised_on_the_next_visit_of_the_same_study():
    first, signed = link_worker_identify(study_id=7, signed_id="")
    assert first.platform == "link" and first.external_id.startswith("link-")
    again, signed_again = link_worker_identify(study_id=7, signed_id=signed)
    assert (again.pk, signed_again) == (first.pk, signed)
    other_study, _ = link_worker_identify(study_id=8, signed_id=signed)  # scoped to the study
    forged = signed[:-2] + ("AA" if not signed.endswith("AA") else "BB")
    forged_worker, _ = link_worker_identify(study_id=7, signed_id=forged)
    assert len({first.pk, other_study.pk, forged_worker.pk}) == 3
    assert Worker.objects.filter(platform="link").count() == 3
    assert signing.loads(signed, salt="clicklab.link.worker.v1") == {"study": 7, "w": first.external_id}
    cookie = link_worker_cookie(study_id=7, secure=True)
    assert cookie == {
        "key": link_worker_cookie_name(study_id=7), "max_age": 365 * 24 * 3600, "path": "/s/", "secure": True,
        "httponly": True, "samesite": "Lax",
    }  # fmt: skip
