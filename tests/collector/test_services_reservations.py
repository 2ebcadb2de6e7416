"""Reservations that follow the worker (collector/services/reservations.py, issue 32 item 2): the release after
the grace period, exactly one release per slot whatever the path, and the return (re-reserved, replaced or
dropped, never beyond the quota). Time moves by passing ``now=``; nothing sleeps."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from collector.models import Session, Target, Trial
from collector.services.allocation import sessions_expire
from collector.services.clicks import ClickRefused, click_record
from collector.services.reservations import (
    session_heard,
    session_heartbeat,
    session_reclaim,
    session_release,
    sessions_release_stale,
)
from collector.services.session_finish import session_finish
from collector.services.session_start import session_start
from collector.services.validation import session_platform_rejected, session_validate
from tests.factories import make_dataset, make_study, make_worker, present_trials

pytestmark = pytest.mark.django_db


def _study(tmp_path, settings, *, n_images=4, batch_size=4, quota=2, **fields):
    settings.MEDIA_ROOT = tmp_path / "media"
    dataset = make_dataset(tmp_path, n_images=n_images, size=(64, 48))
    fields.setdefault("min_valid_per_session", 1)
    return make_study(
        dataset, publish=True, batch_size=batch_size, quota_pc=quota, quota_mobile=quota, **fields
    )


def _counters(study, device="pc") -> dict[int, tuple[int, int]]:
    return {
        pk: (valid, inflight)
        for pk, valid, inflight in Target.objects.filter(round__study=study).values_list(
            "pk", f"valid_{device}", f"inflight_{device}"
        )
    }


def _holding(study, device="pc") -> dict[int, int]:
    """What ``inflight_<device>`` must be: the task trials of running sessions that hold a slot, per target."""
    counts = dict.fromkeys(Target.objects.filter(round__study=study).values_list("pk", flat=True), 0)
    for target_id in Trial.objects.filter(
        session__study=study, session__device=device, role="task", holds_slot=True
    ).values_list("target_id", flat=True):
        counts[target_id] += 1
    return counts


def _click(session, position, *, centre=True):
    trial = Trial.objects.select_related("target__instance__image").get(session=session, position=position)
    instance = trial.target.instance
    x, y = (
        ((instance.bbox_x0 + instance.bbox_x1) / 2, (instance.bbox_y0 + instance.bbox_y1) / 2)
        if centre
        else (0.5, 0.5)
    )
    return click_record(
        session=session, position=position, idempotency_key=f"r-{session.pk}-{position}-{trial.target_id}",
        x=x, y=y, shown_width=float(instance.image.width), shown_height=float(instance.image.height),
        pointer_type="mouse", reaction_ms=500.0, event_timestamp_ms=6000.0,
        phase_onsets_ms={"A": 0.0, "B": 1500.0, "C": 3500.0, "D": 5000.0}, refresh_hz=60.0,
    )  # fmt: skip


def _later(session, seconds):
    return session.started_at + timedelta(seconds=seconds)


def test_a_session_not_heard_from_for_the_grace_period_gives_its_unclicked_trials_back(tmp_path, settings):
    study = _study(tmp_path, settings, reservation_grace_s=120)
    session = session_start(study=study, worker=make_worker(), device="pc")
    present_trials(session, seconds_ago=30, positions=[0])
    _click(session, 0)
    clicked = Trial.objects.get(session=session, position=0).target_id
    assert all(inflight == 1 for _valid, inflight in _counters(study).values())

    heard = max(timezone.now(), session.started_at)
    assert sessions_release_stale(now=heard + timedelta(seconds=119)) == 0
    session_heard(session_id=session.pk, now=heard + timedelta(seconds=100))  # a heartbeat keeps the batch
    assert sessions_release_stale(now=heard + timedelta(seconds=200)) == 0
    released_at = heard + timedelta(seconds=221)
    assert sessions_release_stale(now=released_at) == 1

    session.refresh_from_db()
    assert session.status == Session.Status.STARTED and session.released_at == released_at
    counters = _counters(study)
    assert counters[clicked] == (0, 1), "the clicked trial keeps its slot until validation"
    assert all(inflight == 0 for pk, (_v, inflight) in counters.items() if pk != clicked)
    assert set(
        Trial.objects.filter(session=session, holds_slot=False).values_list("position", flat=True)
    ) == {1, 2, 3}
    assert sessions_release_stale(now=released_at + timedelta(seconds=60)) == 0  # nothing unclicked held
    assert _counters(study) == counters
    # a whole grace period more without a sign of life: the worker left for good; the batch expires and the
    # clicked trial's slot comes back too (its click stays stored)
    assert sessions_release_stale(now=released_at + timedelta(seconds=121)) == 1
    session.refresh_from_db()
    assert (session.status, session.ended_by) == (Session.Status.EXPIRED, "grace")
    assert all(inflight == 0 for _valid, inflight in _counters(study).values())
    assert Trial.objects.get(session=session, position=0).click is not None
    assert sessions_release_stale(now=released_at + timedelta(hours=1)) == 0  # nothing again


def test_an_abandoned_batch_is_expired_under_one_lock_of_its_row(tmp_path, settings):
    """The abandoned-batch expiry locks the session row once and expires it there
    (``monitor.session_expire_locked``), not through ``session_expire_now``'s second lock of the same row."""
    from django.test.utils import CaptureQueriesContext

    study = _study(tmp_path, settings, reservation_grace_s=120)
    session = session_start(study=study, worker=make_worker(), device="pc")
    present_trials(session, seconds_ago=30, positions=[0])
    _click(session, 0)
    released_at = max(timezone.now(), session.started_at) + timedelta(seconds=121)
    assert sessions_release_stale(now=released_at) == 1

    with CaptureQueriesContext(connection) as captured:
        assert sessions_release_stale(now=released_at + timedelta(seconds=121)) == 1
    session.refresh_from_db()
    assert (session.status, session.ended_by) == (Session.Status.EXPIRED, "grace")
    assert all(inflight == 0 for _valid, inflight in _counters(study).values())
    if connection.features.has_select_for_update:  # SQLite drops FOR UPDATE from the statement
        session_locks = [
            query["sql"]
            for query in captured.captured_queries
            if "FOR NO KEY UPDATE" in query["sql"] and 'FROM "collector_session" ' in query["sql"]
        ]
        assert len(session_locks) == 1, session_locks


