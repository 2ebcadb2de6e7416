"""tasks.validation through a real Celery worker process: finish → validated; a worker SIGKILLed in the
middle of a validation leaves nothing half-applied and, restarted, gives exactly one result per session."""

from __future__ import annotations

import re
import time
from collections import Counter

import pytest

from collector.models import Click, Round, Session, Target
from collector.services.validation import validations_requeue
from config.celery import app as celery_app
from tests.factories import make_rect_dataset, make_study, make_validated_batch
from tests.support.celery_worker import CeleryWorkerProcess, purge_queues, wait_until
from tests.support.db_locks import RowLock, waiting_on_a_lock

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def worker(monkeypatch, exclusive_broker):
    """A worker of our own (this module kills it): default queue, one process. Redis redelivers an
    unacknowledged message after 3 s here instead of an hour, so a restart picks up the killed task."""
    monkeypatch.setenv("CLICKLAB_BROKER_VISIBILITY_TIMEOUT_S", "3")
    purge_queues()
    process = CeleryWorkerProcess(queues="default")
    yield process
    process.stop()
    purge_queues()


def _validated(session_ids):
    return Session.objects.filter(pk__in=session_ids, validated_at__isnull=False).count() == len(session_ids)


def test_finishing_a_session_gets_it_validated_by_the_worker(tmp_path, worker):
    study = make_study(make_rect_dataset(tmp_path, n_images=10), publish=True)
    worker.start()
    session = make_validated_batch(study, valid_positions=range(8), validate=False)
    wait_until(lambda: _validated([session.pk]), timeout_s=60, what=f"validation of session {session.pk}")
    session.refresh_from_db()
    assert (session.validity, session.valid_clicks) == ("counted", 8)
    assert sorted(
        Target.objects.filter(round=session.round).values_list("valid_pc", "inflight_pc")
    ) == sorted([(1, 0)] * 8 + [(0, 0)] * 2)


def test_worker_killed_mid_validation_leaves_no_half_result_and_the_task_runs_again(tmp_path, worker):
    quota = 50
    study = make_study(make_rect_dataset(tmp_path, n_images=10), publish=True, quota_pc=quota)
    round_1 = study.rounds.get(number=1)
    plans_before = [range(10), range(7), range(6)]
    plans_killed = [range(10), range(8), range(5), range(9)]

    # 1. A first group validated normally.
    worker.start()
    before = [make_validated_batch(study, valid_positions=p, validate=False) for p in plans_before]
    wait_until(lambda: _validated([s.pk for s in before]), timeout_s=60, what="first group validated")
    first_results = dict(
        Session.objects.filter(pk__in=[s.pk for s in before]).values_list("pk", "validated_at")
    )
    worker.stop()

    # 2. A second group finished while no worker runs; their messages wait in the broker.
    killed = [make_validated_batch(study, valid_positions=p, validate=False) for p in plans_killed]
    killed_ids = [s.pk for s in killed]

    with RowLock(Round, round_1.pk):
        # 3. The worker takes a validation and stops inside it, at the round lock (PostgreSQL: after it has
        #    already written the clicks and the session row in its transaction).
        worker.start()
        wait_until(
            lambda: re.search(r"tasks\.validation\.validate_session\[([0-9a-f-]+)\] received", worker.log()),
            timeout_s=60,
            what="the worker to take a validation",
        )
        wait_until(waiting_on_a_lock, timeout_s=30, what="the validation to wait on the round lock")
        time.sleep(0.5)
        worker.kill()

        # 4. Nothing of the killed validation is visible: no session, click or counter was touched.
        assert Session.objects.filter(pk__in=killed_ids, validated_at__isnull=False).count() == 0
        assert Session.objects.filter(pk__in=killed_ids, validity="pending").count() == len(killed)
        assert Click.objects.filter(trial__session_id__in=killed_ids, is_valid__isnull=False).count() == 0
        assert (
            sorted(Target.objects.filter(round=round_1).values_list("inflight_pc", flat=True))
            == [len(killed)] * 10
        )

    # 5. Restarted, the task runs again (the requeue safety net re-sends it; Redis also redelivers the unacked
    #    message on its own schedule) and every session gets exactly one result.
    worker.start()
    requeued = validations_requeue(older_than_s=0)
    assert set(requeued) <= set(killed_ids)
    wait_until(lambda: _validated(killed_ids), timeout_s=90, what="second group validated after the restart")
    # The task ran again in the restarted worker (re-sent by the requeue safety net; on Redis the killed
    # message's own redelivery also comes, on kombu's restore schedule, and is then a no-op).
    assert re.search(r"tasks\.validation\.validate_session\[[0-9a-f-]+\] succeeded", worker.log())

    sessions = {s.pk: s for s in Session.objects.filter(study=study)}
    for session, plan in zip(before + killed, plans_before + plans_killed, strict=True):
        stored = sessions[session.pk]
        expected_validity = "counted" if len(plan) >= 7 else "rejected"
        assert (stored.validity, stored.valid_clicks) == (expected_validity, len(plan)), stored
    for pk, validated_at in first_results.items():
        assert sessions[pk].validated_at == validated_at  # not validated a second time

    expected = Counter()
    for session, plan in zip(before + killed, plans_before + plans_killed, strict=True):
        if len(plan) >= 7:
            for position, target_id in session.trials.values_list("position", "target_id"):
                expected[target_id] += position in plan
    for target in Target.objects.filter(round=round_1):
        assert (target.valid_pc, target.inflight_pc) == (expected[target.pk], 0), target


