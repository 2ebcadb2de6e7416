"""The click path's common case in one statement (PostgreSQL) decides and stores exactly what the Python path does.

On PostgreSQL ``click_ingest`` reads the session's trials and inserts the click in one statement when the common
case holds (``services.clicks._click_in_one_statement``); everything else is decided in Python on the rows that
statement read, and SQLite takes the Python path for everything. Each test below runs on both backends with the
same expected outcome, so the two suites of CI hold the statement's conditions (status, expiry, the trial's
presentations, phases A + B + C by the server's clock, ``replayed``) to the Python rules; on PostgreSQL the tests
also check that the common case took one statement and the others did not write anything in it.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from collector.models import Click, DisplayMode, Session, Study, Trial
from collector.services import clicks as clicks_service
from collector.services.clicks import CLICK_EARLY_TOLERANCE_MS, ClickRefused, click_ingest
from collector.services.session_start import session_start
from tests.factories import make_dataset, make_study, make_worker

NOW = timezone.now().replace(microsecond=123456)


@pytest.fixture
def frozen_now(monkeypatch):
    """The server's clock stopped at NOW, so the phase boundary can be tested to the millisecond."""
    monkeypatch.setattr(timezone, "now", lambda: NOW)
    return NOW


@pytest.fixture
def session(tmp_path, settings, frozen_now):
    settings.MEDIA_ROOT = tmp_path / "media"
    dataset = make_dataset(tmp_path, n_images=4, size=(64, 48))
    study = make_study(dataset, publish=True, batch_size=3, quota_pc=1, quota_mobile=1)
    return session_start(study=study, worker=make_worker(), device="pc")


def _present(session, position: int, *ago_ms: float) -> None:
    """Record the trial at ``position`` as presented once per ``ago_ms`` (milliseconds before NOW)."""
    trial = Trial.objects.get(session=session, position=position)
    trial.presentations = [
        {"id": f"p{index}", "at": (NOW - timedelta(milliseconds=ms)).isoformat()}
        for index, ms in enumerate(ago_ms)
    ]
    trial.save(update_fields=["presentations"])


def _abc_ms(session) -> int:
    study = Study.objects.get(pk=session.study_id)
    return study.image_ms + study.phase_b_ms() + study.blocked_ms


def _send(session, position: int, key: str | None = None, **overrides):
    """``click_ingest`` with the statements it ran: (receipt or ClickRefused, statements)."""
    fields = {
        "session_id": session.pk,
        "position": position,
        "idempotency_key": key or uuid.uuid4().hex,
        "x": 10.5,
        "y": 20.25,
        "shown_width": 800.0,
        "shown_height": 600.0,
        "pointer_type": "touch",
        "reaction_ms": 612.5,
        "event_timestamp_ms": 9000.0,
        "phase_onsets_ms": {"A": 1000.0, "B": 2500.0, "C": 4500.0, "D": 6000.0},
        "scheduled_onsets_ms": {"A": 1000.0, "B": 2500.0},
        "load_wait_ms": 12.5,
        "blocked_clicks": 2,
        "flags": ["tab_hidden", "ab", "a_b", "ab"],
        "refresh_hz": 59.94,
    }
    fields.update(overrides)
    with CaptureQueriesContext(connection) as captured:
        try:
            outcome = click_ingest(**fields)
        except ClickRefused as refused:
            outcome = refused
    statements = [
        q["sql"] for q in captured.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))
    ]
    return outcome, statements


def _one_statement(statements: list[str]) -> bool:
    return (
        connection.vendor == "postgresql" and len(statements) == 1 and statements[0].startswith("WITH base")
    )


@pytest.mark.django_db
def test_a_click_presented_once_is_stored_in_one_statement_with_every_field(session):
    _present(session, 1, 30_000)
    receipt, statements = _send(session, 1, key="key-one")
    assert receipt.created and receipt.position == 1 and receipt.missing_positions == [0, 2]
    assert len(statements) == (1 if connection.vendor == "postgresql" else 3), statements
    assert _one_statement(statements) == (connection.vendor == "postgresql")
    click = Click.objects.get(pk=receipt.click_id)
    trial = Trial.objects.get(pk=receipt.trial_id)
    assert (click.trial_id, click.idempotency_key, click.pointer_type) == (trial.pk, "key-one", "touch")
    assert (click.x, click.y, click.shown_width, click.shown_height) == (10.5, 20.25, 800.0, 600.0)
    assert (click.reaction_ms, click.event_timestamp_ms, click.received_at) == (612.5, 9000.0, NOW)
    assert (click.is_valid, click.distance_px, click.invalid_reason) == (None, None, "")
    assert trial.position == 1 and trial.phase_onsets_ms == {
        "A": 1000.0,
        "B": 2500.0,
        "C": 4500.0,
        "D": 6000.0,
    }
    assert trial.scheduled_onsets_ms == {"A": 1000.0, "B": 2500.0}
    assert (trial.load_wait_ms, trial.blocked_clicks, trial.refresh_hz) == (12.5, 2, 59.94)
    assert trial.flags == ["a_b", "ab", "tab_hidden"]  # sorted by code point, as Python's sorted
    # the other trials are untouched
    assert list(
        Trial.objects.filter(session=session).exclude(pk=trial.pk).values_list("flags", flat=True)
    ) == [
        [],
        [],
    ]


