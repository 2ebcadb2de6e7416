"""tasks.segmentation.build_next_round through a real Celery worker on the ``models`` queue: the round that
closes sends it, a worker SIGKILLed mid-build leaves no partial round 2, and after a restart exactly one
round 2 with valid fn/fp targets exists; a segmenter that cannot run is recorded once and not re-sent."""

from __future__ import annotations

import re

import numpy as np
import pytest
from django.core.files.storage import default_storage
from django.db import transaction
from PIL import Image as PILImage
from scipy import ndimage

from benchmark.metrics import iou
from collector.models import Round, Target
from collector.services.datasets import dataset_import
from collector.services.next_round import MAX_PREVIOUS_IOU
from collector.services.rounds import round_close_if_full
from config.celery import app as celery_app
from tasks import names as task_names
from tasks.segmentation import requeue_pending_builds
from tests.factories import make_clicked_session, make_rect_dataset, make_study
from tests.support.celery_worker import CeleryWorkerProcess, purge_queues, wait_until

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]

N_INSTANCES = 4  # 3 clicks each: seconds of embedded GrabCut, time to kill the worker mid-build


@pytest.fixture
def worker(monkeypatch, exclusive_broker):
    """A worker of our own on the ``models`` queue (this module kills it). Redis redelivers an
    unacknowledged message after 3 s here instead of an hour, so a restart picks up the killed build."""
    monkeypatch.setenv("CLICKLAB_BROKER_VISIBILITY_TIMEOUT_S", "3")
    monkeypatch.delenv("CLICKLAB_NEXT_ROUND_SEGMENTERS", raising=False)  # the worker runs "embedded"
    purge_queues()
    process = CeleryWorkerProcess(queues="models")
    yield process
    process.stop()
    purge_queues()


def _read(name: str) -> np.ndarray:
    with default_storage.open(name, "rb") as handle:
        picture = PILImage.open(handle)
        picture.load()
    return np.asarray(picture.convert("L"))


def _study_with_first_clicks(grabcut_root):
    """GrabCut imported and published (quota: one PC click per target); N_INSTANCES instances get two PC
    clicks and one mobile click inside the object; every target's counter says its quota is met."""
    dataset = dataset_import(path=grabcut_root, layout="grabcut", name="GrabCut").dataset
    study = make_study(dataset, publish=True, quota_pc=1, quota_mobile=0, min_error_area_px=100)
    round_1 = study.rounds.get(number=1)
    rng = np.random.default_rng(5)
    chosen = list(round_1.targets.select_related("instance").order_by("instance__image__stem")[:N_INSTANCES])
    for target in chosen:
        depth = ndimage.distance_transform_edt(_read(target.instance.mask_file.name) > 127)
        rows, cols = np.nonzero(depth >= 10)
        picks = rng.choice(len(rows), size=3, replace=False)
        points = [(cols[i] + 0.5, rows[i] + 0.5) for i in picks]
        make_clicked_session(study, clicks=[(target, *points[0])])
        make_clicked_session(study, clicks=[(target, *points[1])])
        make_clicked_session(study, clicks=[(target, *points[2])], device="mobile")
    Target.objects.filter(round=round_1).update(valid_pc=1)
    return study, round_1, {t.instance_id for t in chosen}


def _check_round_2(study, chosen_instances):
    round_2 = Round.objects.get(study=study, number=2)
    targets = list(round_2.targets.select_related("instance__image", "source_click__trial__session"))
    assert targets, "round 2 has no target"
    for target in targets:
        instance = target.instance
        assert instance.pk in chosen_instances and target.click_type in ("fn", "fp")
        mask = _read(instance.mask_file.name) > 127
        ignore = _read(instance.ignore_file.name) > 127 if instance.ignore_file else np.zeros_like(mask)
        previous = _read(target.previous_mask_file.name) == 255
        error = _read(target.error_mask_file.name) == 255
        allowed = (mask & ~previous) if target.click_type == "fn" else (~mask & previous)
        assert not (error & ~(allowed & ~ignore)).any(), target.full_stem
        assert int(error.sum()) == target.error_area >= study.min_error_area_px
        assert iou(previous, mask, ignore) == pytest.approx(target.previous_iou)
        assert target.previous_iou <= MAX_PREVIOUS_IOU
        assert target.source_click.trial.session.device == target.source_device
        assert target.full_stem == (
            f"{instance.first_round_full_stem}_embedded_{target.click_type}_{target.source_device}_"
            f"{target.source_index}"
        )
    return round_2


