"""A worker who leaves mid-batch and comes back, in real headless Chromium (issue 32 item 2): the tab is closed in
the middle of a trial, the grace period passes (the release task runs), another worker gets those images and
finishes, and the first worker opens the same entry link again and continues to a finished batch, the
interrupted trial replayed from phase A and counted. The player sends heartbeats while it is open."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.utils import timezone

from collector.models import Click, Session, Target, Trial
from collector.services.reservations import sessions_release_stale
from collector.services.tokens import session_token_read
from collector.services.validation import session_validate
from tests.annotation_ui.driver import (
    DESKTOP,
    ClickPlan,
    entry_url,
    open_player,
    play_trial,
    press_start,
    wait_finished,
    wait_for,
    wait_phase,
    wait_start_enabled,
)
from tests.factories import make_dataset, make_study

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CENTRE = ClickPlan(0.5, 0.5)  # the ellipses are centred: a click there is inside the object


def _beacons(caplog, session: Session) -> list[str]:
    """The pagehide beacons the server handled for ``session``, in order: "player left" (counted) or "stale
    page beacon ignored" (a page served before the latest one)."""
    return [
        record.getMessage()
        for record in caplog.records
        if record.getMessage() in ("player left", "stale page beacon ignored")
        and getattr(record, "session_id", None) == session.pk
    ]


def _session(url: str) -> Session:
    return Session.objects.get(pk=session_token_read(token=url.rstrip("/").rsplit("/", 1)[-1]))


def test_a_worker_who_closes_the_tab_comes_back_to_a_finished_batch(chromium, player_server, tmp_path):
    dataset = make_dataset(tmp_path, n_images=3, size=(320, 240))
    study = make_study(dataset, publish=True, batch_size=3, min_valid_per_session=1, quota_pc=2, quota_mobile=0,
                       image_ms=300, target_ms=400, blocked_ms=300)  # fmt: skip
    link = entry_url(player_server.url, study, "pc")

    leaver = chromium.new_context(**DESKTOP)  # its cookie names the same worker when the link is opened again
    page = leaver.new_page()
    heartbeats = []
    page.on(
        "request", lambda request: heartbeats.append(request) if request.url.endswith("/heartbeat") else None
    )
    url = open_player(page, link)
    wait_start_enabled(page)
    press_start(page)
    play_trial(page, 0, CENTRE, touch=False, blocked_in=())
    wait_phase(page, 1, "B")
    # a page-visibility event goes out as a heartbeat through the outbox
    page.evaluate("() => document.dispatchEvent(new Event('visibilitychange'))")
    wait_for(lambda: len(heartbeats) >= 1, what="a heartbeat request")
    session = _session(url)
    wait_for(
        lambda: Session.objects.get(pk=session.pk).last_seen_at is not None, what="last_seen_at recorded"
    )
    wait_for(lambda: Click.objects.filter(trial__session=session).count() == 1, what="trial 0's click stored")
    interrupted = Trial.objects.get(session=session, position=1)
    assert interrupted.presentations, "trial 1 was on screen when the tab closed"
    page.close()
    # Closing the tab sends the pagehide beacon (not a sign of life; the release waits for it to be stored, as a
    # release run meeting the beacon's row lock skips the session until its next run).
    wait_for(lambda: Session.objects.get(pk=session.pk).left_at is not None, what="the pagehide beacon")

    # The grace period passes without a sign of life: the release task gives trials 1 and 2 back.
    later = timezone.now() + timedelta(seconds=study.reservation_grace_s + 5)
    assert sessions_release_stale(now=later) == 1
    assert sorted(
        Trial.objects.filter(session=session, holds_slot=False).values_list("position", flat=True)
    ) == [1, 2]

    # Another worker gets those images and finishes.
    other = chromium.new_context(**DESKTOP)
    other_page = other.new_page()
    other_url = open_player(other_page, link)
    wait_start_enabled(other_page)
    press_start(other_page)
    for position in range(3):
        play_trial(other_page, position, CENTRE, touch=False, blocked_in=())
    wait_finished(other_page)
    other.close()
    newcomer = _session(other_url)
    leaver_targets = set(Trial.objects.filter(session=session).values_list("target_id", flat=True))
    assert set(newcomer.trials.values_list("target_id", flat=True)) == leaver_targets
    assert session_validate(session_id=newcomer.pk).validity == "counted"

    # The first worker opens the same link again: the batch is re-reserved and continues at trial 1.
    back = leaver.new_page()
    assert _session(open_player(back, link)).pk == session.pk, "the same batch, resumed"
    assert Trial.objects.filter(session=session, holds_slot=True).count() == 3
    wait_start_enabled(back)
    press_start(back)
    wait_phase(back, 1, "A")
    for position in (1, 2):
        play_trial(back, position, CENTRE, touch=False, blocked_in=())
    wait_finished(back)
    leaver.close()

    validated = session_validate(session_id=session.pk)
    assert (validated.status, validated.validity, validated.valid_clicks) == ("finished", "counted", 3)
    flags = dict(Trial.objects.filter(session=session).values_list("position", "flags"))
    assert flags == {0: [], 1: [], 2: []}, "the interrupted trial replayed from phase A, not flagged replayed"
    assert (
        sorted(Target.objects.filter(round__study=study).values_list("valid_pc", "inflight_pc"))
        == [(2, 0)] * 3
    )


