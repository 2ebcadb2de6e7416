"""session_start / click_record / session_finish on the real database (and broker for the finish task)."""

from __future__ import annotations

import uuid

import pytest
from django.utils import timezone

from collector.models import Click, Session, Target, Trial
from collector.services.clicks import ClickRefused, click_record
from collector.services.codes import completion_code_make
from collector.services.session_client import session_client_report
from collector.services.session_finish import SessionFinishRefused, session_finish
from collector.services.session_start import SessionStartRefused, session_start
from tasks import names as task_names
from tests.factories import make_dataset, make_study, make_worker, present_trials
from tests.support.concurrency import at_once


def _click(session, index, key=None, **overrides):
    present_trials(session, positions=[index])
    values = {
        "session": session,
        "position": index,
        "idempotency_key": key or uuid.uuid4().hex,
        "x": 10.5,
        "y": 20.25,
        "shown_width": 800.0,
        "shown_height": 600.0,
        "pointer_type": "mouse",
        "reaction_ms": 612.5,
        "event_timestamp_ms": 12345.6,
        "phase_onsets_ms": {"A": 1000.0, "B": 2500.0, "C": 4500.0, "D": 6000.0, "click": 6612.5},
        "blocked_clicks": 2,
        "flags": ["focus_lost"],
        "refresh_hz": 59.94,
    }
    values.update(overrides)
    return click_record(**values)


