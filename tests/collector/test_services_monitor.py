"""collector.services.monitor: release, expire now and block, with the in-flight slots exact after each."""

from __future__ import annotations

import pytest

from collector.models import Session, Target, Trial, Worker
from collector.services.allocation import sessions_expire
from collector.services.clicks import click_record
from collector.services.monitor import MonitorRefused, session_expire_now, worker_block
from collector.services.reservations import session_reclaim, session_release
from collector.services.session_finish import session_finish
from collector.services.session_start import SessionStartRefused, session_start
from collector.services.validation import session_validate
from tests.factories import make_rect_dataset, make_study, make_worker, present_trials

pytestmark = pytest.mark.django_db


@pytest.fixture
def study(tmp_path):
    dataset = make_rect_dataset(tmp_path, n_images=6)
    return make_study(
        dataset, publish=True, batch_size=5, min_valid_per_session=3, quota_pc=2, quota_mobile=2
    )


def _inflight(study, device="pc") -> dict[int, int]:
    return dict(Target.objects.filter(round__study=study).values_list("pk", f"inflight_{device}"))


def _click(session, positions):
    present_trials(session)
    for position in positions:
        click_record(
            session=session,
            position=position,
            idempotency_key=f"m-{session.pk}-{position}",
            x=200.5,
            y=150.5,
            shown_width=400.0,
            shown_height=300.0,
            pointer_type="mouse",
            reaction_ms=500.0,
        )


def test_release_gives_back_the_unclicked_trials_slots_once(study):
    session = session_start(study=study, worker=make_worker(), device="pc")
    trials = list(session.trials.order_by("position"))
    _click(session, [0, 1])
    before = _inflight(study)
    assert sum(before.values()) == 5

    assert session_release(session=session, by="researcher") == 3
    after = _inflight(study)
    for trial in trials:
        assert after[trial.target_id] == (1 if trial.position < 2 else 0), trial.position
    assert list(
        Trial.objects.filter(session=session).order_by("position").values_list("holds_slot", flat=True)
    ) == [
        True,
        True,
        False,
        False,
        False,
    ]
    session.refresh_from_db()
    assert session.released_at is not None and session.status == "started"
    assert session_release(session=session, by="researcher") == 0  # nothing left to give
    assert _inflight(study) == after


def test_a_released_session_finishes_and_validation_releases_only_what_it_still_holds(study):
    session = session_start(study=study, worker=make_worker(), device="pc")
    _click(session, [0])
    session_release(session=session, by="researcher")
    assert session_reclaim(session_id=session.pk)["kept"] == [1, 2, 3, 4]  # back: all still wanted
    _click(session, [1, 2, 3, 4])  # and went on
    session_finish(session_id=session.pk)
    session_validate(session_id=session.pk)
    assert sum(_inflight(study).values()) == 0
    assert Session.objects.get(pk=session.pk).validity == "counted"


def test_expire_now_ends_the_session_and_frees_every_slot_once(study):
    session = session_start(study=study, worker=make_worker(), device="mobile")
    _click(session, [0])
    session_release(session=session, by="researcher")  # 4 back; the clicked one still held
    assert sum(_inflight(study, "mobile").values()) == 1
    expired = session_expire_now(session_id=session.pk, by="researcher")
    assert (expired.status, expired.ended_by) == ("expired", "researcher")
    assert sum(_inflight(study, "mobile").values()) == 0
    with pytest.raises(MonitorRefused, match="is expired, not running"):
        session_expire_now(session_id=session.pk)
    assert sessions_expire() == 0 and sum(_inflight(study, "mobile").values()) == 0


def test_the_timeout_after_a_release_gives_back_only_what_is_still_held(study):
    session = session_start(study=study, worker=make_worker(), device="pc")
    _click(session, [0, 1])
    session_release(session=session, by="researcher")
    Session.objects.filter(pk=session.pk).update(expires_at=session.started_at)
    assert sessions_expire() == 1
    session.refresh_from_db()
    assert (session.status, session.ended_by) == ("expired", "timeout")
    assert sum(_inflight(study).values()) == 0


def test_a_blocked_worker_is_refused_and_their_running_batch_expired(study):
    worker = make_worker()
    session = session_start(study=study, worker=worker, device="pc")
    expired = worker_block(worker_id=worker.pk, reason="clicks at random", by="alice", study_id=study.pk)
    assert expired == [session.pk]
    worker.refresh_from_db()
    assert worker.excluded and "blocked by alice: clicks at random" in worker.notes
    assert Session.objects.get(pk=session.pk).status == "expired"
    assert sum(_inflight(study).values()) == 0
    with pytest.raises(SessionStartRefused, match="cannot take part"):
        session_start(study=study, worker=worker, device="pc")
    with pytest.raises(MonitorRefused, match="reason field is empty"):
        worker_block(worker_id=make_worker().pk, reason="  ", by="alice")
    assert Worker.objects.filter(excluded=True).count() == 1
