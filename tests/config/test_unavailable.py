"""A PostgreSQL restart mid-request: the annotator gets a 503 with Retry-After (which the player's outbox
retries), nothing half-stored, and the retried click is stored once. The fault is real: the request's own
server connection is terminated by PostgreSQL (``pg_terminate_backend``, what a restart does to it)."""

from __future__ import annotations

import json

import pytest
from django.db import connection, connections
from django.urls import reverse

from collector.models import Click
from collector.services.sessions import session_start
from collector.services.tokens import session_token_make
from tests.factories import make_dataset, make_study, make_worker

CLICK = {"position": 0, "idempotency_key": "k0", "x": 5.5, "y": 7.25, "shown_width": 640, "shown_height": 480,
         "pointer_type": "mouse", "reaction_ms": 400, "event_timestamp_ms": 9000.5,
         "phase_onsets_ms": {"A": 1, "B": 2, "C": 3, "D": 4}, "blocked_clicks": 0, "flags": [],
         "refresh_hz": 60}  # fmt: skip


def _terminate(pid: int) -> None:
    """End backend ``pid`` from another connection, as a PostgreSQL restart ends every connection."""
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
            assert cursor.fetchone()[0] is True
    finally:
        other.close()


@pytest.mark.one_backend
@pytest.mark.django_db(transaction=True)
def test_a_database_restart_mid_click_is_a_503_to_retry_and_the_retry_is_stored_once(
    client, tmp_path, settings
):
    if connection.vendor != "postgresql":
        pytest.fail(
            "this test needs PostgreSQL (it terminates the request's server connection): run it with "
            "DATABASE_URL=postgres://postgres@127.0.0.1:5432/<db>, as `make test-services` does."
        )
    settings.MEDIA_ROOT = tmp_path / "media"
    study = make_study(make_dataset(tmp_path, n_images=3, size=(64, 48)), publish=True, batch_size=3)
    session = session_start(study=study, worker=make_worker(), device="pc")
    url = reverse("annotation_ui:api_click", kwargs={"token": session_token_make(session_id=session.pk)})
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    _terminate(pid)  # the connection the request will use is gone, the client does not know yet

    response = client.post(url, data=json.dumps(CLICK), content_type="application/json")
    assert response.status_code == 503, response.content
    assert response["Retry-After"] == "5" and response["Cache-Control"] == "no-store"
    assert (
        response.json()["code"] == "database_unavailable" and "nothing was stored" in response.json()["error"]
    )

    connection.close()  # what Django does after a failed request (the test client skips it)
    assert not Click.objects.exists()
    retried = client.post(url, data=json.dumps(CLICK), content_type="application/json")
    assert retried.status_code == 201 and retried.json()["created"] is True
    again = client.post(url, data=json.dumps(CLICK), content_type="application/json")
    assert again.status_code == 200 and again.json()["created"] is False
    assert Click.objects.filter(trial__session=session).count() == 1


def test_other_errors_are_not_turned_into_503(rf):
    from config.unavailable import DatabaseUnavailableMiddleware

    middleware = DatabaseUnavailableMiddleware(lambda request: None)
    assert middleware.process_exception(rf.get("/api/annotator/x/click"), ValueError("a bug")) is None
