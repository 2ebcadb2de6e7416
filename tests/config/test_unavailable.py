"""A PostgreSQL restart mid-request: a request that is safe to run twice runs once more on a new connection
(the annotator's click, presented report and finish are stored once and answered as usual), any other gets a
503 with Retry-After (which the player's outbox retries) and nothing half-stored, and so does a request whose
second run fails too. The fault is real: the request's own server connection is terminated by PostgreSQL
(``pg_terminate_backend``, what a restart does to it), idle or in the middle of a statement."""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest
from django.db import OperationalError, connection, connections
from django.http import HttpResponse
from django.urls import reverse
from psycopg.errors import AdminShutdown, DeadlockDetected, SerializationFailure

from annotation_ui import parsers
from collector.models import Click, Round, Session, Target, Trial, Worker
from collector.services.session_start import session_start
from collector.services.tokens import session_token_make, study_link_token_make
from config import unavailable
from config.unavailable import DatabaseRetryMiddleware, connection_lost, retry_safe
from tests.factories import make_dataset, make_study, make_worker

CLICK = {"position": 0, "idempotency_key": "k0", "x": 5.5, "y": 7.25, "shown_width": 640, "shown_height": 480,
         "pointer_type": "mouse", "reaction_ms": 400, "event_timestamp_ms": 9000.5,
         "phase_onsets_ms": {"A": 1, "B": 2, "C": 3, "D": 4}, "blocked_clicks": 0, "flags": [],
         "refresh_hz": 60}  # fmt: skip
PRESENTED = {"position": 0, "presentation_id": "p0"}


def _needs_postgresql() -> None:
    if connection.vendor != "postgresql":
        pytest.fail(
            "this test needs PostgreSQL (it terminates the request's server connection): run it with "
            "DATABASE_URL=postgres://postgres@127.0.0.1:5432/<db>, as `make test-services` does."
        )


def _terminate(pid: int) -> None:
    """End backend ``pid`` from another connection, as a PostgreSQL restart ends every connection."""
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
            assert cursor.fetchone()[0] is True
    finally:
        other.close()


