"""The transactional outbox (issue 16.3, 20.4): with the broker down, finishing a batch still answers 200
with the completion code and leaves the validation as a pending task intent; once the broker is back the
relay sends it and a real worker validates the session."""

from __future__ import annotations

import json
import threading
import time

import pytest
from django.urls import reverse

from collector.models import Session, TaskIntent
from collector.services.outbox import relay_forever, task_intents_relay
from collector.services.session_start import session_start
from collector.services.tokens import session_token_make
from tasks import names as task_names
from tests.factories import make_dataset, make_study, make_worker
from tests.support.broker import broker_down
from tests.support.celery_worker import wait_until

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]

VALIDATE = task_names.VALIDATION_VALIDATE_SESSION


def _post(client, url, body):
    return client.post(url, data=json.dumps(body), content_type="application/json")


def _clicked_session(client, study):
    session = session_start(study=study, worker=make_worker(), device="pc")
    token = session_token_make(session_id=session.pk)
    for position in range(study.batch_size):
        body = {"position": position, "idempotency_key": f"k{session.pk}-{position}", "x": 5.5, "y": 7.25,
                "shown_width": 64, "shown_height": 48, "pointer_type": "mouse", "reaction_ms": 400,
                "event_timestamp_ms": 9000.5 + position, "phase_onsets_ms": {"A": 1, "B": 2, "C": 3, "D": 4},
                "blocked_clicks": 0, "flags": [], "refresh_hz": 60}  # fmt: skip
        click = _post(client, reverse("annotation_ui:api_click", kwargs={"token": token}), body)
        assert click.status_code == 201, click.content
    return session, reverse("annotation_ui:api_finish", kwargs={"token": token})


def test_finish_with_the_broker_down_answers_the_code_and_the_relay_sends_the_validation_later(
    client, tmp_path, settings, celery_worker
):
    study = make_study(make_dataset(tmp_path, n_images=3, size=(64, 48)), publish=True, batch_size=3)
    TaskIntent.objects.all().delete()  # publishing's render intent is not what this test watches
    session, finish_url = _clicked_session(client, study)

    with broker_down():
        started = time.monotonic()
        response = _post(client, finish_url, {})
        elapsed = time.monotonic() - started
        session.refresh_from_db()
        assert response.status_code == 200, response.content
        assert response.json()["finish"]["code"] == session.completion_code != ""
        assert elapsed < 2.0, f"finish took {elapsed:.2f}s with the broker down"
        intent = TaskIntent.objects.get(task_name=VALIDATE)
        assert (intent.args, intent.sent_at, intent.attempts) == ([session.pk], None, 1)
        assert "Connection refused" in intent.last_error or "Error" in intent.last_error
        # Finishing again is idempotent: same code, no second intent.
        assert _post(client, finish_url, {}).json()["finish"]["code"] == session.completion_code
        assert TaskIntent.objects.filter(task_name=VALIDATE).count() == 1
        # A relay pass while the broker is still down sends nothing and keeps the intent.
        assert task_intents_relay(grace_s=0) == {"sent": 0, "failed": 1, "pending": 1}
        assert Session.objects.get(pk=session.pk).validated_at is None

    # Broker back: a relay loop (as in a worker or `manage.py outbox_relay`) sends it within its interval.
    settings.OUTBOX_RELAY_GRACE_S = 0
    stop = threading.Event()
    loop = threading.Thread(target=relay_forever, kwargs={"stop": stop, "every_s": 0.5}, daemon=True)
    loop.start()
    try:
        wait_until(
            lambda: TaskIntent.objects.filter(pk=intent.pk, sent_at__isnull=False).exists(),
            timeout_s=10,
            what="the relay to send the pending validation",
        )
    finally:
        stop.set()
        loop.join(timeout=10)
    wait_until(
        lambda: Session.objects.filter(pk=session.pk, validated_at__isnull=False).exists(),
        timeout_s=60,
        what=f"the worker to validate session {session.pk}; worker log:\n{celery_worker.log()}",
    )
    assert TaskIntent.objects.get(pk=intent.pk).attempts == 2  # the failed fast path and the failed pass


def test_with_the_broker_up_the_intent_is_sent_at_commit_and_the_relay_has_nothing_to_do(
    client, tmp_path, settings, celery_worker
):
    study = make_study(make_dataset(tmp_path, n_images=3, size=(64, 48)), publish=True, batch_size=3)
    session, finish_url = _clicked_session(client, study)
    assert _post(client, finish_url, {}).status_code == 200
    intent = TaskIntent.objects.get(task_name=VALIDATE)
    assert intent.sent_at is not None and intent.attempts == 0
    assert task_intents_relay(grace_s=0)["sent"] == 0
    wait_until(
        lambda: Session.objects.filter(pk=session.pk, validated_at__isnull=False).exists(),
        timeout_s=60,
        what=f"validation of session {session.pk}",
    )


def test_without_beat_a_worker_s_relay_thread_sends_the_pending_validation_within_its_interval(
    client, tmp_path, settings, exclusive_broker
):
    """Issue 20.4: no beat and no ``outbox_relay`` process, only a worker; the relay thread every worker runs
    (``tasks.outbox``, interval ``CLICKLAB_OUTBOX_RELAY_EVERY_S``, here 2 s) sends the validation that the
    finish could not send while the broker was down, and that worker validates the session."""
    from tests.support.celery_worker import CeleryWorkerProcess, purge_queues

    study = make_study(make_dataset(tmp_path, n_images=3, size=(64, 48)), publish=True, batch_size=3)
    TaskIntent.objects.all().delete()  # publishing's render intent is not what this test watches
    session, finish_url = _clicked_session(client, study)
    with broker_down():
        assert _post(client, finish_url, {}).status_code == 200
    intent = TaskIntent.objects.get(task_name=VALIDATE)
    assert intent.sent_at is None and intent.attempts == 1
    purge_queues()
    worker = CeleryWorkerProcess(
        queues="default",
        environment={"CLICKLAB_OUTBOX_RELAY_EVERY_S": "2", "CLICKLAB_OUTBOX_RELAY_GRACE_S": "0"},
    )
    started = time.monotonic()
    worker.start()
    try:
        assert "outbox relay thread started (every 2.0s)" in worker.log()
        wait_until(
            lambda: Session.objects.filter(pk=session.pk, validated_at__isnull=False).exists(),
            timeout_s=60,
            what=f"the worker's relay thread to send and validate session {session.pk}; log:\n{worker.log()}",
        )
        elapsed = time.monotonic() - started
    finally:
        worker.stop()
    assert TaskIntent.objects.get(pk=intent.pk).sent_at is not None
    assert elapsed < 30, f"validated {elapsed:.1f} s after the worker started (relay every 2 s)"
