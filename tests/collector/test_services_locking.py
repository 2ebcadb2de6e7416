"""Lock order between the writers of one round: session starts and validations take turns on the round's
row and never wait on each other in a cycle. (The deadlock CI once hit: a validation held its study and
round rows with FOR UPDATE; a concurrent start held its targets and, inserting a session of that study and
round, needed FOR KEY SHARE on both rows, while the validation waited on the start's targets.)"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import DatabaseError, connection, transaction

from collector.models import Round, Session, Study, Target
from collector.services.session_start import NO_ROUND_MESSAGE, SessionStartRefused, session_start
from collector.services.validation import session_validate
from tests.factories import make_rect_dataset, make_study, make_validated_batch, make_worker
from tests.support.celery_worker import purge_queues, wait_until
from tests.support.db_locks import RowLock, waiting_on_a_lock

pytestmark = pytest.mark.django_db(transaction=True)


def _locked_elsewhere(model, pk: int) -> bool:
    """Whether another connection holds a lock on ``model``'s row ``pk`` that a writer of the row waits on."""
    try:
        with transaction.atomic():
            model.objects.select_for_update(no_key=True, nowait=True).filter(pk=pk).first()
    except DatabaseError:
        return True
    return False


class _InThread:
    """Runs ``fn`` on a connection of its own; ``result`` or ``error`` once it has returned."""

    def __init__(self, fn):
        self.fn, self.result, self.error = fn, None, None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            self.result = self.fn()
        except BaseException as exc:
            self.error = exc
        finally:
            connection.close()

    def join(self):
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), f"{self.fn} still runs after 60 s"
        assert self.error is None, self.error
        return self.result


def test_a_start_waits_for_a_validation_of_its_round_then_goes_through(tmp_path):
    study = make_study(make_rect_dataset(tmp_path, n_images=20), publish=True, quota_pc=3)
    finished = make_validated_batch(study, validate=False)
    purge_queues()  # its validation message: this test validates in-process
    targets = sorted(finished.trials.values_list("target_id", flat=True))

    # The validation stops at the first target it releases: it has locked the session, judged the clicks
    # and taken the round's turn by then.
    with RowLock(Target, targets[0]):
        validation = _InThread(lambda: session_validate(session_id=finished.pk))
        wait_until(waiting_on_a_lock, timeout_s=30, what="the validation to wait on the target lock")
        if connection.vendor == "postgresql":
            assert _locked_elsewhere(Round, finished.round_id), "the validation should hold the round by now"
            assert not _locked_elsewhere(Study, study.pk), "a validation must not lock its study's row"
        start = _InThread(lambda: session_start(study=study, worker=make_worker(), device="pc"))
        time.sleep(0.5)
        assert start.thread.is_alive(), "the start should wait for the round's turn"
    validation.join()
    started = start.join()

    assert started.trials.count() == 10
    assert not set(started.trials.values_list("target_id", flat=True)) & set(targets)
    finished.refresh_from_db()
    assert (finished.validity, finished.valid_clicks) == ("counted", 10)
    counters = Target.objects.filter(pk__in=targets).values_list("pk", "valid_pc", "inflight_pc")
    assert {pk: (valid, inflight) for pk, valid, inflight in counters} == {pk: (1, 0) for pk in targets}
    assert Session.objects.filter(study=study).count() == 2


def test_starts_and_validations_of_one_round_at_once_never_deadlock(tmp_path):
    """The situation of the deadlock CI hit, many times over: batches validated while other workers start
    theirs, all released at the same moment."""
    study = make_study(make_rect_dataset(tmp_path, n_images=12), publish=True, quota_pc=100)
    for attempt in range(5):
        finished = [make_validated_batch(study, validate=False) for _ in range(4)]
        purge_queues()
        workers = [make_worker() for _ in range(4)]
        barrier = threading.Barrier(len(finished) + len(workers))

        def after_barrier(fn, barrier=barrier):
            return lambda: (barrier.wait(timeout=30), fn())[1]

        calls = [after_barrier(lambda s=s: session_validate(session_id=s.pk)) for s in finished] + [
            after_barrier(lambda w=w: session_start(study=study, worker=w, device="pc")) for w in workers
        ]
        running = [_InThread(call) for call in calls]
        results = [call.join() for call in running]  # re-raises a deadlock or any other error
        assert [r.validity for r in results[: len(finished)]] == ["counted"] * len(finished), attempt
        assert [r.trials.count() for r in results[len(finished) :]] == [10] * len(workers), attempt


def test_a_start_that_waited_for_the_validation_closing_the_round_is_told_the_round_is_complete(tmp_path):
    study = make_study(make_rect_dataset(tmp_path, n_images=10), publish=True)
    round_1 = study.rounds.get(number=1)

    def close_round():
        Round.objects.filter(pk=round_1.pk).update(state=Round.State.CLOSED)

    with RowLock(Round, round_1.pk, before_commit=close_round):
        start = _InThread(lambda: session_start(study=study, worker=make_worker(), device="pc"))
        wait_until(waiting_on_a_lock, timeout_s=30, what="the start to wait for the round's turn")
    start.thread.join(timeout=60)
    assert isinstance(start.error, SessionStartRefused), start.error
    assert str(start.error) == NO_ROUND_MESSAGE
    assert Session.objects.filter(study=study).count() == 0
    assert Target.objects.filter(round=round_1, inflight_pc__gt=0).count() == 0


@pytest.mark.one_backend
def test_a_start_with_nothing_to_take_is_refused_without_waiting_for_the_rounds_turn(tmp_path):
    """A round's tail: every wanted image in flight. The worker who comes then is told so without taking the
    round's turn (the lock every start of the round queues on), so a crowd of waiting workers does not queue
    behind the starts that can allocate. The round row is held locked elsewhere and the start runs with a
    lock timeout: a start that took the turn would fail on it instead of being refused."""
    if connection.vendor != "postgresql":
        pytest.fail(
            "this test needs PostgreSQL (its subject is a row lock a start must not wait for; SQLite has one "
            "write lock): run it with DATABASE_URL=postgres://postgres@127.0.0.1:5432/<db>, as `make test` does."
        )
    study = make_study(make_rect_dataset(tmp_path, n_images=10), publish=True, quota_pc=1)
    holder = session_start(study=study, worker=make_worker(), device="pc")
    assert holder.trials.filter(role="task").count() == 10
    with RowLock(Round, holder.round_id):
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '2s'")
        try:
            with pytest.raises(SessionStartRefused) as refused:
                session_start(study=study, worker=make_worker(), device="pc")
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SET lock_timeout = 0")
    assert refused.value.retry_after_s, "temporary: the images are in another batch"
    assert Session.objects.filter(study=study).count() == 1, "no session row was written"