@pytest.fixture
def study(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    dataset = make_dataset(tmp_path, n_images=4, size=(64, 48))
    return make_study(dataset, publish=True, batch_size=3, quota_pc=1, quota_mobile=1)


@pytest.mark.django_db
def test_start_creates_trials_in_order_and_reserves_targets(study):
    worker = make_worker()
    before = timezone.now()
    session = session_start(study=study, worker=worker, device="pc", user_agent="UA", client_info={"dpr": 2})

    trials = list(session.trials.order_by("position"))
    assert [t.position for t in trials] == [0, 1, 2]
    assert len({t.target.instance.image_id for t in trials}) == 3
    assert session.status == Session.Status.STARTED and session.device == "pc"
    assert session.round.number == 1 and session.client_info == {"dpr": 2}
    expected_expiry = before.timestamp() + study.session_timeout_s
    assert abs(session.expires_at.timestamp() - expected_expiry) < 5
    taken = Target.objects.filter(pk__in=[t.target_id for t in trials])
    assert sorted(t.inflight_pc for t in taken) == [1, 1, 1]
    assert all(t.inflight_mobile == 0 for t in taken)


@pytest.mark.django_db
def test_start_refuses_draft_study_unknown_device_and_when_nothing_is_left(tmp_path, study):
    draft = make_study(study.dataset)
    with pytest.raises(SessionStartRefused, match="not open"):
        session_start(study=draft, worker=make_worker(), device="pc")
    with pytest.raises(SessionStartRefused, match="tablet"):
        session_start(study=study, worker=make_worker(), device="tablet")
    # quota_pc=1 and 4 targets: the first worker takes 3, the second the last one (a tail batch: the study
    # allows them and needs 1 valid click), the third gets nothing for now (all 4 are in running batches).
    study.short_batches, study.min_valid_per_session = "tail", 1
    study.save()
    session_start(study=study, worker=make_worker(), device="pc")
    second = session_start(study=study, worker=make_worker(), device="pc")
    assert second.trials.count() == 1
    with pytest.raises(SessionStartRefused, match="being worked on by other participants"):
        session_start(study=study, worker=make_worker(), device="pc")
    assert Session.objects.count() == 2


@pytest.mark.django_db
def test_start_again_for_the_same_assignment_resumes_the_session(study):
    worker = make_worker(platform="toloka")
    first = session_start(study=study, worker=worker, device="mobile", platform_assignment_id="A-1")
    again = session_start(study=study, worker=worker, device="mobile", platform_assignment_id="A-1")
    assert again.pk == first.pk
    assert Session.objects.count() == 1


@pytest.mark.django_db
def test_click_is_stored_once_per_key_and_a_second_click_is_refused(study):
    session = session_start(study=study, worker=make_worker(), device="pc")
    click, created = _click(session, 1, key="key-1")
    assert created
    assert (click.x, click.y, click.pointer_type, click.reaction_ms) == (10.5, 20.25, "mouse", 612.5)
    trial = Trial.objects.get(session=session, position=1)
    assert trial.blocked_clicks == 2 and trial.flags == ["focus_lost"] and trial.refresh_hz == 59.94
    assert trial.phase_onsets_ms["D"] == 6000.0

    replay, created_again = _click(session, 1, key="key-1", x=99.0)
    assert not created_again and replay.pk == click.pk and replay.x == 10.5
    with pytest.raises(ClickRefused, match="already has its click"):
        _click(session, 1, key="key-2")
    with pytest.raises(ClickRefused, match="another trial"):
        _click(session, 2, key="key-1")
    assert Click.objects.count() == 1


@pytest.mark.django_db
def test_a_click_on_a_position_the_batch_lacks_is_refused_naming_it(study):
    """The field values are the click contract's (annotation_ui.serializers.ClickIn; its refusals are tested
    over HTTP in tests/annotation_ui); what the rows decide is the service's."""
    session = session_start(study=study, worker=make_worker(), device="pc")
    with pytest.raises(ClickRefused, match="no trial at position 7") as refused:
        _click(session, 7)
    assert (refused.value.reason, refused.value.field) == ("no_trial", "position")
    assert not Click.objects.exists()


@pytest.mark.django_db
def test_the_click_path_reads_each_field_as_the_orm_does(study):
    """The click path's hand-written read (``_session_trials``) gives every field it selects the value the ORM
    gives it, on either backend: a column read into the wrong field (from_db takes values in the model's field
    order) or a missing converter (SQLite's datetimes, JSON) shows here."""
    from collector.services import clicks as clicks_service

    session = session_start(study=study, worker=make_worker(), device="pc")
    clicked, _created = _click(session, 1)
    present_trials(session, positions=[0, 2])
    for position in (0, 1, 2):
        hot_session, rows, trial = clicks_service._session_trials(session.pk, position)
        assert [(row.position, row.click_pk) for row in rows] == [(0, None), (1, clicked.pk), (2, None)]
        assert trial is not None and trial.position == position and trial.session is hot_session
        stored = Trial.objects.select_related("session__study").get(pk=trial.pk)
        for name in clicks_service._HOT_TRIAL_FIELDS:
            assert getattr(trial, name) == getattr(stored, name), name
        for name in clicks_service._HOT_SESSION_FIELDS:
            assert getattr(trial.session, name) == getattr(stored.session, name), name
        for name in clicks_service._HOT_STUDY_FIELDS:
            assert getattr(trial.session.study, name) == getattr(stored.session.study, name), name
        assert trial.presentations and trial.session.expires_at.tzinfo is not None
        expected = (clicked.pk, clicked.idempotency_key) if trial.position == 1 else (None, None)
        assert (trial.click_pk, trial.click_key) == expected
        assert rows[position] == (trial.pk, position, *expected)
    assert clicks_service._session_trials(session.pk, 7)[2] is None  # no trial there
    with pytest.raises(Session.DoesNotExist):
        clicks_service._session_trials(session.pk + 1000, 0)


@pytest.mark.django_db
def test_click_after_expiry_is_refused(study):
    session = session_start(study=study, worker=make_worker(), device="pc")
    Session.objects.filter(pk=session.pk).update(expires_at=timezone.now())
    with pytest.raises(ClickRefused, match="expired"):
        _click(session, 0)


@pytest.mark.django_db
def test_finish_needs_every_click_then_is_idempotent(study):
    session = session_start(study=study, worker=make_worker(), device="pc", platform_assignment_id="ASG")
    _click(session, 0)
    with pytest.raises(SessionFinishRefused) as refused:
        session_finish(session_id=session.pk)
    assert refused.value.missing_positions == [1, 2]
    assert Session.objects.get(pk=session.pk).status == Session.Status.STARTED
    _click(session, 1)
    _click(session, 2)

    finished = session_finish(session_id=session.pk)
    assert finished.status == Session.Status.FINISHED and finished.finished_at is not None
    assert finished.completion_code == completion_code_make(session_id=session.pk, assignment_id="ASG")
    again = session_finish(session_id=session.pk)
    assert again.completion_code == finished.completion_code and again.finished_at == finished.finished_at
    with pytest.raises(ClickRefused, match="finished"):
        _click(session, 0)


@pytest.mark.django_db
def test_finish_of_an_expired_session_is_refused(study):
    session = session_start(study=study, worker=make_worker(), device="pc")
    Session.objects.filter(pk=session.pk).update(status=Session.Status.EXPIRED)
    with pytest.raises(SessionFinishRefused, match="expired"):
        session_finish(session_id=session.pk)


@pytest.mark.django_db
def test_client_report_merges_measurements(study):
    session = session_start(study=study, worker=make_worker(), device="pc", client_info={"a": 1})
    session_client_report(session=session, client_info={"refresh_hz": 120.0}, detected_device="mobile")
    stored = Session.objects.get(pk=session.pk)
    assert stored.client_info == {"a": 1, "refresh_hz": 120.0} and stored.detected_device == "mobile"
    with pytest.raises(ValueError, match="larger than"):
        session_client_report(session=session, client_info={"blob": "x" * 9000})


@pytest.mark.django_db(transaction=True)
def test_concurrent_uploads_of_the_same_click_store_it_once(study):
    session = session_start(study=study, worker=make_worker(), device="pc")
    results, errors = at_once(lambda: _click(session, 0, key="same-key")[1], 4)
    assert errors == []
    assert sorted(results) == [False, False, False, True]
    assert Click.objects.filter(trial__session=session).count() == 1


@pytest.mark.django_db(transaction=True)
def test_finish_sends_validation_task_after_commit(study, exclusive_broker):
    # exclusive_broker: a shared worker left running by an earlier test would take the message before we look
    from config.celery import app
    from tests.support.celery_worker import purge_queues

    purge_queues()
    session = session_start(study=study, worker=make_worker(), device="pc")
    for position in range(3):
        _click(session, position)
    session_finish(session_id=session.pk)
    session_finish(session_id=session.pk)  # idempotent: no second message

    found = []
    with app.connection_for_read() as conn:
        queue = conn.SimpleQueue("default")
        try:
            while True:
                message = queue.get(timeout=3)
                message.ack()
                if message.headers.get("task") == task_names.VALIDATION_VALIDATE_SESSION:
                    found.append(message.payload[0])
        except queue.Empty:
            pass
        finally:
            queue.close()
    assert found == [[session.pk]]


@pytest.mark.django_db
def test_finish_after_expiry_with_clicks_missing_is_refused_without_a_replay_list(study):
    session = session_start(study=study, worker=make_worker(), device="pc")
    _click(session, 0)
    Session.objects.filter(pk=session.pk).update(expires_at=timezone.now())
    with pytest.raises(SessionFinishRefused, match="expired") as refused:
        session_finish(session_id=session.pk)
    assert refused.value.missing_positions == []