@pytest.mark.django_db
def test_a_replayed_trial_gets_the_replayed_flag_in_code_point_order(session):
    _present(session, 0, 60_000, 30_000)
    receipt, statements = _send(session, 0)
    assert receipt.created and receipt.missing_positions == [1, 2]
    assert _one_statement(statements) == (connection.vendor == "postgresql")
    assert Trial.objects.get(pk=receipt.trial_id).flags == ["a_b", "ab", "replayed", "tab_hidden"]


@pytest.mark.django_db
def test_a_trial_never_presented_is_stored_flagged_by_the_python_path(session):
    receipt, statements = _send(session, 2, flags=[])
    assert receipt.created
    assert not _one_statement(statements)  # nothing inserted by the statement; the Python path inserted it
    assert Trial.objects.get(pk=receipt.trial_id).flags == ["not_presented"]
    assert Click.objects.filter(trial_id=receipt.trial_id).count() == 1


@pytest.mark.parametrize("text_mode", [False, True], ids=["target", "text"])
@pytest.mark.django_db
def test_the_phase_boundary_is_the_same_to_the_millisecond(session, text_mode):
    """Presented exactly A + B + C - tolerance ago: taken; one millisecond later: refused (both paths)."""
    if text_mode:  # phase B lasts text_ms in the text display mode, target_ms otherwise
        Study.objects.filter(pk=session.study_id).update(
            display_mode=DisplayMode.TEXT_DESCRIPTION, text_ms=4321, target_ms=10
        )
    study = Study.objects.get(pk=session.study_id)
    boundary = _abc_ms(session) - CLICK_EARLY_TOLERANCE_MS
    assert boundary == study.image_ms + (4321 if text_mode else study.target_ms) + study.blocked_ms - 250
    _present(session, 0, boundary - 1)
    refused, statements = _send(session, 0, key="early")
    assert isinstance(refused, ClickRefused) and refused.reason == "click_too_early", refused
    assert not Click.objects.exists()
    _present(session, 0, boundary)
    receipt, statements = _send(session, 0, key="on-time")
    assert receipt.created and Click.objects.get().idempotency_key == "on-time"
    assert _one_statement(statements) == (connection.vendor == "postgresql")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"status": Session.Status.FINISHED}, "session_closed"),
        ({"status": Session.Status.EXPIRED}, "session_closed"),
        ({"expires_at": NOW}, "session_expired"),
    ],
)
@pytest.mark.django_db
def test_a_closed_or_expired_session_stores_nothing(session, change, reason):
    _present(session, 0, 30_000)
    Session.objects.filter(pk=session.pk).update(**change)
    refused, _statements = _send(session, 0)
    assert isinstance(refused, ClickRefused) and refused.reason == reason, refused
    assert not Click.objects.exists()
    assert Trial.objects.get(session=session, position=0).flags == []


@pytest.mark.django_db
def test_a_click_before_its_phase_d_onset_is_refused_and_its_retry_answered_as_stored(session):
    _present(session, 0, 30_000)
    refused, _statements = _send(session, 0, event_timestamp_ms=5999.0)
    assert refused.reason == "click_before_phase_d" and refused.field == "event_timestamp_ms"
    assert not Click.objects.exists()
    stored, _ = _send(session, 0, key="kept")
    again, _statements = _send(session, 0, key="kept")
    assert not again.created and again.click_id == stored.click_id


@pytest.mark.django_db
def test_a_retry_and_a_reused_key_write_nothing_and_are_one_statement(session):
    _present(session, 0, 30_000)
    _present(session, 1, 30_000)
    first, _ = _send(session, 0, key="same")
    retry, statements = _send(session, 0, key="same", x=99.0)
    assert not retry.created and retry.click_id == first.click_id and retry.missing_positions == [1, 2]
    assert len(statements) == 1, statements  # the statement read the rows; nothing inserted
    reused, statements = _send(session, 1, key="same")
    assert isinstance(reused, ClickRefused) and reused.reason == "key_reused", reused
    done, _ = _send(session, 0, key="other")
    assert isinstance(done, ClickRefused) and done.reason == "trial_done", done
    assert list(Click.objects.values_list("idempotency_key", "x")) == [("same", 10.5)]
    assert Trial.objects.get(session=session, position=1).flags == []


@pytest.mark.django_db
def test_an_unknown_session_or_position(session):
    with pytest.raises(Session.DoesNotExist):
        _send(session, 0, session_id=session.pk + 1000)
    refused, _ = _send(session, 7)
    assert refused.reason == "no_trial" and refused.field == "position"


@pytest.mark.one_backend
def test_the_statement_keeps_its_single_session_parameter():
    """The read is embedded in the statement with its one parameter renamed (PostgreSQL builds it)."""
    if connection.vendor != "postgresql":
        pytest.fail(
            "this test needs PostgreSQL (SQLite never builds the statement): run it with "
            "DATABASE_URL=postgres://postgres@127.0.0.1:5432/<db>, as `make test-services` does."
        )
    clicks_service._click_in_one_statement_sql.cache_clear()
    sql, click_names, trial_names = clicks_service._click_in_one_statement_sql()
    assert sql.count("%(session)s") == 1 and "%s" not in sql
    assert "trial_id" not in click_names and "received_at" in click_names
    assert trial_names == (
        "phase_onsets_ms",
        "scheduled_onsets_ms",
        "load_wait_ms",
        "blocked_clicks",
        "refresh_hz",
    )