@pytest.mark.one_backend
def test_redis_redelivers_a_killed_workers_validation_within_seconds_of_its_visibility_timeout(
    tmp_path, worker, monkeypatch
):
    """No safety net here: the message the SIGKILLed worker held comes back from Redis by itself, a few
    seconds after its visibility timeout (kombu's default sweep, every 10 x 10 s, took up to 100 s more), even
    when the kill left a sweep's lock behind."""

    if not celery_app.conf["broker_url"].startswith("redis"):
        pytest.fail(
            "this test is about Redis's redelivery: run it with CELERY_BROKER_URL=redis://127.0.0.1:6379/<db> "
            "(make test-services does)"
        )
    # Longer than the worker's restart, so the sweep at the restarted worker's start finds nothing yet.
    monkeypatch.setenv("CLICKLAB_BROKER_VISIBILITY_TIMEOUT_S", "8")
    study = make_study(make_rect_dataset(tmp_path, n_images=10), publish=True)
    round_1 = study.rounds.get(number=1)
    session = make_validated_batch(study, valid_positions=range(8), validate=False)  # its message waits
    with RowLock(Round, round_1.pk):
        worker.start()
        taken = wait_until(
            lambda: re.search(r"tasks\.validation\.validate_session\[([0-9a-f-]+)\] received", worker.log()),
            timeout_s=60,
            what="the worker to take the validation",
        )
        wait_until(waiting_on_a_lock, timeout_s=30, what="the validation to wait on the round lock")
        worker.kill()
    killed_at = time.monotonic()
    # And the worst moment for it: the kill landed inside a redelivery sweep, so the sweep's lock stays in Redis
    # until it expires (kombu's default: 300 s, during which nothing is redelivered).
    import redis

    options = celery_app.conf["broker_transport_options"]
    redis.Redis.from_url(celery_app.conf["broker_url"]).set(
        options.get("unacked_mutex_key", "unacked_mutex"),
        "the killed worker's sweep",
        ex=options.get("unacked_mutex_expire", 300),
    )
    worker.start()
    wait_until(
        lambda: _validated([session.pk]), timeout_s=40, what="Redis to redeliver the killed validation"
    )
    waited = time.monotonic() - killed_at
    assert f"validate_session[{taken.group(1)}] received" in worker.log()  # the same message, not a new one
    session.refresh_from_db()
    assert (session.validity, session.valid_clicks) == ("counted", 8)
    print(f"validated {waited:.1f} s after the kill (visibility timeout 8 s)")
