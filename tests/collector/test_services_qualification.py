"""collector.services.qualification: the qualification test of corrective campaigns (issue 17 item 4, seed 001
§4). Model updates run inline here (the same service the ``models`` queue runs); the Toloka skill through a
real Celery worker is in tests/tasks/test_qualification.py."""

from __future__ import annotations

from datetime import timedelta

import cv2
import numpy as np
import pytest
from django.utils import timezone

from collector.models import CorrectiveItem, CorrectiveQualification, Session, Target
from collector.selectors.corrective import study_corrective_summary, study_qualification_results
from collector.selectors.progress import study_session_summary
from collector.services.allocation import sessions_expire
from collector.services.corrective import (
    corrective_click_record,
    corrective_item_done,
    corrective_items_ensure,
    corrective_round_submit,
    corrective_session_finish,
    corrective_update_apply,
)
from collector.services.masks import instance_masks, read_mask
from collector.services.qualification import qualification_score
from collector.services.qualified_start import qualification_continue
from collector.services.session_start import SessionStartRefused, session_start
from tests.factories import make_dataset, make_study, make_worker

pytestmark = pytest.mark.django_db


@pytest.fixture
def dataset(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    return make_dataset(tmp_path, n_images=5, size=(160, 120))


def _campaign(dataset, **fields):
    fields = {
        "kind": "corrective",
        "corrective_init": "first_click",
        "corrective_rounds": 2,
        "batch_size": 2,
        "quota_pc": 2,
        "quota_mobile": 0,
        "qualification_enabled": True,
        "qualification_instances": 2,
        **fields,
    }
    return make_study(dataset, publish=True, **fields)


# --------------------------------------------------------------------------------------------------
# simulated workers: each gets (ground truth, the mask shown, round) and answers its clicks


def _deepest(region: np.ndarray) -> tuple[float, float]:
    depth = cv2.distanceTransform(np.pad(region.astype(np.uint8), 1), cv2.DIST_L2, 5)[1:-1, 1:-1]
    y, x = divmod(int(np.argmax(depth)), depth.shape[1])
    return x + 0.5, y + 0.5


def careful(gt, mask, round_number):
    """The click a careful worker places: in the middle of the larger error region (none if it is tiny)."""
    fn, fp = gt & ~mask, mask & ~gt
    region, positive = (fn, True) if fn.sum() >= fp.sum() or round_number == 0 else (fp, False)
    if region.sum() < 20:
        return []
    x, y = _deepest(region)
    return [(x, y, positive)]


def background(gt, mask, round_number):
    """A worker who does not understand the task: positive clicks in the image's corner, on the background."""
    return [(2.5, 2.5, True)]


def _work(session, clicker) -> Session:
    """Work every item of ``session`` with ``clicker`` until its rounds end, then finish the session."""
    for item in corrective_items_ensure(session=session, send=False):
        instance = item.trial.target.instance
        gt, _ignore = instance_masks(instance)
        while True:
            item = CorrectiveItem.objects.select_related("current_mask").get(pk=item.pk)
            if item.state == CorrectiveItem.State.UPDATING:
                corrective_update_apply(item_id=item.pk, round_number=item.round)
                continue
            if item.state != CorrectiveItem.State.CLICKING:
                break
            mask = read_mask(item.current_mask.file.name) if item.current_mask_id else np.zeros_like(gt)
            clicks = clicker(gt, mask, item.round)
            if not clicks:
                corrective_item_done(session=session, item_id=item.pk)
                break
            for n, (x, y, positive) in enumerate(clicks):
                corrective_click_record(
                    session=session,
                    item_id=item.pk,
                    idempotency_key=f"q{item.pk}-{item.round}-{n}",
                    x=x,
                    y=y,
                    is_positive=positive,
                )
            corrective_round_submit(session=session, item_id=item.pk, round_number=item.round, send=False)
    return corrective_session_finish(session_id=session.pk)


def _inflight(study):
    return sorted(Target.objects.filter(round__study=study).values_list("inflight_pc", flat=True))


# --------------------------------------------------------------------------------------------------


def test_a_careful_worker_passes_the_test_then_gets_real_tasks_on_other_images(dataset):
    study = _campaign(dataset)
    worker = make_worker()
    test = session_start(study=study, worker=worker, device="pc")

    assert test.is_qualification and test.trials.count() == 2
    assert set(_inflight(study)) == {0}, "the test took quota"
    finished = _work(test, careful)
    assert finished.status == "finished" and finished.completion_code == ""  # the real batch gives the code

    result = CorrectiveQualification.objects.get(study=study, worker=worker)
    assert result.passed, result.details
    assert result.placement == 1.0 and result.clicks >= 2
    assert result.session_id == test.pk and len(result.details["items"]) == 2
    assert set(_inflight(study)) == {0} and not Target.objects.filter(valid_pc__gt=0).exists()

    real = qualification_continue(session=Session.objects.get(pk=test.pk))
    assert not real.is_qualification and real.trials.count() == 2
    test_images = set(test.trials.values_list("target__instance__image_id", flat=True))
    real_images = set(real.trials.values_list("target__instance__image_id", flat=True))
    assert not test_images & real_images, "the real batch repeats a test image"
    assert sorted(_inflight(study)).count(1) == 2
    # continuing again resumes the same batch
    assert qualification_continue(session=Session.objects.get(pk=test.pk)).pk == real.pk


def test_a_worker_clicking_on_the_background_fails_placement_is_told_and_cannot_retry(dataset):
    study = _campaign(dataset)
    worker = make_worker()
    test = session_start(study=study, worker=worker, device="pc")
    _work(test, background)

    result = CorrectiveQualification.objects.get(study=study, worker=worker)
    assert not result.passed and result.placement == 0.0
    assert result.details["reason"].startswith("placement 0.00 < 0.75")
    with pytest.raises(SessionStartRefused, match="did not meet this task's quality bar"):
        session_start(study=study, worker=worker, device="pc")
    with pytest.raises(SessionStartRefused, match="did not meet"):
        qualification_continue(session=Session.objects.get(pk=test.pk))
    assert Session.objects.filter(study=study, worker=worker).count() == 1  # no real batch, no second test
    assert set(_inflight(study)) == {0}


def test_thresholds_are_the_studys(dataset):
    """The same careful work fails a bar set above what it reached, on placement or on gain."""
    study = _campaign(dataset, corrective_init="box", corrective_rounds=1)
    test = session_start(study=study, worker=make_worker(), device="pc")
    _work(test, careful)
    score = qualification_score(session=test)
    assert score["passed"] and score["gain_per_click"] is not None, score
    gain, placement = score["gain_per_click"], score["placement"]

    study.qualification_min_gain = gain + 0.001
    assert qualification_score(session=test)["reason"].startswith("gain per click")
    study.qualification_min_gain = gain
    assert qualification_score(session=test)["passed"]  # the bar itself passes
    study.qualification_min_placement = min(1.0, placement + 0.01) if placement < 1.0 else 1.0
    assert qualification_score(session=test)["passed"] == (placement >= study.qualification_min_placement)


def test_a_worker_who_passed_skips_the_test_and_without_qualification_nobody_takes_it(dataset):
    study = _campaign(dataset)
    worker = make_worker()
    test = session_start(study=study, worker=worker, device="pc")
    _work(test, careful)
    real = session_start(study=study, worker=worker, device="pc")
    assert not real.is_qualification

    plain = _campaign(dataset, qualification_enabled=False)
    assert not session_start(study=plain, worker=make_worker(), device="pc").is_qualification


def test_tests_stay_out_of_progress_and_campaign_figures_and_are_listed_per_worker(dataset):
    study = _campaign(dataset)
    good, bad = make_worker(), make_worker()
    _work(session_start(study=study, worker=good, device="pc"), careful)
    _work(session_start(study=study, worker=bad, device="pc"), background)

    summary = study_session_summary(study=study)
    assert summary["counts"]["all"]["started"] == 0 and summary["counts"]["all"]["rejected"] == 0
    assert summary["qualification"] == {"running": 0, "expired": 0, "passed": 1, "failed": 1}
    assert study_corrective_summary(study=study)["items"] == 0
    table = study_qualification_results(study=study)
    assert (table["passed"], table["failed"]) == (1, 1)
    by_worker = {row["worker"]: row for row in table["results"]}
    assert by_worker[good.pseudonym]["passed"] and by_worker[good.pseudonym]["placement"] == 1.0
    assert not by_worker[bad.pseudonym]["passed"] and by_worker[bad.pseudonym]["placement"] == 0.0


def test_an_expired_test_releases_no_slot_and_the_worker_may_take_it_again(dataset):
    # A batch on every image, started before the test was switched on, holds slots on the test's targets too.
    study = _campaign(dataset, qualification_enabled=False, batch_size=5)
    real = session_start(study=study, worker=make_worker(), device="pc")
    study.qualification_enabled = True
    study.save(update_fields=["qualification_enabled"])
    before = _inflight(study)
    assert before == [1] * 5
    worker = make_worker()
    test = session_start(study=study, worker=worker, device="pc")
    assert test.is_qualification and _inflight(study) == before
    Session.objects.filter(pk=test.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert sessions_expire() == 1
    assert _inflight(study) == before, "expiring a test released slots it never took"
    again = session_start(study=study, worker=worker, device="pc")
    assert again.is_qualification and again.pk != test.pk
    assert Session.objects.get(pk=real.pk).status == "started"