def test_a_released_worker_heard_from_again_is_not_expired_as_abandoned(tmp_path, settings):
    study = _study(tmp_path, settings, reservation_grace_s=120)
    session = session_start(study=study, worker=make_worker(), device="pc")
    heard = max(timezone.now(), session.started_at)
    released_at = heard + timedelta(seconds=121)
    assert sessions_release_stale(now=released_at) == 1
    session_heard(session_id=session.pk, now=released_at + timedelta(seconds=100))  # came back
    assert sessions_release_stale(now=released_at + timedelta(seconds=150)) == 0
    session.refresh_from_db()
    assert session.status == Session.Status.STARTED


def test_a_silent_batch_with_nothing_to_release_expires_after_two_grace_periods(tmp_path, settings):
    """Every task trial clicked, the batch never finished (the tab closed before the finish, or only filler
    trials were left): nothing to release, so the clicked trials' slots come back by the abandoned expiry two
    grace periods after the last sign of life, not at the session timeout."""
    study = _study(tmp_path, settings, reservation_grace_s=120, session_timeout_s=1800)
    session = session_start(study=study, worker=make_worker(), device="pc")
    present_trials(session, seconds_ago=30)
    for position in range(4):
        _click(session, position)
    assert all(inflight == 1 for _valid, inflight in _counters(study).values())
    heard = max(timezone.now(), session.started_at)
    assert sessions_release_stale(now=heard + timedelta(seconds=200)) == 0, "nothing unclicked to release"
    session.refresh_from_db()
    assert (session.status, session.released_at) == (Session.Status.STARTED, None)
    assert sessions_release_stale(now=heard + timedelta(seconds=241)) == 1
    session.refresh_from_db()
    assert (session.status, session.ended_by) == (Session.Status.EXPIRED, "grace")
    assert all(inflight == 0 for _valid, inflight in _counters(study).values())
    assert Trial.objects.filter(session=session, click__isnull=False).count() == 4, "its clicks stay stored"


