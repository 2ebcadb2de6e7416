"""Quality signals: each one raised by the behaviour it names, and absent from a clean batch."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from collector.models import Click, Session
from collector.services.clicks import click_record
from collector.services.quality import session_quality_flags
from collector.services.session_finish import session_finish
from collector.services.session_start import session_start
from collector.services.validation import session_validate
from tests.factories import make_dataset, make_study, make_worker, present_trials

pytestmark = pytest.mark.django_db


@pytest.fixture
def study(tmp_path):
    # objects at varying places, so clicks at each object's centre are not "identical positions"
    return make_study(make_dataset(tmp_path, n_images=20, size=(160, 120)), publish=True, min_reaction_ms=150)


def _batch(
    study, *, worker=None, device="pc", per_trial=None, client_info=None, detected_device="", finish=True
):
    """A batch clicked at each object's centre (jittered by position); ``per_trial(position)`` returns
    overrides for click_record."""
    session = session_start(
        study=study, worker=worker or make_worker(), device=device, client_info=client_info,
        detected_device=detected_device,
    )  # fmt: skip
    present_trials(session)
    for trial in session.trials.select_related("target__instance"):
        instance = trial.target.instance
        values = {
            "x": (instance.bbox_x0 + instance.bbox_x1) / 2 + trial.position,
            "y": (instance.bbox_y0 + instance.bbox_y1) / 2 - trial.position / 2,
            "reaction_ms": 400.0,
            "blocked_clicks": 0,
            "flags": [],
        }
        values.update((per_trial or (lambda p: {}))(trial.position))
        click_record(
            session=session, position=trial.position, idempotency_key=f"q-{session.pk}-{trial.position}",
            shown_width=160.0, shown_height=120.0, pointer_type="mouse" if device == "pc" else "touch", **values,
        )  # fmt: skip
    if finish:
        session_finish(session_id=session.pk)
        session_validate(session_id=session.pk)
    return Session.objects.get(pk=session.pk)


def _codes(session):
    return {flag["code"] for flag in session.quality_flags}


def test_clean_batch_has_no_flags(study):
    session = _batch(study)
    assert session.quality_flags == []
    assert session.validity == "counted"


def test_blocked_and_fast_clicks_are_reported_with_trials_and_numbers(study):
    session = _batch(
        study,
        per_trial=lambda p: {
            "blocked_clicks": 2 if p in (1, 4) else 0,
            "reaction_ms": 90.0 if p == 3 else 400.0,
        },
    )
    details = {flag["code"]: flag["detail"] for flag in session.quality_flags}
    assert set(details) == {"blocked_clicks", "fast_reaction"}
    assert "4 click(s)" in details["blocked_clicks"] and "trial(s) 2, 5" in details["blocked_clicks"]
    assert "trial 4: 90 ms" in details["fast_reaction"] and "150 ms" in details["fast_reaction"]


def test_interruptions_map_to_readable_codes(study):
    flags = {0: ["visibility_hidden"], 1: ["window_blur"], 2: ["viewport_resize"], 3: ["weird_thing"]}
    session = _batch(study, per_trial=lambda p: {"flags": flags.get(p, [])})
    assert _codes(session) == {"tab_hidden", "focus_lost", "viewport_changed", "trial_flag"}
    assert session.valid_clicks == 6  # interrupted trials are invalid


def test_identical_positions_across_trials(study):
    session = _batch(study, per_trial=lambda p: {"x": 80.0, "y": 60.0} if p < 3 else {})
    flag = next(f for f in session.quality_flags if f["code"] == "identical_positions")
    assert "3 clicks" in flag["detail"] and "trials 1, 2, 3" in flag["detail"]
    two_only = _batch(study, per_trial=lambda p: {"x": 80.0, "y": 60.0} if p < 2 else {})
    assert "identical_positions" not in _codes(two_only)


def test_webdriver_and_device_disagreement(study):
    session = _batch(study, client_info={"webdriver": True}, detected_device="mobile")
    assert {"webdriver", "device_mismatch"} <= _codes(session)
    detail = next(f["detail"] for f in session.quality_flags if f["code"] == "device_mismatch")
    assert "session said pc" in detail and "browser said mobile" in detail


def test_same_worker_on_two_devices_and_in_two_sessions_at_once(tmp_path, study):
    worker = make_worker()
    other_study = make_study(make_dataset(tmp_path / "other", n_images=10), publish=True)
    running = _batch(other_study, worker=worker, finish=False)  # still open in another tab
    session = _batch(study, worker=worker)
    assert "concurrent_sessions" in _codes(session)
    assert f"session {running.pk}" in next(
        f["detail"] for f in session.quality_flags if f["code"] == "concurrent_sessions"
    )
    assert "two_devices" not in _codes(session)

    # An abandoned session ended with its last click: a later session does not overlap it.
    Session.objects.filter(pk=running.pk).update(status=Session.Status.EXPIRED)
    later_worker = make_worker()
    early = _batch(other_study, worker=later_worker, finish=False)
    Session.objects.filter(pk=early.pk).update(
        status=Session.Status.EXPIRED, started_at=timezone.now() - timedelta(hours=2)
    )
    Click.objects.filter(trial__session=early).update(received_at=timezone.now() - timedelta(hours=2))
    clean = _batch(study, worker=later_worker)
    assert "concurrent_sessions" not in _codes(clean)

    mobile = _batch(study, worker=worker, device="mobile")
    assert "two_devices" in _codes(mobile)


def test_flags_are_recomputed_from_rows(study):
    session = _batch(study, per_trial=lambda p: {"blocked_clicks": 1 if p == 0 else 0})
    trials = list(session.trials.select_related("click", "target__instance__image"))
    assert session_quality_flags(session=session, trials=trials) == session.quality_flags
