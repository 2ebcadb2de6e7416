"""``session_finish``'s common case in two prepared statements (PostgreSQL) finishes exactly as the locked ORM
path does, and every other case writes nothing there and gets the locked path's answer.

Each test runs on the suite's database: on PostgreSQL the two statements are used (and counted), on SQLite
the locked path answers everything, so the same expectations hold for both. ``locked_only`` turns the
statements off (``_finish_prepared`` answering None, as it does for every case but the common one) to
compare the two paths on twin sessions.
"""

from __future__ import annotations

import uuid

import pytest
from celery.signals import after_task_publish
from django.db import connection
from django.test.utils import CaptureQueriesContext

from annotation_ui.payloads import finish_payload
from collector.models import Session, TaskIntent
from collector.services import session_finish as finish_service
from collector.services.clicks import click_record
from collector.services.codes import completion_code_make
from collector.services.session_finish import SessionFinishRefused, session_finish
from collector.services.session_start import session_start
from tasks import names as task_names
from tests.factories import make_dataset, make_study, make_worker, present_trials
from tests.support.celery_worker import purge_queues
from tests.support.concurrency import at_once

# the finishes publish real validation tasks: no worker may run them while a test's rows are flushed
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("exclusive_broker_for_module")]
VALIDATE = task_names.VALIDATION_VALIDATE_SESSION
POSTGRES = connection.vendor == "postgresql"


@pytest.fixture
def published():
    sent: list[tuple[str, list]] = []

    def record(sender=None, body=None, **_):
        if sender == VALIDATE:  # publishing the study sends its stimuli task too
            sent.append((sender, list(body[0]) if body else []))

    after_task_publish.connect(record, weak=False)
    yield sent
    after_task_publish.disconnect(record)
    purge_queues()


@pytest.fixture
def locked_only(monkeypatch):
    monkeypatch.setattr(finish_service, "_finish_prepared", lambda *, session_id: None)


def _study(tmp_path, settings, **overrides):
    settings.MEDIA_ROOT = tmp_path / "media"
    dataset = make_dataset(tmp_path, n_images=6, size=(64, 48))
    return make_study(dataset, publish=True, batch_size=3, quota_pc=2, quota_mobile=1, **overrides)


def _session(study, *, clicked=(0, 1, 2), assignment="ASG-1", **start):
    session = session_start(
        study=study, worker=make_worker(), device="pc", platform_assignment_id=assignment, **start
    )
    for position in clicked:
        present_trials(session, positions=[position])
        click_record(
            session=session, position=position, idempotency_key=uuid.uuid4().hex, x=10.0, y=12.0,
            shown_width=64.0, shown_height=48.0, pointer_type="mouse",
        )  # fmt: skip
    return session


def _stored(session_id: int) -> dict:
    row = Session.objects.select_related("study").get(pk=session_id)
    return {
        "status": row.status,
        "finished_at": row.finished_at,
        "completion_code": row.completion_code,
        "intents": list(
            TaskIntent.objects.filter(task_name=VALIDATE, args=[session_id]).values_list("args", flat=True)
        ),
    }  # fmt: skip


def test_the_common_case_is_two_statements_and_answers_what_is_stored(tmp_path, settings, published):
    study = _study(tmp_path, settings)
    session = _session(study)
    with CaptureQueriesContext(connection) as captured:
        finished = session_finish(session_id=session.pk)
    statements = [query["sql"] for query in captured.captured_queries]
    if POSTGRES:
        # the read and the finish (update + intent); then the intent marked sent after the broker took it
        assert len(statements) == 3, statements
        assert not any(sql.upper().startswith(("BEGIN", "SAVEPOINT", "COMMIT")) for sql in statements)
        assert "FOR UPDATE" not in statements[0].upper() and "FOR NO KEY UPDATE" not in statements[0].upper()
    stored = _stored(session.pk)
    assert finished.status == stored["status"] == Session.Status.FINISHED
    assert finished.finished_at == stored["finished_at"] is not None
    assert finished.completion_code == stored["completion_code"]
    assert stored["completion_code"] == completion_code_make(session_id=session.pk, assignment_id="ASG-1")
    assert stored["intents"] == [[session.pk]]
    assert published == [(VALIDATE, [session.pk])]
    assert TaskIntent.objects.get(task_name=VALIDATE).sent_at is not None
    # fields the answer did not read load when asked, as with the ORM's only()
    assert finished.expires_at == Session.objects.get(pk=session.pk).expires_at
    assert finished.study.name == study.name and finished.round_id == session.round_id