def test_a_silent_batch_heard_from_within_two_grace_periods_is_kept(tmp_path, settings):
    study = _study(tmp_path, settings, reservation_grace_s=120, session_timeout_s=1800)
    session = session_start(study=study, worker=make_worker(), device="pc")
    for position in range(4):
        _click(session, position)
    heard = max(timezone.now(), session.started_at)
    session_heard(session_id=session.pk, now=heard + timedelta(seconds=150))
    assert sessions_release_stale(now=heard + timedelta(seconds=300)) == 0
    assert Session.objects.get(pk=session.pk).status == Session.Status.STARTED


def test_every_release_path_gives_each_slot_back_exactly_once(tmp_path, settings):
    """Two workers hold the same four targets (quota 2): a path releasing a slot twice would take the other
    worker's slot with it, which ``inflight`` equal to the slots still held catches."""
    study = _study(tmp_path, settings)
    leaver = session_start(study=study, worker=make_worker(), device="pc")
    other = session_start(study=study, worker=make_worker(), device="pc")
    present_trials(leaver, positions=[0])
    _click(leaver, 0)

    session_heard(session_id=other.pk, now=_later(leaver, 10_000))  # the other worker's page is open
    for _ in range(2):  # the researcher's release, then the grace period's: once
        session_release(session=leaver, by="researcher")
        sessions_release_stale(now=_later(leaver, 10_000))
    assert {pk: inflight for pk, (_v, inflight) in _counters(study).items()} == _holding(study)
    # 4 of the other: the leaver, released and not heard from for a grace period more, expired as abandoned
    # and gave its clicked trial's slot back too
    assert sum(inflight for _v, inflight in _counters(study).values()) == 4
    assert Session.objects.get(pk=leaver.pk).ended_by == "grace"

    for expected in (1, 0):  # the other session expires once; a second run changes nothing
        assert sessions_expire(now=_later(leaver, study.session_timeout_s + 1)) == expected
    assert Session.objects.get(pk=other.pk).ended_by == "timeout"
    assert all(inflight == 0 for _v, inflight in _counters(study).values())
    assert not Trial.objects.filter(session__in=[leaver, other], holds_slot=True, role="task").exists()


def test_validation_after_a_release_and_a_return_releases_each_slot_once(tmp_path, settings):
    study = _study(tmp_path, settings)
    worker = make_worker()
    leaver = session_start(study=study, worker=worker, device="pc")
    other = session_start(study=study, worker=make_worker(), device="pc")
    present_trials(leaver, positions=[0])
    _click(leaver, 0)
    session_release(session=leaver)
    assert session_reclaim(session_id=leaver.pk) == {"kept": [1, 2, 3], "replaced": [], "dropped": []}
    assert {pk: inflight for pk, (_v, inflight) in _counters(study).items()} == _holding(study)
    present_trials(leaver, positions=[1, 2, 3])
    for position in (1, 2, 3):
        _click(leaver, position)
    session_finish(session_id=leaver.pk)
    session_validate(session_id=leaver.pk)
    session_validate(session_id=leaver.pk)
    assert Session.objects.get(pk=leaver.pk).validity == "counted"
    assert all(counter == (1, 1) for counter in _counters(study).values()), "the other worker's slots stay"
    assert Trial.objects.filter(session=other, holds_slot=True).count() == 4


