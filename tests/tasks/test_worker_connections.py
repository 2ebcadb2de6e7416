"""A worker keeps its database connection from task to task (config.celery), as a web worker keeps its own
from request to request, and a connection the server dropped between two tasks costs a reconnect, not a task.

Counted from PostgreSQL's side: ``pg_stat_database.sessions`` grows by one for every connection that ends, so
validating several sessions one after the other must not grow it by one per task (Celery's Django fix-up
closed every connection around every task, and each validation opened a new one)."""

from __future__ import annotations

import pytest
from django.db import connection

from collector.models import Session
from tests.factories import make_dataset, make_study
from tests.support.celery_worker import wait_until
from tests.tasks.test_outbox import _clicked_session, _post

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True), pytest.mark.one_backend]


def _ended_sessions() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
        return cursor.fetchone()[0]


def _validate(client, study, n: int) -> None:
    sessions = []
    for _ in range(n):
        session, finish_url = _clicked_session(client, study)
        assert _post(client, finish_url, {}).status_code == 200
        sessions.append(session.pk)
        # one at a time: each validation is its own task, started after the previous one ended
        wait_until(
            lambda pk=session.pk: Session.objects.filter(pk=pk, validated_at__isnull=False).exists(),
            timeout_s=60,
            what=f"validation of session {session.pk}",
        )


def test_validations_reuse_the_workers_connection_and_survive_it_being_dropped(
    client, tmp_path, celery_worker
):
    if connection.vendor != "postgresql":
        pytest.fail(
            "this test counts PostgreSQL's sessions: run it with DATABASE_URL=postgres://postgres@127.0.0.1:5432/<db>"
            " and a Redis CELERY_BROKER_URL, as `make test` does."
        )
    study = make_study(make_dataset(tmp_path, n_images=8, size=(64, 48)), publish=True, batch_size=1,
                       quota_pc=8)  # fmt: skip
    _validate(client, study, 1)  # the worker is connected (and the study's stimuli rendered)
    before = _ended_sessions()
    _validate(client, study, 5)
    ended = _ended_sessions() - before
    assert ended <= 1, f"{ended} database connections ended while a worker ran 5 validations (one per task?)"

    # the server ends the worker's connection between two tasks (a PostgreSQL restart, an idle timeout)
    logged = len(celery_worker.log())
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )
        assert cursor.fetchone()[0] >= 1
    _validate(client, study, 2)
    after = celery_worker.log()[logged:]
    assert "Traceback" not in after and "retry" not in after.lower(), after[-3000:]
