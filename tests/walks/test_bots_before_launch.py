"""Issue 32's walk before launch, in Chromium: a researcher runs simulated annotators on a draft from the study
page (a Celery worker plays them over HTTP against the server's own PUBLIC_BASE_URL), sees their verdicts,
releases a batch a leaving bot left stuck, removes the simulated data in one click and publishes; a real worker's
browser then gets a full batch and plays it, and it fills the quota the bots never touched.
Screenshots: var/screenshots/bots-*.png."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.models import Session, Study, Target, Worker
from collector.services.bots import BOT_PLATFORM
from tests.annotation_ui.driver import (
    ClickPlan,
    open_player,
    play_trial,
    press_start,
    wait_finished,
    wait_for,
    wait_start_enabled,
)
from tests.factories import make_rect_dataset, make_researcher, make_study
from tests.support.researcher_login import researcher_log_in

pytestmark = [pytest.mark.browser, pytest.mark.celery, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = Path(__file__).resolve().parents[2] / "var" / "screenshots"


def _shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"bots-{name}.png"), full_page=True)


@pytest.fixture
def bot_worker(live_server, settings, tmp_path, exclusive_broker):
    """A worker of the test's own that knows the live server's address as its PUBLIC_BASE_URL (the bots'
    target), with two processes so validations run while a bot run plays."""
    from tests.support.celery_worker import CeleryWorkerProcess, purge_queues

    settings.MEDIA_ROOT = tmp_path / "media"
    settings.ALLOWED_HOSTS = ["localhost", "127.0.0.1"]
    settings.PUBLIC_BASE_URL = live_server.url
    purge_queues()
    process = CeleryWorkerProcess(concurrency=2, environment={"PUBLIC_BASE_URL": live_server.url})
    process.start()
    yield process
    process.stop()
    purge_queues()


def _inflight() -> int:
    return sum(t.inflight_pc + t.inflight_mobile for t in Target.objects.all())


def test_bots_on_a_draft_then_release_remove_publish_and_a_real_worker_plays(
    chromium, live_server, bot_worker, tmp_path
):
    alice = make_researcher("alice")
    dataset = make_rect_dataset(tmp_path, n_images=6)
    study = make_study(
        dataset, name="Bots walk", owner=alice, batch_size=3, min_valid_per_session=2,
        quota_pc=1, quota_mobile=1, image_ms=150, target_ms=150, blocked_ms=150,
    )  # fmt: skip
    researcher = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = researcher.new_page()
    page.on("dialog", lambda dialog: dialog.accept())  # the controls' confirm()
    researcher_log_in(page, live_server.url, "alice")

    # 1. four bots, half of them leaving mid-batch, from the draft's page
    page.goto(f"{live_server.url}/researcher/studies/{study.pk}/")
    page.fill("#bots-run-form input[name=bots]", "4")
    page.fill("#bots-run-form input[name=leave_share]", "0.5")
    page.click("#bots-run")
    page.wait_for_selector(".messages >> text=4 simulated annotators asked for", timeout=10_000)
    wait_for(
        lambda: (
            Session.objects.filter(study=study, is_bot=True, validated_at__isnull=False).count() == 2
            and Session.objects.filter(study=study, is_bot=True, status="started").count() == 2
        ),
        timeout_s=120,
        what="two bots validated and two left mid-batch",
    )
    # the card refreshes by itself: wait until it shows both validations (CI once read it between them)
    page.wait_for_function(
        "() => /2 running/.test((document.getElementById('bots-requested') || {}).textContent || '')"
        " && /rejected/.test(document.getElementById('bots-verdicts').textContent)"
        " && ['counted', 'rejected'].reduce((sum, kind) => sum + (parseInt((document.querySelector("
        "'.bots-' + kind) || {}).textContent, 10) || 0), 0) === 2",
        timeout=30_000,
    )
    verdicts = page.inner_text("#bots-verdicts")
    counted, rejected = (int(page.inner_text(f".bots-{kind}").split()[0]) for kind in ("counted", "rejected"))
    assert counted + rejected == 2, verdicts
    assert page.locator("#monitor-table tr.simulated").count() == 2
    assert "counts when at least 2 of its 3 clicks are valid clicks" in page.inner_text("#batch-rule")
    _shot(page, "1-verdicts")

    # 2. a stuck session released from the monitor: its unclicked images go back
    stuck = Session.objects.filter(study=study, is_bot=True, status="started").order_by("pk").first()
    held = _inflight()
    row = page.locator(f"#monitor-session-{stuck.pk}")
    clicked = int(row.locator(".monitor-clicked").inner_text().split("/")[0])
    row.locator("button.release-button").click()
    page.wait_for_selector(f".messages >> text=Session {stuck.pk} released")
    assert _inflight() == held - (3 - clicked)
    _shot(page, "2-released")

    # 3. the simulated data removed in one click; the quotas as they were
    page.click("#bots-remove")
    page.wait_for_selector(".messages >> text=Simulated data removed: 4 sessions")
    assert (
        not Session.objects.filter(is_bot=True).exists()
        and not Worker.objects.filter(platform=BOT_PLATFORM).exists()
    )
    assert _inflight() == 0 and sum(t.valid_pc + t.valid_mobile for t in Target.objects.all()) == 0
    assert page.locator("#bots-summary").count() == 0
    _shot(page, "3-removed")

    # 4. published; a real worker's browser gets a full batch and plays it
    page.click("#study-actions button:has-text('Publish')")
    page.wait_for_selector("#study-state:has-text('published')")
    link = page.get_attribute("#link-pc input.link-url", "value")
    worker = chromium.new_context(viewport={"width": 1400, "height": 900})
    player = worker.new_page()
    open_player(player, link)
    wait_start_enabled(player)
    session = Session.objects.get(study=study)
    assert not session.is_bot and session.trials.count() == 3
    press_start(player)
    for trial in session.trials.order_by("position"):
        play_trial(player, trial.position, ClickPlan(fx=0.5, fy=0.5), touch=False, blocked_in=())
    wait_finished(player)
    wait_for(
        lambda: Session.objects.get(pk=session.pk).validated_at is not None, timeout_s=60, what="validation"
    )
    session.refresh_from_db()
    assert session.validity == "counted", session.rejection_reason
    assert sum(t.valid_pc for t in Target.objects.filter(round__study=study)) == 3
    page.goto(f"{live_server.url}/researcher/studies/{study.pk}/")
    _shot(page, "4-published")
    worker.close()
    researcher.close()
    assert Study.objects.get(pk=study.pk).state == "published"
