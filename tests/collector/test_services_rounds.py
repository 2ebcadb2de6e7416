"""Rounds: a round closes when every target meets both quotas, and the next round's build is sent (once,
after commit) while the study allows more rounds. Messages really go to the broker; Celery's own publish
signal tells which were sent."""

from __future__ import annotations

import threading

import pytest
from celery.signals import after_task_publish
from django.db import connection

from collector.models import Round
from collector.services.rounds import round_close_if_full, round_is_full
from collector.services.validation import session_validate
from tasks import names as task_names
from tests.factories import make_rect_dataset, make_study, make_validated_batch
from tests.support.celery_worker import purge_queues


@pytest.fixture
def published_builds():
    """[(task name, args)] of every task message published while the test runs."""
    sent: list[tuple[str, list]] = []

    def record(sender=None, headers=None, body=None, **_):
        sent.append((sender, list(body[0]) if body else []))

    after_task_publish.connect(record, weak=False)
    yield sent
    after_task_publish.disconnect(record)
    purge_queues()


def _builds(sent):
    return [args for name, args in sent if name == task_names.SEGMENTATION_BUILD_NEXT_ROUND]


@pytest.mark.django_db
def test_round_closes_when_both_quotas_are_met_and_sends_the_build(
    tmp_path, django_capture_on_commit_callbacks, published_builds
):
    study = make_study(make_rect_dataset(tmp_path, n_images=10), publish=True, quota_pc=1, quota_mobile=1)
    round_1 = study.rounds.get(number=1)
    with django_capture_on_commit_callbacks(execute=True):
        make_validated_batch(study, device="pc")
    round_1.refresh_from_db()
    assert round_1.state == "open" and not round_is_full(round=round_1)  # mobile quota still missing
    assert _builds(published_builds) == []

    with django_capture_on_commit_callbacks(execute=True):
        make_validated_batch(study, device="mobile")
    round_1.refresh_from_db()
    assert round_1.state == "closed" and round_1.closed_at is not None
    assert _builds(published_builds) == [[round_1.pk]]


@pytest.mark.django_db
def test_rejected_batch_does_not_fill_the_round(
    tmp_path, django_capture_on_commit_callbacks, published_builds
):
    study = make_study(make_rect_dataset(tmp_path, n_images=10), publish=True, quota_pc=1, quota_mobile=0)
    with django_capture_on_commit_callbacks(execute=True):
        session = make_validated_batch(study, valid_positions=range(6))
    assert session.validity == "rejected"
    assert study.rounds.get(number=1).state == "open"
    assert _builds(published_builds) == []


@pytest.mark.django_db
def test_last_round_closes_without_a_build(tmp_path, django_capture_on_commit_callbacks, published_builds):
    study = make_study(
        make_rect_dataset(tmp_path, n_images=10), publish=True, quota_pc=1, quota_mobile=0, max_rounds=1
    )
    with django_capture_on_commit_callbacks(execute=True):
        make_validated_batch(study)
    assert study.rounds.get(number=1).state == "closed"
    assert _builds(published_builds) == []
    # closing again is a no-op
    assert round_close_if_full(round_id=study.rounds.get(number=1).pk) is None


@pytest.mark.django_db(transaction=True)
def test_concurrent_validations_close_the_round_exactly_once(tmp_path, published_builds, exclusive_broker):
    """Two batches that together fill the round, validated at the same moment on two connections: the
    later one must see the earlier one's counters (else the round never closes) and only one closes it.
    (The suite's shared worker steps aside: it would otherwise validate the committed batches itself from
    their finish messages, before this test purges them, and the build would be sent from its process.)"""
    study = make_study(make_rect_dataset(tmp_path, n_images=10), publish=True, quota_pc=2, quota_mobile=0)
    sessions = [make_validated_batch(study, validate=False) for _ in range(2)]
    purge_queues()  # the finish messages; this test validates in-process
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def validate(session_id):
        try:
            barrier.wait(timeout=30)
            session_validate(session_id=session_id)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=validate, args=(s.pk,)) for s in sessions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    round_1 = Round.objects.get(study=study, number=1)
    assert round_1.state == "closed"
    assert _builds(published_builds) == [[round_1.pk]]