def test_a_returning_worker_replays_the_interrupted_trial_afresh_and_its_click_counts(tmp_path, settings):
    study = _study(tmp_path, settings)
    session = session_start(study=study, worker=make_worker(), device="pc")
    present_trials(session, positions=[0, 1])  # trial 1 was on screen when the tab closed
    _click(session, 0)
    session_release(session=session)
    with pytest.raises(ClickRefused) as refused:  # a click from a page that did not reload
        _click(session, 1)
    assert refused.value.reason == "trial_released"

    answer = session_heartbeat(session_id=session.pk)
    assert answer["reclaimed"] and answer["kept"] == [1, 2, 3] and answer["status"] == "started"
    interrupted = Trial.objects.get(session=session, position=1)
    assert interrupted.presentations == [] and interrupted.flags == [] and interrupted.holds_slot
    present_trials(session, positions=[1, 2, 3])
    for position in (1, 2, 3):
        _click(session, position)
    assert Trial.objects.get(session=session, position=1).flags == [], "not flagged replayed"
    session_finish(session_id=session.pk)
    validated = session_validate(session_id=session.pk)
    assert (validated.validity, validated.valid_clicks) == ("counted", 4)
    assert all(counter == (1, 0) for counter in _counters(study).values())


def test_a_trial_presented_twice_without_a_release_stays_flagged(tmp_path, settings):
    """A reload inside the grace period is not a return: the second showing keeps its ``replayed`` flag."""
    from collector.services.presentations import trial_presented_record

    study = _study(tmp_path, settings)
    session = session_start(study=study, worker=make_worker(), device="pc")
    trial_presented_record(session_id=session.pk, position=0, presentation_id="first")
    trial_presented_record(session_id=session.pk, position=0, presentation_id="after-reload")
    assert session_reclaim(session_id=session.pk) is None
    assert "replayed" in Trial.objects.get(session=session, position=0).flags


def test_the_return_replaces_a_target_filled_meanwhile_and_drops_what_cannot_be_replaced(tmp_path, settings):
    """quota 1, five images, batches of 3. The leaver's three targets go to a newcomer after the release; back,
    the leaver gets the two targets of images nobody took (replaced) and loses the third (dropped)."""
    study = _study(tmp_path, settings, n_images=5, batch_size=3, quota=1)
    leaver_worker = make_worker()
    leaver = session_start(study=study, worker=leaver_worker, device="pc")
    leaver_images = set(leaver.trials.values_list("target__instance__image_id", flat=True))
    sessions_release_stale(now=_later(leaver, study.reservation_grace_s + 60))
    newcomer = session_start(study=study, worker=make_worker(), device="pc")
    assert newcomer.trials.count() == 3
    assert all(valid + inflight <= 1 for valid, inflight in _counters(study).values())

    assert (
        set(newcomer.trials.values_list("target__instance__image_id", flat=True)) == leaver_images
    )  # lowest ids

    answer = session_reclaim(session_id=leaver.pk)
    assert answer is not None and answer["kept"] == []
    assert len(answer["replaced"]) == 2 and len(answer["dropped"]) == 1, answer
    trials = list(Trial.objects.filter(session=leaver).select_related("target__instance"))
    assert sorted(t.position for t in trials) == sorted(answer["replaced"])
    assert all(t.holds_slot and t.presentations == [] for t in trials)
    images = {t.target.instance.image_id for t in trials}
    assert len(images) == 2 and not images & leaver_images, "replacements are images the worker has not seen"
    counters = _counters(study)
    assert all(valid + inflight <= 1 for valid, inflight in counters.values()), "never beyond the quota"
    assert {pk: inflight for pk, (_v, inflight) in counters.items()} == _holding(study)


def test_a_return_with_nothing_left_expires_the_batch(tmp_path, settings):
    study = _study(tmp_path, settings, n_images=3, batch_size=3, quota=1)
    leaver = session_start(study=study, worker=make_worker(), device="pc")
    sessions_release_stale(now=_later(leaver, study.reservation_grace_s + 60))
    session_start(study=study, worker=make_worker(), device="pc")
    assert session_reclaim(session_id=leaver.pk) == {"kept": [], "replaced": [], "dropped": [0, 1, 2]}
    leaver.refresh_from_db()
    assert (leaver.status, leaver.ended_by) == ("expired", "grace")
    assert all(inflight == 1 for _v, inflight in _counters(study).values())


