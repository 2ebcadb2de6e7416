"""Practice and control trials (collector.services.screens, issue 32 item 5) through the real services: the
batch's layout, the slots they never take, the control rule deciding the batch, and the data they never are
(quotas, RClicks export, next rounds) while the full export keeps them."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from collector.models import Click, Session, Target, Trial
from collector.services.allocation import sessions_expire
from collector.services.next_round import valid_first_clicks
from collector.services.sessions import click_record, session_finish, session_start
from collector.services.validation import session_validate
from exports.full import full_export
from exports.rclicks import rclicks_export
from tests.factories import make_dataset, make_study, make_worker, present_trials

pytestmark = pytest.mark.django_db


@pytest.fixture
def study(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    dataset = make_dataset(tmp_path, n_images=12, size=(120, 90))
    return make_study(
        dataset,
        publish=True,
        batch_size=4,
        min_valid_per_session=3,
        practice_trials=1,
        control_trials=2,
        control_min_inside=2,
        quota_pc=3,
        quota_mobile=3,
    )


def _trials(session) -> list[Trial]:
    return list(session.trials.select_related("target__instance__image").order_by("position"))


def _centre(trial):
    instance = trial.target.instance
    return (instance.bbox_x0 + instance.bbox_x1) / 2 + 0.5, (instance.bbox_y0 + instance.bbox_y1) / 2 + 0.5


def _play(session, *, outside=frozenset()):
    """Click every trial: at its object's centre, or on the image's corner for the roles in ``outside``."""
    present_trials(session)
    for trial in _trials(session):
        x, y = (0.5, 0.5) if trial.role in outside else _centre(trial)
        image = trial.target.instance.image
        click_record(
            session=session, position=trial.position, idempotency_key=f"k-{session.pk}-{trial.position}", x=x,
            y=y, shown_width=float(image.width), shown_height=float(image.height), pointer_type="mouse",
            reaction_ms=500.0, event_timestamp_ms=6000.0,
            phase_onsets_ms={"A": 0.0, "B": 1500.0, "C": 3500.0, "D": 5000.0}, refresh_hz=60.0,
        )  # fmt: skip
    session_finish(session_id=session.pk)
    return session_validate(session_id=session.pk)


def test_a_first_batch_gets_its_practice_first_and_its_controls_mixed_in(study):
    worker = make_worker()
    session = session_start(study=study, worker=worker, device="pc")
    trials = _trials(session)
    assert [t.position for t in trials] == list(range(7))
    assert trials[0].role == Trial.Role.PRACTICE
    roles = [t.role for t in trials[1:]]
    assert roles.count(Trial.Role.TASK) == 4 and roles.count(Trial.Role.CONTROL) == 2
    images = [t.target.instance.image_id for t in trials]
    assert len(set(images)) == 7, "a batch never shows an image twice, practice and control trials included"
    # screen trials show round-1 objects and take no slot; each task trial took one
    for trial in trials:
        target = Target.objects.get(pk=trial.target_id)
        assert target.round.number == 1 and target.click_type == "first"
        assert target.inflight_pc == (1 if trial.role == Trial.Role.TASK else 0), trial.role

    session.status = Session.Status.FINISHED
    session.save(update_fields=["status"])
    second = session_start(study=study, worker=worker, device="pc")
    roles = [t.role for t in _trials(second)]
    assert Trial.Role.PRACTICE not in roles, "practice is for a worker's first batch only"
    assert roles.count(Trial.Role.CONTROL) == 2
    # the second batch's controls come first from images the worker has seen (nothing lost by showing them)
    seen = set(images)
    control_images = {t.target.instance.image_id for t in _trials(second) if t.role == Trial.Role.CONTROL}
    task_images = {t.target.instance.image_id for t in _trials(second) if t.role == Trial.Role.TASK}
    assert not task_images & seen and control_images <= seen


def test_a_study_without_screen_trials_keeps_its_batch_as_it_was(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    plain = make_study(
        make_dataset(tmp_path, n_images=5), publish=True, batch_size=4, min_valid_per_session=3
    )
    session = session_start(study=plain, worker=make_worker(), device="pc")
    assert [(t.position, t.role) for t in _trials(session)] == [(n, "task") for n in range(4)]


def test_control_clicks_decide_whether_the_batch_counts(study):
    counted = _play(session_start(study=study, worker=make_worker(), device="pc"), outside={"practice"})
    assert counted.validity == Session.Validity.COUNTED, counted.rejection_reason
    assert (counted.valid_clicks, counted.control_inside, counted.control_passed) == (4, 2, True)

    # every task click valid, but one control click off its object: the study wants 2 of 2 inside
    rejected = _play(session_start(study=study, worker=make_worker(), device="pc"), outside={"control"})
    assert rejected.validity == Session.Validity.REJECTED
    assert (rejected.valid_clicks, rejected.control_inside, rejected.control_passed) == (4, 0, False)
    assert (
        "0 of 2 control clicks were inside their object; the study needs at least 2."
        in rejected.rejection_reason
    )
    assert "clicks were valid" not in rejected.rejection_reason


def test_screen_trials_never_reach_a_quota_or_an_export(study, tmp_path):
    session = _play(session_start(study=study, worker=make_worker(), device="pc"))
    assert session.validity == Session.Validity.COUNTED
    trials = _trials(session)
    task_targets = {t.target_id for t in trials if t.role == Trial.Role.TASK}
    screen_targets = {t.target_id for t in trials if t.role != Trial.Role.TASK}
    for target in Target.objects.filter(pk__in=task_targets | screen_targets):
        wanted = 1 if target.pk in task_targets else 0
        assert (target.valid_pc, target.inflight_pc) == (wanted, 0), target.full_stem
    # every click is valid and judged, the screen trials' too
    assert Click.objects.filter(trial__session=session, is_valid=True).count() == 7

    result = rclicks_export(
        study_ids=[study.pk], out_dir=tmp_path / "rclicks", include_invalid=True, previews=False
    )
    rows = result.clicks_csv.read_text().splitlines()[1:]
    assert len(rows) == 4, "the RClicks export holds the task clicks only, even with include_invalid"
    stems = {Target.objects.get(pk=pk).full_stem for pk in screen_targets}
    assert not any(row.split(",")[5] in stems for row in rows)  # full_stem column

    by_instance = valid_first_clicks(round_=study.rounds.get(number=1))
    assert sum(len(clicks) for clicks in by_instance.values()) == 4, "next rounds are built from task clicks"

    full = full_export(study_ids=[study.pk], out_path=tmp_path / "full.jsonl")
    records = [json.loads(line) for line in full.path.read_text().splitlines()]
    assert sorted(r["trial_role"] for r in records) == ["control"] * 2 + ["practice"] + ["task"] * 4
    assert all(r["counted"] is (r["trial_role"] == "task") for r in records)
    assert {(r["session_control_inside"], r["session_control_passed"]) for r in records} == {(2, True)}
    screens = records[0]["session_screens"]
    assert screens["practice_trials"] == 1 and screens["control_trials"] == 2
    assert (
        screens["instructions"]["source"] == "default" and "practice image" in screens["instructions"]["text"]
    )


def test_an_expired_batch_gives_back_only_the_slots_it_took(study):
    session = session_start(study=study, worker=make_worker(), device="pc")
    Session.objects.filter(pk=session.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert sessions_expire() == 1
    assert not Target.objects.filter(inflight_pc__gt=0).exists()
    # a screen target that is some other batch's task target keeps that batch's slot
    other = session_start(study=study, worker=make_worker(), device="pc")
    taken = {t.target_id for t in _trials(other) if t.role == Trial.Role.TASK}
    third = session_start(study=study, worker=make_worker(), device="pc")
    Session.objects.filter(pk=third.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    sessions_expire()
    assert set(Target.objects.filter(inflight_pc__gt=0).values_list("pk", flat=True)) == taken
