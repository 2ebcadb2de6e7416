"""Practice and control trials (collector.services.screens, issue 32 item 5) through the real services: the
batch's layout, the slots they never take, the control rule deciding the batch, and the data they never are
(quotas, RClicks export, next rounds) while the full export keeps them."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from collector.models import Click, Session, Study, Target, Trial
from collector.services.allocation import sessions_expire
from collector.services.clicks import click_record
from collector.services.next_round import valid_first_clicks
from collector.services.session_finish import session_finish
from collector.services.session_start import SessionStartRefused, session_start
from collector.services.validation import session_validate
from exports.full import full_export
from exports.rclicks import rclicks_export
from tests.factories import make_dataset, make_researcher, make_study, make_worker, present_trials

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


# --- filler trials: a round's tail batch filled up (Study.short_batches "pad", the default) ------------------


@pytest.fixture
def tail_study(tmp_path, settings):
    """8 images, batches of 4 needing 3 valid clicks, one pc click per target; all but two images done."""
    settings.MEDIA_ROOT = tmp_path / "media"
    dataset = make_dataset(tmp_path, n_images=8, size=(120, 90))
    study = make_study(
        dataset, publish=True, batch_size=4, min_valid_per_session=3, quota_pc=1, quota_mobile=0,
        owner=make_researcher("tail-owner"),
    )  # fmt: skip
    assert study.short_batches == "pad", "pad is the default policy"
    targets = list(Target.objects.filter(round__study=study).order_by("pk"))
    Target.objects.filter(pk__in=[t.pk for t in targets[2:]]).update(valid_pc=1)
    return study, {t.pk for t in targets[:2]}


def test_a_tail_batch_is_filled_up_with_images_already_done(tail_study, tmp_path):
    study, wanted = tail_study
    session = session_start(study=study, worker=make_worker(), device="pc")
    trials = _trials(session)
    assert [t.position for t in trials] == [0, 1, 2, 3], "a full batch"
    assert {t.target_id for t in trials if t.role == Trial.Role.TASK} == wanted
    fillers = [t for t in trials if t.role == Trial.Role.FILLER]
    assert len(fillers) == 2 and len({t.target.instance.image_id for t in trials}) == 4
    # only the wanted targets took a slot; a filler takes none
    assert set(Target.objects.filter(inflight_pc__gt=0).values_list("pk", flat=True)) == wanted
    assert Target.objects.filter(inflight_pc__gt=1).count() == 0

    # both task clicks miss, the fillers' are inside: 2 valid of 4 < 3, rejected, and no quota moves
    done = _play(session, outside={Trial.Role.TASK})
    assert (done.validity, done.valid_clicks) == (Session.Validity.REJECTED, 2)
    assert "2 of 4 clicks were valid; the study needs at least 3." in done.rejection_reason
    assert sum(Target.objects.filter(pk__in=wanted).values_list("valid_pc", flat=True)) == 0


def test_filler_clicks_count_for_the_batch_rule_never_for_a_quota_or_an_export(tail_study, tmp_path):
    study, wanted = tail_study
    session = session_start(study=study, worker=make_worker(), device="pc")
    one_task = next(t for t in _trials(session) if t.role == Trial.Role.TASK)
    present_trials(session)
    for trial in _trials(session):
        x, y = (0.5, 0.5) if trial.pk == one_task.pk else _centre(trial)  # one task click misses
        image = trial.target.instance.image
        click_record(
            session=session, position=trial.position, idempotency_key=f"f-{session.pk}-{trial.position}", x=x,
            y=y, shown_width=float(image.width), shown_height=float(image.height), pointer_type="mouse",
            reaction_ms=500.0, event_timestamp_ms=6000.0,
            phase_onsets_ms={"A": 0.0, "B": 1500.0, "C": 3500.0, "D": 5000.0}, refresh_hz=60.0,
        )  # fmt: skip
    session_finish(session_id=session.pk)
    done = session_validate(session_id=session.pk)
    # 1 valid task click + 2 valid filler clicks = 3 of 4: counted (the task click alone could not be)
    assert (done.validity, done.valid_clicks) == (Session.Validity.COUNTED, 3)
    counts = dict(Target.objects.filter(round__study=study).values_list("pk", "valid_pc"))
    (other,) = wanted - {one_task.target_id}
    assert counts[other] == 1 and counts[one_task.target_id] == 0, "only the valid task click fills a quota"
    assert sorted(counts.values()).count(1) == 7 and max(counts.values()) == 1, "fillers add to no quota"
    assert not Target.objects.filter(inflight_pc__gt=0).exists()

    result = rclicks_export(
        study_ids=[study.pk], out_dir=tmp_path / "rclicks", include_invalid=True, previews=False
    )
    rows = result.clicks_csv.read_text().splitlines()[1:]
    assert len(rows) == 2, "the RClicks export holds the task clicks only"
    by_instance = valid_first_clicks(round_=study.rounds.get(number=1))
    assert sum(len(clicks) for clicks in by_instance.values()) == 1, "next rounds are built from task clicks"
    full = full_export(study_ids=[study.pk], out_path=tmp_path / "full.jsonl")
    records = [json.loads(line) for line in full.path.read_text().splitlines()]
    assert sorted(r["trial_role"] for r in records) == ["filler"] * 2 + ["task"] * 2
    assert all(r["counted"] is (r["trial_role"] == "task" and r["is_valid"]) for r in records)
    client = Client()
    client.force_login(study.owner)
    page = client.get(f"/researcher/studies/{study.pk}/sessions/{session.pk}/").content.decode()
    assert "3 of 4 (2 filler trials: images already done" in page

    # the last wanted target goes out in the next full batch, and then the study has all it needs
    last = session_start(study=study, worker=make_worker(), device="pc")
    assert [t.target_id for t in _trials(last) if t.role == Trial.Role.TASK] == [one_task.target_id]
    assert len(_trials(last)) == 4


def test_a_batch_too_short_even_filled_up_is_refused_and_changes_nothing(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    dataset = make_dataset(tmp_path, n_images=3, size=(120, 90))
    study = make_study(
        dataset, publish=True, batch_size=4, min_valid_per_session=4, quota_pc=1, quota_mobile=0
    )
    Target.objects.filter(pk=Target.objects.filter(round__study=study).order_by("pk")[0].pk).update(
        valid_pc=1
    )
    with pytest.raises(SessionStartRefused, match="There are no images left for you in this study"):
        session_start(study=study, worker=make_worker(), device="pc")  # 2 wanted + 1 filler < 4 valid needed
    assert not Session.objects.filter(study=study).exists()
    assert not Target.objects.filter(inflight_pc__gt=0).exists() and not Trial.objects.exists()

    Study.objects.filter(pk=study.pk).update(min_valid_per_session=3)
    short = session_start(study=Study.objects.get(pk=study.pk), worker=make_worker(), device="pc")
    roles = sorted(t.role for t in _trials(short))
    assert roles == ["filler", "task", "task"], "filled up as far as the dataset allows, enough for the rule"