def test_release_reasons_are_checked(tmp_path, settings):
    study = _study(tmp_path, settings)
    session = session_start(study=study, worker=make_worker(), device="pc")
    with pytest.raises(ValueError, match="by='admin' is not a release reason"):
        session_release(session=session, by="admin")
    assert session_release(session=session, by="researcher") == 4
    assert session_release(session=session, by="researcher") == 0


@pytest.mark.parametrize("policy, valid_after", [("release", 0), ("count", 1)])
def test_work_the_platform_rejects_follows_the_study_policy_once(tmp_path, settings, policy, valid_after):
    study = _study(tmp_path, settings, quota=1, rejected_work=policy)
    session = session_start(study=study, worker=make_worker(), device="pc")
    present_trials(session)
    for position in range(4):
        _click(session, position)
    session_finish(session_id=session.pk)
    session_validate(session_id=session.pk)
    assert all(counter == (1, 0) for counter in _counters(study).values())
    for _ in range(2):
        record = session_platform_rejected(session_id=session.pk)
        assert record["policy"] == policy and record["released"] == (4 if policy == "release" else 0)
    assert all(counter == (valid_after, 0) for counter in _counters(study).values())
    assert Session.objects.get(pk=session.pk).platform_state["rejected"]["policy"] == policy
    if policy == "release":  # the quotas reopened: a new worker gets the four targets
        assert session_start(study=study, worker=make_worker(), device="pc").trials.count() == 4


