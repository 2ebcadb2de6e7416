"""tasks.corrective.update_item through a real Celery worker on the ``models`` queue: a worker SIGKILLed
mid-update leaves every item with its previous mask, and after a restart each update is stored exactly once;
an update that cannot run is retried, then the item is marked failed with the reason."""

from __future__ import annotations

import pytest
from django.core.files.storage import default_storage
from django.db import transaction

from collector.models import CorrectiveItem, CorrectiveMask
from collector.services.corrective import (
    corrective_click_record,
    corrective_items_ensure,
    corrective_round_submit,
    corrective_update_apply,
)
from collector.services.session_start import session_start
from config.celery import app as celery_app
from tasks.corrective import MAX_RETRIES, requeue_pending_updates
from tests.factories import make_dataset, make_study, make_worker
from tests.support.celery_worker import CeleryWorkerProcess, purge_queues, wait_until

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def worker(monkeypatch, exclusive_broker):
    """A worker of our own on the ``models`` queue (this module kills it); Redis redelivers an unacknowledged
    message after 3 s here instead of an hour."""
    monkeypatch.setenv("CLICKLAB_BROKER_VISIBILITY_TIMEOUT_S", "3")
    monkeypatch.delenv("CLICKLAB_NEXT_ROUND_SEGMENTERS", raising=False)
    purge_queues()
    process = CeleryWorkerProcess(queues="models")
    yield process
    process.stop()
    purge_queues()


def _items_in_round_1(tmp_path, *, n_images: int, size=(480, 360)):
    """A box campaign whose items have their round-0 mask (made here) and one click each, not yet submitted."""
    dataset = make_dataset(tmp_path, n_images=n_images, size=size)
    study = make_study(
        dataset, publish=True, kind="corrective", batch_size=n_images, quota_pc=1, quota_mobile=0
    )
    session = session_start(study=study, worker=make_worker(), device="pc")
    items = corrective_items_ensure(session=session)
    for item in items:
        corrective_update_apply(item_id=item.pk, round_number=0)
        instance = item.trial.target.instance
        x, y = (instance.bbox_x0 + instance.bbox_x1) / 2, (instance.bbox_y0 + instance.bbox_y1) / 2
        corrective_click_record(
            session=session, item_id=item.pk, idempotency_key=f"c{item.pk}", x=x, y=y, is_positive=True
        )
    return session, [CorrectiveItem.objects.get(pk=item.pk) for item in items]


def _submit_all(session, items):
    with transaction.atomic():  # the updates are sent when this commits
        for item in items:
            corrective_round_submit(session=session, item_id=item.pk, round_number=1)


def test_a_killed_worker_leaves_the_previous_masks_and_a_failing_update_is_retried_then_marked_failed(
    tmp_path, worker
):
    """One worker run for both faults (a worker start costs seconds on a busy machine): three good updates and
    one whose image file has gone (a fault no retry fixes) are sent together; the worker is SIGKILLed as the
    first one starts, then restarted."""
    session, items = _items_in_round_1(tmp_path, n_images=4)
    previous = {item.pk: item.current_mask_id for item in items}
    broken = items[-1]
    default_storage.delete(broken.trial.target.instance.image.file.name)
    good = [item.pk for item in items[:-1]]
    purge_queues()  # the round-0 updates sent when the items were made were applied above
    worker.start()
    _submit_all(session, items)
    wait_until(
        lambda: "corrective update of item" in worker.log() and "started" in worker.log(),
        timeout_s=60,
        interval_s=0.05,
        what="the worker to start the first update",
    )
    worker.kill()

    assert "succeeded" not in worker.log(), "an update finished before the kill; give the items bigger images"
    for item in CorrectiveItem.objects.filter(pk__in=previous):
        assert (item.state, item.round, item.current_mask_id) == ("updating", 1, previous[item.pk])
    assert not CorrectiveMask.objects.filter(item_id__in=previous, round=1).exists()

    worker.start()
    if not celery_app.conf["broker_url"].startswith("redis"):
        # The file-system transport dropped the message the killed worker held: the beat task's safety net
        # sends every waiting update again (duplicates of messages still queued are no-ops).
        assert requeue_pending_updates() == 4
    wait_until(
        lambda: (
            CorrectiveItem.objects.filter(pk__in=good, state="clicking", round=2).count() == 3
            and CorrectiveItem.objects.get(pk=broken.pk).state == "failed"
        ),
        timeout_s=180,
        what="the three updates to be stored and the broken one to be given up after the restart",
    )
    for item in CorrectiveItem.objects.filter(pk__in=good).select_related("current_mask"):
        assert item.current_mask.round == 1 and item.current_mask.predictor == "embedded"
        assert CorrectiveMask.objects.filter(item=item, round=1).count() == 1
        assert item.current_mask.clicks_used == 1 and item.current_mask.iou is not None

    broken = CorrectiveItem.objects.get(pk=broken.pk)
    assert "is missing from the media storage; re-import the dataset" in broken.error
    assert f"after {MAX_RETRIES + 1} attempts" in broken.error
    assert broken.update_attempts >= MAX_RETRIES + 1 and "Retry in" in worker.log()
    assert broken.current_mask_id == previous[broken.pk]  # the previous mask stays
    assert requeue_pending_updates() == 0  # nothing waits any more; a failed item is not sent again