@pytest.mark.parametrize(
    "platform, config, state",
    [
        ("link", {}, {}),
        ("prolific", {"prolific_completion_code": "C0DE42"}, {}),
        ("prolific", {}, {}),
        ("mturk", {}, {"turk_submit_to": "https://workersandbox.mturk.com"}),
        ("mturk", {}, {}),
    ],
)
def test_the_finish_step_is_the_locked_paths(
    tmp_path, settings, monkeypatch, published, platform, config, state
):
    study = _study(tmp_path, settings, platform=platform, platform_config=config)
    fast, locked = _session(study, assignment="A-fast"), _session(study, assignment="A-locked")
    Session.objects.filter(pk__in=[fast.pk, locked.pk]).update(platform_state=state)
    fast_answer = finish_payload(session_finish(session_id=fast.pk))
    with monkeypatch.context() as patch:
        patch.setattr(finish_service, "_finish_prepared", lambda *, session_id: None)
        locked_answer = finish_payload(session_finish(session_id=locked.pk))

    def same(answer: dict, session) -> dict:  # the code and assignment are the session's own
        code = completion_code_make(session_id=session.pk, assignment_id=session.platform_assignment_id)
        text = str(answer).replace(code, "<code>").replace(session.platform_assignment_id, "<assignment>")
        return {"text": text, "has_code": code in str(answer) or bool(config)}

    assert same(fast_answer, fast) == same(locked_answer, locked)
    assert same(fast_answer, fast)["has_code"]
    assert _stored(fast.pk)["intents"] == [[fast.pk]] and _stored(locked.pk)["intents"] == [[locked.pk]]


def test_a_retry_answers_the_same_code_and_sends_nothing_more(tmp_path, settings, published):
    session = _session(_study(tmp_path, settings))
    first = session_finish(session_id=session.pk)
    again = session_finish(session_id=session.pk)
    assert (again.completion_code, again.finished_at) == (first.completion_code, first.finished_at)
    assert _stored(session.pk)["intents"] == [[session.pk]] and published == [(VALIDATE, [session.pk])]


def test_a_missing_click_writes_nothing_and_names_the_trials(tmp_path, settings, published):
    session = _session(_study(tmp_path, settings), clicked=(0,))
    with pytest.raises(SessionFinishRefused) as refused:
        session_finish(session_id=session.pk)
    assert refused.value.missing_positions == [1, 2]
    assert _stored(session.pk) == {
        "status": "started",
        "finished_at": None,
        "completion_code": "",
        "intents": [],
    }
    assert published == []


def test_an_expired_clock_with_every_click_finishes_and_an_expired_status_does_not(
    tmp_path, settings, published
):
    study = _study(tmp_path, settings)
    late, closed = _session(study), _session(study)
    Session.objects.filter(pk__in=[late.pk, closed.pk]).update(
        expires_at=Session.objects.get(pk=late.pk).started_at
    )
    assert session_finish(session_id=late.pk).status == Session.Status.FINISHED  # as the locked path does
    Session.objects.filter(pk=closed.pk).update(status=Session.Status.EXPIRED)
    with pytest.raises(SessionFinishRefused, match="expired"):
        session_finish(session_id=closed.pk)
    assert _stored(closed.pk)["intents"] == [] and published == [(VALIDATE, [late.pk])]


def test_an_unknown_session_is_does_not_exist(tmp_path, settings):
    with pytest.raises(Session.DoesNotExist):
        session_finish(session_id=987654)


@pytest.mark.one_backend
def test_the_statement_finishes_only_what_the_read_saw(tmp_path, settings, published):
    """The code is made from the assignment read first: the finish statement checks the session is still
    started, with that assignment and every click, and otherwise writes nothing."""
    if not POSTGRES:
        pytest.fail(
            "this test needs PostgreSQL (SQLite never builds the statements): run it with "
            "DATABASE_URL=postgres://postgres@127.0.0.1:5432/<db>, as `make test` does."
        )
    study = _study(tmp_path, settings)
    session, partial = _session(study, assignment="READ"), _session(study, clicked=(0, 2), assignment="PART")
    _, finish_sql = finish_service._finish_sql()
    from django.utils import timezone

    from collector.services.outbox import task_intent_insert_params

    def finish(session_id: int, assignment: str, status: str = "started"):
        now = timezone.now()
        params = {
            "session": session_id, "finished": "finished", "started": status, "now": now, "code": "CODE",
            "assignment": assignment, **task_intent_insert_params(name=VALIDATE, args=[session_id], now=now),
        }  # fmt: skip
        with connection.cursor() as cursor:
            cursor.execute(finish_sql, params)
            return cursor.fetchone()[0]

    assert finish(session.pk, "ANOTHER") is None
    assert finish(session.pk, "READ", status="finished") is None
    assert finish(partial.pk, "PART") is None
    assert _stored(session.pk)["status"] == _stored(partial.pk)["status"] == "started"
    assert not TaskIntent.objects.filter(task_name=VALIDATE).exists()
    intent = finish(session.pk, "READ")
    assert intent is not None and _stored(session.pk)["completion_code"] == "CODE"
    assert list(TaskIntent.objects.filter(task_name=VALIDATE).values_list("pk", "args")) == [
        (intent, [session.pk])
    ]
    assert finish(session.pk, "READ") is None  # finished: once
    assert published == []  # the statement alone sends nothing


def test_concurrent_finishes_finish_once_with_one_code(tmp_path, settings, published):
    session = _session(_study(tmp_path, settings))
    results, errors = at_once(lambda: session_finish(session_id=session.pk).completion_code, 4)
    assert errors == []
    assert len(set(results)) == 1 and results[0] == _stored(session.pk)["completion_code"]
    assert _stored(session.pk)["intents"] == [[session.pk]]
    assert published == [(VALIDATE, [session.pk])]