def _terminate_own_connection() -> None:
    """End the connection the next request will use; the client does not know yet (Django's test client
    runs no ``close_old_connections``, so no health check finds it before the request's first statement)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    _terminate(pid)


class _LockThenTerminate(threading.Thread):
    """Holds a row lock (``SELECT ... FOR UPDATE`` of ``table`` row ``row_id``) from a connection of its own;
    each backend that comes to wait for it is terminated mid-statement, ``times`` of them, then the lock is
    released. ``terminated`` lists their pids."""

    def __init__(self, *, table: str, row_id: int, times: int):
        super().__init__(daemon=True)
        self.table, self.row_id, self.times = table, row_id, times
        self.locked = threading.Event()
        self.terminated: list[int] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        holder = connections.create_connection("default")
        try:
            with holder.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                holder_pid = cursor.fetchone()[0]
                cursor.execute("BEGIN")
                cursor.execute(f'SELECT 1 FROM "{self.table}" WHERE id = %s FOR UPDATE', [self.row_id])
                self.locked.set()
                deadline = time.monotonic() + 20
                while len(self.terminated) < self.times and time.monotonic() < deadline:
                    # pg_stat_activity is read once per transaction unless the snapshot is dropped
                    cursor.execute("SELECT pg_stat_clear_snapshot()")
                    cursor.execute(
                        "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", [holder_pid]
                    )
                    for (pid,) in cursor.fetchall():
                        if pid not in self.terminated:
                            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
                            self.terminated.append(pid)
                    time.sleep(0.02)
                cursor.execute("ROLLBACK")
        except BaseException as error:  # reported by the test
            self.error = error
        finally:
            self.locked.set()
            holder.close()

    def finish(self) -> None:
        self.join(30)
        assert not self.is_alive() and self.error is None, self.error


@pytest.fixture
def batch(tmp_path, settings):
    """A running session of 3 trials: (session, token)."""
    settings.MEDIA_ROOT = tmp_path / "media"
    study = make_study(make_dataset(tmp_path, n_images=3, size=(64, 48)), publish=True, batch_size=3)
    session = session_start(study=study, worker=make_worker(), device="pc")
    return session, session_token_make(session_id=session.pk)


@pytest.fixture
def no_validation(exclusive_broker):
    """A finish here commits for real and sends the validation task: with the suite's shared worker running,
    it validated the session while the teardown flushed the tables, and the two deadlocked (the flush failed,
    and the next test met the rows it left). The shared worker steps aside and the queue is purged before the
    flush."""
    from tests.support.celery_worker import purge_queues

    yield
    purge_queues()


def _post(client, name: str, token: str, body: dict):
    url = reverse(f"annotation_ui:{name}", kwargs={"token": token})
    return client.post(url, data=json.dumps(body), content_type="application/json")


def _assert_503(response) -> None:
    assert response.status_code == 503, response.content
    assert response["Retry-After"] == "5" and response["Cache-Control"] == "no-store"
    assert (
        response.json()["code"] == "database_unavailable"
        and "nothing was stored" in response.json()["message"]
    )


@pytest.mark.one_backend
@pytest.mark.django_db(transaction=True)
def test_a_click_on_a_connection_the_server_ended_runs_again_and_is_stored_once(client, batch, caplog):
    _needs_postgresql()
    session, token = batch
    _terminate_own_connection()

    with caplog.at_level(logging.WARNING, logger="config.unavailable"):
        response = _post(client, "api_click", token, CLICK)
    assert response.status_code == 201 and response.json()["created"] is True, response.content
    [warning] = [r for r in caplog.records if r.name == "config.unavailable"]
    assert warning.getMessage() == "database connection lost: the request runs again"
    assert warning.error in ("OperationalError", "InterfaceError")
    assert warning.path == "/api/annotator/[token]/click" and token not in caplog.text

    again = _post(client, "api_click", token, CLICK)
    assert again.status_code == 200 and again.json()["created"] is False
    assert Click.objects.filter(trial__session=session).count() == 1


@pytest.mark.one_backend
@pytest.mark.django_db(transaction=True)
def test_presented_on_a_connection_the_server_ended_runs_again_and_counts_once(client, batch):
    _needs_postgresql()
    session, token = batch
    _terminate_own_connection()
    response = _post(client, "api_presented", token, PRESENTED)
    assert response.status_code == 200, response.content
    assert response.json() == {"ok": True, "position": 0, "presentations": 1, "replayed": False}
    again = _post(client, "api_presented", token, PRESENTED)
    assert again.json()["presentations"] == 1 and again.json()["replayed"] is False
    assert [shown["id"] for shown in Trial.objects.get(session=session, position=0).presentations] == ["p0"]


@pytest.mark.one_backend
@pytest.mark.django_db(transaction=True)
def test_finish_on_a_connection_the_server_ended_runs_again(client, batch, no_validation):
    _needs_postgresql()
    session, token = batch
    for position in range(3):
        click = {**CLICK, "position": position, "idempotency_key": f"k{position}"}
        assert _post(client, "api_click", token, click).status_code == 201
    _terminate_own_connection()
    finished = _post(client, "api_finish", token, {})
    assert finished.status_code == 200, finished.content
    session.refresh_from_db()
    assert session.status == Session.Status.FINISHED
    assert session.completion_code and session.completion_code in json.dumps(finished.json())
    assert _post(client, "api_finish", token, {}).json() == finished.json()


@pytest.mark.one_backend
@pytest.mark.django_db(transaction=True)
def test_a_get_on_a_connection_the_server_ended_runs_again(client, batch):
    _needs_postgresql()
    session, token = batch
    _terminate_own_connection()
    response = client.get(reverse("annotation_ui:api_state", kwargs={"token": token}))
    assert response.status_code == 200, response.content


@pytest.mark.one_backend
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("cut", ["idle", "waiting-for-the-round"])
def test_a_first_visit_to_a_study_link_cut_by_the_server_runs_again_with_the_same_worker(
    client, tmp_path, settings, cut
):
    """The link entry's POST mints a worker on a first visit (no cookie): its second run names that worker,
    so one worker and one batch come of it, whether the connection was dead before the request or the
    statement was cut while the start waited for the round's lock (the worker's INSERT committed by then)."""
    _needs_postgresql()
    settings.MEDIA_ROOT = tmp_path / "media"
    study = make_study(make_dataset(tmp_path, n_images=4, size=(64, 48)), publish=True, batch_size=3)
    round_ = study.rounds.get()
    workers_before = Worker.objects.count()
    url = reverse("annotation_ui:study_link", kwargs={"token": study_link_token_make(study_id=study.pk)})
    fault = None
    if cut == "idle":
        _terminate_own_connection()
    else:
        fault = _LockThenTerminate(table=Round._meta.db_table, row_id=round_.pk, times=1)
        fault.start()
        assert fault.locked.wait(10)

    response = client.post(url + "?then=redirect", {"device": "pc"})
    if fault is not None:
        fault.finish()
        assert len(fault.terminated) == 1, "the start never waited for the round's lock"
    assert response.status_code == 303, response.content
    assert Worker.objects.count() == workers_before + 1
    [session] = Session.objects.filter(study=study)
    assert session.trials.count() == 3
    assert sum(Target.objects.filter(round=round_).values_list("inflight_pc", flat=True)) == 3
    # the browser keeps the cookie of the worker both runs named: its next visit resumes the same batch
    again = client.post(url + "?then=redirect", {"device": "pc"})
    assert again.status_code == 303 and again["Location"] == response["Location"]
    assert Session.objects.filter(study=study).count() == 1


@pytest.mark.one_backend
@pytest.mark.urls("tests.support.session_urls")
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("method", ["get", "post"])
def test_a_lost_connection_in_a_middlewares_own_code_runs_again_or_is_a_503_not_a_500(method, caplog):
    """The view writes a new session and reads nothing; SessionMiddleware's save on the way out is the request's
    first statement, on a connection the server ended. Django answers such an error with a 500 where it is
    raised (no process_exception sees it): a GET still runs again, a POST outside the safe set gets the 503."""
    from django.contrib.sessions.models import Session as StoredSession
    from django.test import Client

    _needs_postgresql()
    _terminate_own_connection()
    browser = Client(raise_request_exception=False)  # the first run's error is reported, then answered
    with caplog.at_level(logging.WARNING, logger="config.unavailable"):
        response = getattr(browser, method)("/touch-session/")
    messages = [record.getMessage() for record in caplog.records if record.name == "config.unavailable"]
    if method == "get":
        assert (response.status_code, response.content) == (200, b"touched"), response.content
        assert messages == ["database connection lost: the request runs again"]
        assert StoredSession.objects.count() == 1
    else:
        assert response.status_code == 503 and response["Retry-After"] == "5", response.content
        assert b"nothing was stored" in response.content
        assert messages == ["database unavailable: answered 503"]
        connection.close()  # what Django does after a failed request (the test client skips it)
        assert StoredSession.objects.count() == 0


@pytest.mark.one_backend
@pytest.mark.django_db(transaction=True)
def test_a_post_outside_the_safe_set_is_a_503_and_stores_nothing(client, batch):
    _needs_postgresql()
    session, token = batch
    problem = {"status": 409, "endpoint": "click", "message": "refused", "position": 0}
    _terminate_own_connection()
    _assert_503(_post(client, "api_problem", token, problem))
    connection.close()  # what Django does after a failed request (the test client skips it)
    session.refresh_from_db()
    assert session.problems in ([], None, {}), session.problems
    assert _post(client, "api_problem", token, problem).status_code == 204  # the player's own retry


@pytest.mark.one_backend
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("name", ["api_click", "api_presented"])
def test_a_statement_cut_while_it_runs_runs_again(client, batch, name):
    """The request waits for a row lock the test holds (a running statement) when its backend is ended."""
    _needs_postgresql()
    session, token = batch
    trial = Trial.objects.get(session=session, position=0)
    fault = _LockThenTerminate(table=Trial._meta.db_table, row_id=trial.pk, times=1)
    fault.start()
    assert fault.locked.wait(10)

    response = _post(client, name, token, CLICK if name == "api_click" else PRESENTED)
    fault.finish()
    assert len(fault.terminated) == 1, "the request never waited for the row lock"
    if name == "api_click":
        assert response.status_code == 201 and response.json()["created"] is True, response.content
        assert Click.objects.filter(trial__session=session).count() == 1
    else:
        assert response.status_code == 200 and response.json()["presentations"] == 1, response.content


@pytest.mark.one_backend
@pytest.mark.django_db(transaction=True)
def test_finish_cut_inside_its_transaction_runs_again(client, batch, no_validation):
    """``session_finish`` waits for the session's row lock inside ``atomic``: the rollback after the cut fails
    and Django drops the connection itself, which still counts as lost."""
    _needs_postgresql()
    session, token = batch
    for position in range(3):
        click = {**CLICK, "position": position, "idempotency_key": f"k{position}"}
        assert _post(client, "api_click", token, click).status_code == 201
    fault = _LockThenTerminate(table=Session._meta.db_table, row_id=session.pk, times=1)
    fault.start()
    assert fault.locked.wait(10)

    response = _post(client, "api_finish", token, {})
    fault.finish()
    assert len(fault.terminated) == 1, "finish never waited for the row lock"
    assert response.status_code == 200, response.content
    session.refresh_from_db()
    assert session.status == Session.Status.FINISHED


@pytest.mark.one_backend
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("name", ["api_click", "api_presented"])
def test_a_second_run_that_fails_too_is_a_503_and_stores_nothing(client, batch, name):
    _needs_postgresql()
    session, token = batch
    # both statements update the trial: they wait for its row lock
    trial = Trial.objects.get(session=session, position=0)
    body = CLICK if name == "api_click" else PRESENTED
    fault = _LockThenTerminate(table=Trial._meta.db_table, row_id=trial.pk, times=2)
    fault.start()
    assert fault.locked.wait(10)

    response = _post(client, name, token, body)
    fault.finish()
    assert len(fault.terminated) == 2, (
        f"terminated {fault.terminated}: the second run never waited; answered {response.status_code} "
        f"{response.content[:300]!r}"
    )
    _assert_503(response)
    connection.close()
    assert not Click.objects.filter(trial__session=session).exists()
    assert Trial.objects.get(session=session, position=0).presentations in ([], None)


@pytest.mark.django_db(transaction=True)
def test_an_error_on_a_connection_that_still_works_is_not_a_lost_connection():
    """A deadlock, a serialization failure or a timeout leaves the connection usable: no second run."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    assert connection_lost(OperationalError("deadlock detected")) is False
    assert connection_lost(ValueError("a bug")) is False
    for driver_error, lost in (
        (DeadlockDetected, False),
        (SerializationFailure, False),
        (AdminShutdown, True),
    ):
        error = OperationalError(driver_error.__name__)
        error.__cause__ = driver_error(driver_error.__name__)  # as Django's wrap_database_errors raises it
        assert connection_lost(error) is lost, driver_error


