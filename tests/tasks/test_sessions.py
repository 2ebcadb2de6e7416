"""tasks.sessions.expire_sessions through a real Celery worker process, sent by name as beat sends it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from collector.models import Session, Target
from collector.services.session_start import session_start
from config.celery import app
from config.celery import app as celery_app
from tasks import names as task_names
from tests.factories import make_dataset, make_study, make_worker
from tests.support.celery_worker import CeleryWorkerProcess, purge_queues, wait_until

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]


def test_beat_schedule_runs_expiry():
    entry = celery_app.conf["beat_schedule"]["expire-sessions"]
    assert entry["task"] == task_names.SESSIONS_EXPIRE_SESSIONS and entry["schedule"] > 0


def test_expire_sessions_task_releases_abandoned_sessions(tmp_path, exclusive_broker):
    study = make_study(make_dataset(tmp_path, n_images=3), publish=True, batch_size=3, quota_pc=1)
    abandoned = session_start(study=study, worker=make_worker(), device="pc")
    Session.objects.filter(pk=abandoned.pk).update(expires_at=timezone.now() - timedelta(seconds=5))
    assert sorted(Target.objects.values_list("inflight_pc", flat=True)) == [1, 1, 1]

    purge_queues()
    worker = CeleryWorkerProcess(queues="default")
    worker.start()
    try:
        app.send_task(task_names.SESSIONS_EXPIRE_SESSIONS)
        wait_until(
            lambda: Session.objects.filter(pk=abandoned.pk, status="expired").exists(),
            timeout_s=60,
            what="the abandoned session to expire",
        )
    finally:
        worker.stop()
        purge_queues()
    assert sorted(Target.objects.values_list("inflight_pc", flat=True)) == [0, 0, 0]
    # the targets are free again for someone else
    assert session_start(study=study, worker=make_worker(), device="pc").trials.count() == 3