@pytest.mark.dataset
def test_closing_round_1_builds_round_2_and_a_crash_mid_build_leaves_no_partial_round(grabcut_root, worker):
    study, round_1, chosen = _study_with_first_clicks(grabcut_root)
    worker.start()

    # The last validation's transaction closes round 1; on commit the build is sent to the models queue.
    with transaction.atomic():
        assert round_close_if_full(round_id=round_1.pk) is not None
    taken = wait_until(
        lambda: re.search(r"tasks\.segmentation\.build_next_round\[([0-9a-f-]+)\] received", worker.log()),
        timeout_s=60,
        what="the worker to take the build",
    )
    wait_until(
        lambda: re.search(r"next-round build of round \d+: instance 1/\d+ done", worker.log()),
        timeout_s=60,
        what="the build's first progress line",
    )
    worker.kill()

    assert "succeeded" not in worker.log(), "the build finished before the kill; give it more instances"
    assert not Round.objects.filter(study=study, number=2).exists()
    assert not Target.objects.filter(round__study=study, round__number=2).exists()

    worker.start()
    if celery_app.conf["broker_url"].startswith("redis"):
        # acks_late + reject_on_worker_lost: the killed build's message was never acknowledged, so Redis
        # delivers it again once its visibility timeout (3 s here) has passed.
        wait_until(
            lambda: f"build_next_round[{taken.group(1)}] received" in worker.log(),
            timeout_s=60,
            what="Redis to redeliver the killed build's message",
        )
    else:
        # The file-system transport removed the message when the worker took it: the beat task's safety
        # net sends the build again for a closed round whose round 2 is missing.
        assert requeue_pending_builds() == 1
    wait_until(
        lambda: "build_next_round" in worker.log() and "succeeded" in worker.log(),
        timeout_s=180,
        what="the build to finish after the restart",
    )
    assert Round.objects.filter(study=study, number=2).count() == 1
    round_2 = _check_round_2(study, chosen)
    assert round_2.state == Round.State.OPEN

    # Sent again (a duplicate message), the build changes nothing.
    before = sorted(round_2.targets.values_list("pk", "full_stem"))
    assert requeue_pending_builds() == 0
    from config.celery import app

    app.send_task(task_names.SEGMENTATION_BUILD_NEXT_ROUND, args=[round_1.pk])
    wait_until(
        lambda: worker.log().count("build_next_round") >= 2 and worker.log().count("succeeded") >= 2,
        timeout_s=60,
        what="the duplicate build to finish",
    )
    assert Round.objects.filter(study=study, number=2).count() == 1
    assert sorted(Round.objects.get(study=study, number=2).targets.values_list("pk", "full_stem")) == before


def test_a_build_whose_segmenter_cannot_run_is_recorded_for_the_researcher_and_not_resent(
    tmp_path, worker, monkeypatch
):
    # The worker is configured for SAM ViT-B, whose checkpoint is not in its (empty) checkpoint folder.
    empty = tmp_path / "no-checkpoints"
    empty.mkdir()
    monkeypatch.setenv("CLICKLAB_NEXT_ROUND_SEGMENTERS", "sam:vit_b")
    monkeypatch.setenv("CLICKLAB_CHECKPOINT_DIR", str(empty))
    study = make_study(make_rect_dataset(tmp_path, n_images=1), publish=True, quota_pc=1, quota_mobile=0)
    round_1 = study.rounds.get(number=1)
    (target,) = round_1.targets.all()
    make_clicked_session(study, clicks=[(target, 205.0, 150.0)])
    Target.objects.filter(round=round_1).update(valid_pc=1)
    worker.start()

    with transaction.atomic():
        assert round_close_if_full(round_id=round_1.pk) is not None
    wait_until(
        lambda: Round.objects.get(pk=round_1.pk).build_error,
        timeout_s=120,
        what="the worker to record why the build failed",
    )
    wait_until(lambda: "succeeded" in worker.log(), timeout_s=30, what="the task to finish")
    round_1.refresh_from_db()
    assert f"not found at {empty / 'sam_vit_b_01ec64.pth'}" in round_1.build_error
    assert "Download sam_vit_b_01ec64.pth" in round_1.build_error and round_1.build_failed_at is not None
    assert "Retry in" not in worker.log() and "raised unexpected" not in worker.log()
    assert requeue_pending_builds() == 0  # a recorded failure waits for the researcher's retry
    assert not Round.objects.filter(study=study, number=2).exists()
