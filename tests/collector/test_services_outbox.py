"""The outbox's transactional half, without a worker: an intent exists exactly when its change committed,
is published once after the commit, and the relay publishes what the broker refused, oldest first, once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from celery.signals import after_task_publish
from django.db import transaction
from django.utils import timezone

from collector.models import TaskIntent
from collector.services.outbox import task_intent_add, task_intents_relay
from tasks import names as task_names
from tests.support.broker import broker_down
from tests.support.celery_worker import purge_queues

pytestmark = pytest.mark.django_db(transaction=True)

NAME = task_names.SESSIONS_EXPIRE_SESSIONS  # harmless if a worker runs it


@pytest.fixture
def published():
    sent: list[tuple[str, list]] = []

    def record(sender=None, body=None, **_):
        sent.append((sender, list(body[0]) if body else []))

    after_task_publish.connect(record, weak=False)
    yield sent
    after_task_publish.disconnect(record)
    purge_queues()


def test_a_rolled_back_change_leaves_no_intent_and_sends_nothing(published):
    with pytest.raises(RuntimeError), transaction.atomic():
        task_intent_add(name=NAME, args=[1])
        raise RuntimeError("the state change failed")
    assert not TaskIntent.objects.exists() and published == []
    with transaction.atomic():
        intent = task_intent_add(name=NAME, args=[2])
        assert published == []  # nothing leaves before the commit
    assert published == [(NAME, [2])]
    intent.refresh_from_db()
    assert intent.sent_at is not None and intent.attempts == 0


def test_the_relay_sends_refused_intents_oldest_first_once(published, settings):
    with broker_down():
        for n in (1, 2, 3):
            with transaction.atomic():
                task_intent_add(name=NAME, args=[n])
        assert TaskIntent.objects.filter(sent_at__isnull=True, attempts=1).count() == 3
        assert task_intents_relay(grace_s=0) == {"sent": 0, "failed": 1, "pending": 3}
    assert published == []
    TaskIntent.objects.update(created_at=timezone.now() - timedelta(seconds=120))
    fresh = TaskIntent.objects.create(task_name=NAME, args=[4])  # younger than the grace: the fast path's
    settings.OUTBOX_RELAY_GRACE_S = 60
    assert task_intents_relay() == {"sent": 3, "failed": 0, "pending": 1}
    assert published == [(NAME, [1]), (NAME, [2]), (NAME, [3])]
    assert task_intents_relay(grace_s=0) == {"sent": 1, "failed": 0, "pending": 0}
    assert task_intents_relay(grace_s=0) == {"sent": 0, "failed": 0, "pending": 0}
    assert published[3:] == [(NAME, [4])] and TaskIntent.objects.get(pk=fresh.pk).sent_at is not None