def test_the_safe_set(rf):
    assert retry_safe(rf.get("/a/tok/")) and retry_safe(rf.head("/api/annotator/tok/state"))
    for endpoint in ("click", "presented", "finish", "client"):
        assert retry_safe(rf.post(f"/api/annotator/tok/{endpoint}"))
    assert retry_safe(rf.post("/s/tok/?then=redirect"))
    for path in (
        "/api/annotator/tok/problem",
        "/api/annotator/tok/corrective/click",
        "/s/tok/extra",
        "/researcher/x",
    ):
        assert not retry_safe(rf.post(path)), path
    for path in ("/mturk/1/pc/", "/toloka/1/pc/", "/prolific/1/", "/api/annotator/tok/corrective/state"):
        assert not retry_safe(rf.get(path)), path


def test_a_body_larger_than_the_api_takes_is_not_read_ahead_and_not_run_again(rf):
    request = rf.post("/api/annotator/tok/click", data="x" * 20_000, content_type="application/json")
    seen = []
    DatabaseRetryMiddleware(
        lambda request: seen.append(getattr(request, "_database_retry", None)) or HttpResponse("inner")
    )(request)
    assert seen == [None] and not hasattr(request, "_body")
    assert unavailable.MAX_BODY_BYTES == parsers.MAX_BODY_BYTES


def test_other_errors_are_not_turned_into_503(rf):
    from config.unavailable import DatabaseUnavailableMiddleware

    middleware = DatabaseUnavailableMiddleware(lambda request: None)
    assert middleware.process_exception(rf.get("/api/annotator/x/click"), ValueError("a bug")) is None
