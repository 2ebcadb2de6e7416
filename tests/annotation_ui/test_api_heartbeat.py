"""Reservations over HTTP (issue 32 item 2): the heartbeat endpoint, a released trial's click refused, the
player page and the state request re-reserving a returning worker's batch, and "no task available" saying
whether it is final or temporary, in the worker's language."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from collector.models import Session, Target, Trial
from collector.services.reservations import sessions_release_stale
from collector.services.session_start import session_start
from collector.services.tokens import session_token_make, study_link_token_make
from tests.factories import make_dataset, make_study, make_worker, present_trials

pytestmark = pytest.mark.django_db
RUSSIAN = {"HTTP_ACCEPT_LANGUAGE": "ru-RU,ru;q=0.9,en;q=0.8"}


@pytest.fixture(autouse=True)
def _english_after():
    """The Russian requests below leave Russian active in this thread; later tests expect the default."""
    yield
    from django.utils import translation

    translation.activate("en")


@pytest.fixture
def study(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    dataset = make_dataset(tmp_path, n_images=4, size=(64, 48))
    return make_study(
        dataset, publish=True, batch_size=4, min_valid_per_session=3, quota_pc=1, quota_mobile=1
    )


def _post(token: str, endpoint: str, body) -> tuple[int, dict]:
    raw = body if isinstance(body, str) else json.dumps(body)
    response = Client().post(f"/api/annotator/{token}/{endpoint}", data=raw, content_type="application/json")
    return response.status_code, (response.json() if response.content else {})


def _release(session):
    assert sessions_release_stale(
        now=session.started_at + timedelta(seconds=session.study.reservation_grace_s + 31)
    )


def test_a_heartbeat_keeps_the_batch_and_answers_in_the_api_error_shape(study):
    session = session_start(study=study, worker=make_worker(), device="pc")
    token = session_token_make(session_id=session.pk)
    status, body = _post(token, "heartbeat", {"visibility": "hidden"})
    assert (status, body) == (200, {"ok": True, "status": "started", "reclaimed": False, "kept": [],
                                    "replaced": [], "dropped": []})  # fmt: skip
    assert Session.objects.get(pk=session.pk).last_seen_at is not None
    status, body = _post(token, "heartbeat", {"visibility": "vanished"})
    assert status == 400 and body["field"] == "visibility" and "'vanished'" in body["message"]
    status, body = _post("forged", "heartbeat", {})
    assert status == 404 and body["field"] == "token"


def test_the_pagehide_beacon_releases_a_closed_tabs_batch_soon_and_a_reload_keeps_it(study, client, settings):
    """``visibility: gone`` (the player's pagehide beacon) is no sign of life: LEAVE_GRACE_S later the batch
    is released, long before the grace period, unless the page was heard from again (a reload is: the
    player page served counts)."""
    settings.LEAVE_GRACE_S = 10
    session = session_start(study=study, worker=make_worker(), device="pc")
    present_trials(session)
    token = session_token_make(session_id=session.pk)
    assert study.reservation_grace_s >= 60
    status, body = _post(token, "heartbeat", {"visibility": "gone"})
    assert status == 200 and body["status"] == "started" and not body["reclaimed"]
    left = Session.objects.get(pk=session.pk)
    assert left.left_at is not None and left.last_seen_at is None, "the beacon is not a sign of life"

    # a reload: the beacon of the page going away, then the page served again
    page = client.get(reverse("annotation_ui:player", kwargs={"token": token}))
    assert page.status_code == 200
    soon = left.left_at + timedelta(seconds=11)
    assert sessions_release_stale(now=soon) == 0, "a reload keeps its batch"
    assert Trial.objects.filter(session=session, holds_slot=True).count() == 4

    # the tab closed: the beacon, and nothing after it
    assert _post(token, "heartbeat", {"visibility": "gone"})[0] == 200
    closed_at = Session.objects.get(pk=session.pk).left_at
    assert sessions_release_stale(now=closed_at + timedelta(seconds=5)) == 0, "not before LEAVE_GRACE_S"
    assert sessions_release_stale(now=closed_at + timedelta(seconds=11)) == 1
    assert Trial.objects.filter(session=session, holds_slot=True).count() == 0
    assert all(inflight == 0 for inflight in Target.objects.values_list("inflight_pc", flat=True))
    # the worker comes back after all: the batch is re-reserved, as after a grace-period release
    status, body = _post(token, "heartbeat", {"visibility": "visible"})
    assert status == 200 and body["reclaimed"] and body["kept"] == [0, 1, 2, 3]


def _page_number(page) -> int:
    found = re.search(rb'"page": (\d+)', page.content)
    assert found, "the player payload names its page"
    return int(found.group(1))


def test_a_reloads_beacon_handled_after_the_new_page_was_served_releases_nothing(study, settings):
    """The race CI met: a reload's pagehide beacon may be handled after the new page was served. The beacon
    names its page, so a beacon of an earlier page is ignored; the open page's own beacon still counts."""
    settings.LEAVE_GRACE_S = 10
    session = session_start(study=study, worker=make_worker(), device="pc")
    present_trials(session)
    token = session_token_make(session_id=session.pk)
    player = reverse("annotation_ui:player", kwargs={"token": token})
    first = _page_number(Client().get(player))
    second = _page_number(Client().get(player))  # the reload, served before the first page's beacon arrives
    assert second == first + 1

    status, body = _post(token, "heartbeat", {"visibility": "gone", "page": first})
    assert status == 200 and body["status"] == "started"
    assert Session.objects.get(pk=session.pk).left_at is None, "an earlier page's beacon is ignored"
    later = timezone.now() + timedelta(seconds=settings.LEAVE_GRACE_S + 1)
    assert sessions_release_stale(now=later) == 0
    assert Trial.objects.filter(session=session, holds_slot=True).count() == 4

    # the open page closes: its own beacon counts, and the closing tab's hidden heartbeat (visibilitychange),
    # handled after it, is no sign of life
    assert _post(token, "heartbeat", {"visibility": "gone", "page": second})[0] == 200
    closed_at = Session.objects.get(pk=session.pk).left_at
    assert closed_at is not None
    seen = Session.objects.get(pk=session.pk).last_seen_at
    assert _post(token, "heartbeat", {"visibility": "hidden"})[0] == 200
    assert Session.objects.get(pk=session.pk).last_seen_at == seen
    assert sessions_release_stale(now=closed_at + timedelta(seconds=11)) == 1
    assert Trial.objects.filter(session=session, holds_slot=True).count() == 0

    # and a page served after a beacon clears it (the other order of the same race)
    _post(token, "heartbeat", {"visibility": "visible"})  # back: re-reserved
    assert _post(token, "heartbeat", {"visibility": "gone", "page": second})[0] == 200
    assert Session.objects.get(pk=session.pk).left_at is not None
    Client().get(player)
    assert Session.objects.get(pk=session.pk).left_at is None

    status, body = _post(token, "heartbeat", {"visibility": "gone", "page": "2"})
    assert status == 400 and body["field"] == "page" and "integer" in body["message"]


def test_a_released_trial_refuses_its_click_and_the_heartbeat_brings_the_batch_back(study):
    session = session_start(study=study, worker=make_worker(), device="pc")
    present_trials(session)
    token = session_token_make(session_id=session.pk)
    _release(session)
    click = {"position": 0, "idempotency_key": "k-0", "x": 5.5, "y": 7.25, "shown_width": 64, "shown_height": 48,
             "pointer_type": "mouse", "reaction_ms": 400, "event_timestamp_ms": 9000.5,
             "phase_onsets_ms": {"A": 1, "B": 2, "C": 3, "D": 4}, "flags": []}  # fmt: skip
    status, body = _post(token, "click", click)
    assert status == 409 and body["code"] == "trial_released" and "Reload the page" in body["message"]
    status, body = _post(token, "presented", {"position": 1, "presentation_id": "p-1"})
    assert status == 409 and body["code"] == "trial_released"
    assert all(inflight == 0 for inflight in Target.objects.values_list("inflight_pc", flat=True))

    status, body = _post(token, "heartbeat", {"visibility": "visible"})
    assert status == 200 and body["reclaimed"] and body["kept"] == [0, 1, 2, 3]
    assert all(inflight == 1 for inflight in Target.objects.values_list("inflight_pc", flat=True))
    status, body = _post(token, "presented", {"position": 0, "presentation_id": "p-0"})
    assert status == 200 and body["presentations"] == 1 and not body["replayed"]


def test_the_player_page_and_the_state_request_re_reserve_a_returning_workers_batch(study, client):
    worker = make_worker()
    session = session_start(study=study, worker=worker, device="pc")
    token = session_token_make(session_id=session.pk)
    _release(session)
    page = client.get(reverse("annotation_ui:player", kwargs={"token": token}))
    assert page.status_code == 200
    assert Trial.objects.filter(session=session, holds_slot=True).count() == 4
    assert b"/heartbeat" in page.content and b'"heartbeat_s": 20' in page.content

    _release(session)
    state = client.get(f"/api/annotator/{token}/state")
    assert state.status_code == 200 and [t["done"] for t in state.json()["trials"]] == [False] * 4
    assert Trial.objects.filter(session=session, holds_slot=True).count() == 4


def test_no_task_available_says_temporary_or_final_in_the_workers_language(study):
    url = reverse(
        "annotation_ui:study_link", kwargs={"token": study_link_token_make(study_id=study.pk, device="pc")}
    )
    first = Client()
    assert first.post(url, {"device": "pc"}).status_code == 200  # takes the four images (quota 1)

    waiting = Client().post(url, {"device": "pc"})
    text = waiting.content.decode()
    assert waiting.status_code == 409 and "being worked on by other participants" in text
    minutes = -(-(study.reservation_grace_s + 30) // 60)
    assert re.search(rf"try again in about {minutes} minute", text), text
    # the waiting page asks again by itself: a form posting the entry back, its countdown, Retry-After
    assert waiting["Retry-After"] == "30" and 'data-retry-after="30"' in text
    assert 'id="wait-form" method="post"' in text and 'name="device" value="pc"' in text
    assert "player/waiting" in text and "asks again by itself every 30 seconds" in text
    russian = Client().post(url, {"device": "pc"}, **RUSSIAN).content.decode()
    assert "размечают другие участники" in russian and f"через {minutes}" in russian
    assert "сама спросит снова" in russian

    Target.objects.filter(round__study=study).update(valid_pc=1, inflight_pc=0)
    done = Client().post(url, {"device": "pc"})
    assert done.status_code == 409 and "all the answers it needs for your device" in done.content.decode()
    assert "Retry-After" not in done and b"wait-form" not in done.content, (
        "a final refusal does not ask again"
    )
    russian = Client().post(url, {"device": "pc"}, **RUSSIAN).content.decode()
    assert "собрало все нужные ответы" in russian


def test_a_waiting_workers_entry_gets_the_images_of_a_batch_silent_for_the_grace_period(study):
    """Release on demand over HTTP: the entry link of a worker who would be told to wait answers the player
    page itself when the batch holding the images has not been heard from for the grace period."""
    url = reverse(
        "annotation_ui:study_link", kwargs={"token": study_link_token_make(study_id=study.pk, device="pc")}
    )
    assert Client().post(url, {"device": "pc"}).status_code == 200  # takes the four images (quota 1)
    leaver = Session.objects.get(study=study)
    assert Client().post(url, {"device": "pc"}).status_code == 409, "heard from: the images are its worker's"

    silent = timezone.now() - timedelta(seconds=study.reservation_grace_s + 1)
    Session.objects.filter(pk=leaver.pk).update(started_at=silent, last_seen_at=silent)
    newcomer = Client().post(url, {"device": "pc"})
    assert newcomer.status_code == 200 and b"/heartbeat" in newcomer.content, "the player page, at once"
    leaver.refresh_from_db()
    assert (leaver.status, leaver.ended_by) == (Session.Status.EXPIRED, "grace")
    started = Session.objects.exclude(pk=leaver.pk).get(study=study, status="started")
    assert Trial.objects.filter(session=started, role="task", holds_slot=True).count() == 4
    assert list(Target.objects.filter(round__study=study).values_list("inflight_pc", flat=True)) == [1] * 4


def test_a_worker_who_saw_every_wanted_image_is_told_it_is_final(study):
    worker = make_worker()
    session = session_start(study=study, worker=worker, device="pc")
    Session.objects.filter(pk=session.pk).update(status="finished")
    Target.objects.update(inflight_pc=0)
    from django.utils import translation

    from collector.services.session_start import SessionStartRefused

    with translation.override("en"), pytest.raises(SessionStartRefused, match="no images left for you"):
        session_start(study=study, worker=worker, device="pc")