def test_a_closed_tab_gives_its_images_back_within_seconds_to_a_worker_whose_waiting_page_asks_again(
    chromium, player_server, player_settings, tmp_path, caplog
):
    """The pagehide beacon (issue 32 item 2): a reload keeps the batch; a closed tab's unclicked images go back
    LEAVE_GRACE_S after it closed, long before the grace period, and a worker who was told the remaining images
    are being worked on gets them by the waiting page's own retry, without touching it."""
    caplog.set_level(logging.INFO, logger="collector.services.reservations")
    player_settings.WAIT_RECHECK_S = 1
    dataset = make_dataset(tmp_path, n_images=3, size=(320, 240))
    study = make_study(dataset, publish=True, batch_size=3, min_valid_per_session=1, quota_pc=1, quota_mobile=0,
                       image_ms=300, target_ms=400, blocked_ms=300)  # fmt: skip
    assert study.reservation_grace_s >= 60
    link = entry_url(player_server.url, study, "pc")

    leaver = chromium.new_context(**DESKTOP)
    page = leaver.new_page()
    url = open_player(page, link)
    wait_start_enabled(page)
    press_start(page)
    play_trial(page, 0, CENTRE, touch=False, blocked_in=())
    wait_phase(page, 1, "B")
    session = _session(url)
    wait_for(lambda: Click.objects.filter(trial__session=session).count() == 1, what="trial 0's click stored")

    # Another worker comes: every image is in the first one's batch, so the page says so and waits.
    waiter = chromium.new_context(**DESKTOP).new_page()
    waiter.goto(link)
    waiter.wait_for_selector("#wait-form", timeout=30_000)
    assert "being worked on by other participants" in waiter.inner_text("main")
    assert waiter.get_attribute("#wait-form", "data-retry-after") == "1"

    # A reload sends the beacon too, but the page served again is a sign of life: nothing is released,
    # whichever the server handles first, the old page's beacon or the new page (CI has seen both orders).
    page.reload()
    page.wait_for_load_state("networkidle")  # the new page's own first requests are in, before it is closed
    wait_for(lambda: len(_beacons(caplog, session)) == 1, what="the reload's pagehide beacon handled")
    wait_for(lambda: Session.objects.get(pk=session.pk).page_loads == 2, what="the reloaded page served")
    reloaded = Session.objects.get(pk=session.pk)
    assert reloaded.left_at is None, "the open page is not taken for gone"
    soon = timezone.now() + timedelta(seconds=player_settings.LEAVE_GRACE_S + 1)
    assert sessions_release_stale(now=soon) == 0
    assert Trial.objects.filter(session=session, holds_slot=True).count() == 3

    # The tab is closed: its beacon, and nothing after it.
    page.close()
    # (the record is logged just after the row is written: wait for it, not for the row)
    wait_for(lambda: _beacons(caplog, session)[-1:] == ["player left"], what="the closed tab's beacon")
    assert Session.objects.get(pk=session.pk).left_at is not None
    closed = Session.objects.get(pk=session.pk)
    later = closed.left_at + timedelta(seconds=player_settings.LEAVE_GRACE_S + 1)
    assert later < closed.started_at + timedelta(seconds=study.reservation_grace_s), "before the grace period"
    assert sessions_release_stale(now=later) == 1
    given_back = Trial.objects.filter(session=session, holds_slot=False).values_list("position", flat=True)
    assert sorted(given_back) == [1, 2]

    # The waiting page asks again by itself and gets those images.
    waiter.wait_for_url("**/a/**", timeout=30_000)
    newcomer = _session(waiter.url)
    released = set(
        Trial.objects.filter(session=session, position__in=(1, 2)).values_list("target_id", flat=True)
    )
    assert released <= set(newcomer.trials.values_list("target_id", flat=True))
    wait_start_enabled(waiter)
    leaver.close()