@pytest.mark.one_backend
@pytest.mark.django_db(transaction=True)
def test_concurrent_returns_and_starts_never_go_beyond_the_quota(tmp_path, settings):
    """Eight released batches come back while eight newcomers start, each on its own connection: the
    reservations never exceed ``quota - valid`` and ``inflight`` equals the slots the trials hold."""
    if connection.vendor != "postgresql":
        pytest.fail(
            "this test needs PostgreSQL (its subject is concurrent row locks; SQLite runs writers one at a "
            "time): run it with DATABASE_URL=postgres://postgres@127.0.0.1:5432/<db>, as `make test` does."
        )
    study = _study(tmp_path, settings, n_images=10, batch_size=5, quota=4)
    leavers = [session_start(study=study, worker=make_worker(), device="pc") for _ in range(8)]
    assert sessions_release_stale(now=_later(leavers[-1], study.reservation_grace_s + 60)) == 8
    newcomers = [make_worker() for _ in range(8)]
    barrier = threading.Barrier(16)
    errors: list[BaseException] = []

    def run(action):
        try:
            barrier.wait(timeout=60)
            action()
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    def start(worker):
        from collector.services.session_start import SessionStartRefused

        try:
            session_start(study=study, worker=worker, device="pc")
        except SessionStartRefused:
            pass

    actions = [lambda s=s: session_reclaim(session_id=s.pk) for s in leavers]
    actions += [lambda w=w: start(w) for w in newcomers]
    threads = [threading.Thread(target=run, args=(action,)) for action in actions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    counters = _counters(study)
    assert all(valid + inflight <= 4 for valid, inflight in counters.values()), counters
    assert {pk: inflight for pk, (_v, inflight) in counters.items()} == _holding(study)
    assert sum(inflight for _v, inflight in counters.values()) == 40, "every slot is taken again"


def test_a_worker_back_within_the_grace_period_replays_the_interrupted_trial_afresh(tmp_path, settings):
    """No release yet (back after 60 s of a 120 s grace): a page loaded after ``RETURN_AFTER_S`` without a sign
    of life shows the interrupted trial afresh; a reload while the page was heard from seconds ago does not."""
    from collector.services.presentations import trial_presented_record
    from collector.services.reservations import session_return

    settings.RETURN_AFTER_S = 30
    study = _study(tmp_path, settings)
    session = session_start(study=study, worker=make_worker(), device="pc")
    trial_presented_record(session_id=session.pk, position=0, presentation_id="before-leaving")
    shown_at = timezone.now()
    assert session_return(session_id=session.pk, now=shown_at + timedelta(seconds=5)) is None
    assert Trial.objects.get(session=session, position=0).presentations != [], (
        "a quick reload is not a return"
    )

    assert session_return(session_id=session.pk, now=shown_at + timedelta(seconds=60)) is None
    trial = Trial.objects.get(session=session, position=0)
    assert trial.presentations == [] and trial.holds_slot
    assert (
        trial_presented_record(session_id=session.pk, position=0, presentation_id="back")["replayed"] is False
    )
    assert all(inflight == 1 for _v, inflight in _counters(study).values()), "no slot changed hands"


def _silent_for(session, seconds: float) -> None:
    """Make ``session`` look not heard from for ``seconds``: its start, its last heartbeat, its clicks'
    arrival and its presentation reports moved into the past (session_start reads the clock itself)."""
    from collector.models import Click

    then = timezone.now() - timedelta(seconds=seconds)
    Session.objects.filter(pk=session.pk).update(started_at=then, last_seen_at=then)
    Click.objects.filter(trial__session=session).update(received_at=then)
    for trial in Trial.objects.filter(session=session).exclude(presentations=[]):
        trial.presentations = [{"id": f"moved-{trial.pk}", "at": then.isoformat()}]
        trial.save(update_fields=["presentations"])


def test_a_waiting_worker_gets_the_images_of_a_batch_silent_for_the_grace_period_at_once(tmp_path, settings):
    """Release on demand: a worker who would be told the images are in other batches makes the batches not
    heard from for the grace period give them back at once (unclicked ones released, the batch expired with
    its clicked ones), instead of at the next release run and one more grace period later. Never sooner
    than the grace period, and only the waiting worker's device."""
    from collector.services.session_start import SessionStartRefused

    study = _study(tmp_path, settings, quota=1, reservation_grace_s=120, session_timeout_s=1800)
    leaver = session_start(study=study, worker=make_worker(), device="pc")
    phone = session_start(study=study, worker=make_worker(), device="mobile")
    present_trials(leaver, positions=[0])
    _click(leaver, 0)
    _silent_for(leaver, 100)
    _silent_for(phone, 500)

    with pytest.raises(SessionStartRefused) as refused:
        session_start(study=study, worker=make_worker(), device="pc")
    assert refused.value.retry_after_s, "temporary: within the grace period the batch stays its worker's"
    assert Trial.objects.filter(session=leaver, holds_slot=True).count() == 4

    settings.RELEASE_ON_DEMAND = False
    _silent_for(leaver, 130)
    with pytest.raises(SessionStartRefused):
        session_start(study=study, worker=make_worker(), device="pc")
    assert Session.objects.get(pk=leaver.pk).status == Session.Status.STARTED, "off: the beat's timing"

    settings.RELEASE_ON_DEMAND = True
    newcomer = session_start(study=study, worker=make_worker(), device="pc")
    assert Trial.objects.filter(session=newcomer, role="task").count() == 4
    leaver.refresh_from_db()
    assert (leaver.status, leaver.ended_by) == (Session.Status.EXPIRED, "grace")
    assert leaver.released_at is not None
    assert Trial.objects.filter(session=leaver, click__isnull=False).count() == 1, "its click stays stored"
    assert _counters(study) == {pk: (0, n) for pk, n in _holding(study).items()}
    assert all(n == 1 for n in _holding(study).values())
    assert Session.objects.get(pk=phone.pk).status == Session.Status.STARTED, "another device's batch waits"
    assert _counters(study, "mobile") == {pk: (0, n) for pk, n in _holding(study, "mobile").items()}

    # the leaver comes back: its batch was expired; a new entry would start a new one, but it has seen every
    # image of the study, so it is told so for good
    with pytest.raises(SessionStartRefused) as back:
        session_start(study=study, worker=leaver.worker, device="pc")
    assert back.value.retry_after_s is None and "no images left for you" in str(back.value)
