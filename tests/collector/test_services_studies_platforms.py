"""The study page's platform buttons (launch, pause, close, sync now) and a session's approve/reject, on
the local fake Toloka API (tests/fakes/toloka_api.py) through the real toloka-kit client, and on Prolific
(which has no launch through our integration)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import Client

from collector.models import PlatformCampaign, PlatformSubmission, Session, SessionReview, Study
from collector.services.launch import study_sync
from collector.services.tokens import session_token_read
from tests.conftest import FAKE_TOLOKA_TOKEN
from tests.factories import complete_session, make_dataset, make_researcher, make_study
from tests.support.celery_worker import CeleryWorkerProcess, purge_queues, wait_until

pytestmark = pytest.mark.django_db

BASE = "https://clicklab.example.org"


@pytest.fixture
def owner():
    return make_researcher("owner")


@pytest.fixture
def toloka_study(tmp_path, settings, fake_toloka, owner):
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.PUBLIC_BASE_URL = BASE
    dataset = make_dataset(tmp_path, n_images=10, size=(64, 48))
    return make_study(
        dataset, owner=owner, platform="toloka", batch_size=10, quota_pc=3, quota_mobile=1,
        reward_per_batch=Decimal("0.05"),
    )  # fmt: skip


@pytest.fixture
def browser(owner):
    client = Client()
    client.force_login(owner)
    return client


def _messages(response) -> str:
    """The messages the page the researcher lands on shows (which consumes them)."""
    assert response.status_code == 200 and response.redirect_chain, response.status_code
    return " | ".join(str(m) for m in response.context["messages"])


def _press(client: Client, study, action: str) -> str:
    return _messages(client.post(f"/researcher/studies/{study.pk}/{action}/", follow=True))


def _review(client: Client, study, session, **data) -> str:
    return _messages(
        client.post(f"/researcher/studies/{study.pk}/sessions/{session.pk}/review/", data, follow=True)
    )


def _worker_batch(fake, study, user_id: str, *, valid_clicks=None) -> tuple[dict, Session]:
    pool = PlatformCampaign.objects.get(study=study).pools.get(device="pc")
    assignment = fake.take(pool_id=pool.external_id, user_id=user_id)
    response = Client().get(pool.entry_url.replace(BASE, "") + "&toloka_assignment=" + assignment["id"])
    assert response.status_code == 303, response.content.decode()[:300]
    session = Session.objects.get(
        pk=session_token_read(token=response["Location"].split("/a/")[1].strip("/"))
    )
    session = complete_session(session, valid_clicks=valid_clicks)
    fake.submit(assignment_id=assignment["id"], completion_code=session.completion_code)
    return assignment, session


def test_launch_button_launches_on_toloka_and_the_page_shows_the_pools(browser, toloka_study, fake_toloka):
    message = _press(browser, toloka_study, "publish")
    pools = PlatformCampaign.objects.get(study=toloka_study).pools.order_by("device")
    assert message.startswith("Launched on toloka: ")
    for pool in pools:
        assert f"{pool.device} {pool.external_id} (OPEN)" in message
    assert "moderates a new project" in message
    assert {p["status"] for p in fake_toloka.state()["pools"].values()} == {"OPEN"}
    assert Study.objects.get(pk=toloka_study.pk).state == Study.State.PUBLISHED
    page = browser.get(f"/researcher/studies/{toloka_study.pk}/").content.decode()
    assert 'id="platform-pools"' in page and pools[0].entry_url.replace("&", "&amp;") in page
    assert "Pause recruiting" in page and "Sync with Toloka now" in page and "Launch on Toloka" not in page


def test_launch_without_a_token_says_what_is_missing_and_launches_nothing(
    browser, toloka_study, fake_toloka, settings
):
    settings.TOLOKA_TOKEN = ""
    message = _press(browser, toloka_study, "publish")
    assert (
        "TOLOKA_TOKEN is not set" in message and "Nothing was launched; the study is still draft" in message
    )
    assert "Launched" not in message and "Published" not in message
    assert Study.objects.get(pk=toloka_study.pk).state == Study.State.DRAFT
    assert fake_toloka.state()["projects"] == {}
    page = browser.get(f"/researcher/studies/{toloka_study.pk}/").content.decode()
    assert 'id="platform-not-launched"' in page and "Launch on Toloka" in page


def test_a_launch_stopped_half_way_is_finished_by_the_next_press(browser, toloka_study, fake_toloka):
    fake_toloka.fault(method="POST", path=r"^/api/v1/pools$", times=2, status=500)  # both tries of one press
    message = _press(browser, toloka_study, "publish")
    assert "published here but not live on toloka yet" in message and "Launched" not in message
    page = browser.get(f"/researcher/studies/{toloka_study.pk}/").content.decode()
    assert "Finish the launch on Toloka" in page
    message = _press(browser, toloka_study, "publish")
    assert message.startswith("Launched on toloka")
    state = fake_toloka.state()
    assert (len(state["projects"]), len(state["pools"])) == (1, 2)


def test_pause_resume_and_close_act_on_the_pools(browser, toloka_study, fake_toloka):
    _press(browser, toloka_study, "publish")
    assert "pools are closed until you resume" in _press(browser, toloka_study, "pause")
    assert {p["status"] for p in fake_toloka.state()["pools"].values()} == {"CLOSED"}
    assert Study.objects.get(pk=toloka_study.pk).state == Study.State.PAUSED
    assert _press(browser, toloka_study, "publish").startswith("Launched on toloka")
    assert {p["status"] for p in fake_toloka.state()["pools"].values()} == {"OPEN"}
    assert "Closed" in _press(browser, toloka_study, "close")
    assert {p["status"] for p in fake_toloka.state()["pools"].values()} == {"CLOSED"}
    assert Study.objects.get(pk=toloka_study.pk).state == Study.State.CLOSED


def test_prolific_publish_says_what_is_left_to_do_there(browser, tmp_path, settings, owner):
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.PUBLIC_BASE_URL = BASE
    study = make_study(make_dataset(tmp_path, n_images=3), owner=owner, platform="prolific", batch_size=3,
                       min_valid_per_session=2)  # fmt: skip
    message = _press(browser, study, "publish")
    assert "Prolific's own interface (not automated by Clicklab)" in message
    assert "prolific_completion_code" in message  # not configured: said what is missing
    assert "Launched" not in message
    page = browser.get(f"/researcher/studies/{study.pk}/").content.decode()
    assert f"{BASE}/prolific/{study.pk}/pc/?PROLIFIC_PID=" in page


def test_manual_review_is_recorded_and_sent_through_toloka(browser, owner, toloka_study, fake_toloka):
    _press(browser, toloka_study, "publish")
    assignment, session = _worker_batch(fake_toloka, toloka_study, "user-careful", valid_clicks=5)
    assert session.validity == Session.Validity.REJECTED
    study_sync(study_id=toloka_study.pk)
    assert fake_toloka.state()["assignments"][assignment["id"]]["status"] == "REJECTED"

    reason = "careful clicks; the radius was too strict"
    message = _review(browser, toloka_study, session, decision="approve", reason=reason)
    assert (
        f"Session {session.pk} approved by owner. Sent: assignment {assignment['id']} accepted on toloka."
        == message
    )
    assert fake_toloka.state()["assignments"][assignment["id"]]["status"] == "ACCEPTED"
    review = SessionReview.objects.get(session=session)
    assert (review.decision, review.reviewed_by, review.reason) == (
        "approve",
        owner,
        "careful clicks; the radius was too strict",
    )
    assert review.reviewed_at is not None and review.platform_outcome.startswith("Sent:")

    message = _review(browser, toloka_study, session, decision="reject", reason="changed my mind")
    assert "already accepted on toloka; accepted work cannot be rejected" in message
    assert SessionReview.objects.filter(session=session).count() == 1
    page = browser.get(f"/researcher/studies/{toloka_study.pk}/sessions/{session.pk}/").content.decode()
    assert "approve</b> by owner" in page and "radius was too strict" in page


def test_a_review_before_the_submission_is_applied_by_the_sync(browser, toloka_study, fake_toloka):
    _press(browser, toloka_study, "publish")
    pool = PlatformCampaign.objects.get(study=toloka_study).pools.get(device="pc")
    assignment = fake_toloka.take(pool_id=pool.external_id, user_id="user-bot")
    response = Client().get(pool.entry_url.replace(BASE, "") + "&toloka_assignment=" + assignment["id"])
    session = complete_session(
        Session.objects.get(pk=session_token_read(token=response["Location"].split("/a/")[1].strip("/")))
    )
    assert session.validity == Session.Validity.COUNTED
    message = _review(
        browser, toloka_study, session, decision="reject", reason="every click on the same pixel"
    )
    assert "decision is sent when the worker's submission arrives" in message
    fake_toloka.submit(assignment_id=assignment["id"], completion_code=session.completion_code)
    assert study_sync(study_id=toloka_study.pk)["rejected"] == 1
    stored = fake_toloka.state()["assignments"][assignment["id"]]
    assert (stored["status"], stored["public_comment"]) == ("REJECTED", "every click on the same pixel")


def test_reject_needs_a_reason_and_a_running_batch_cannot_be_reviewed(browser, toloka_study, fake_toloka):
    _press(browser, toloka_study, "publish")
    _, session = _worker_batch(fake_toloka, toloka_study, "user-a")
    assert "reason: say why" in _review(browser, toloka_study, session, decision="reject")
    Session.objects.filter(pk=session.pk).update(status=Session.Status.STARTED)
    assert "only a finished batch" in _review(browser, toloka_study, session, decision="approve")
    assert not SessionReview.objects.exists()
    other = make_researcher("other")
    other_client = Client()
    other_client.force_login(other)
    url = f"/researcher/studies/{toloka_study.pk}/sessions/{session.pk}/"
    assert other_client.get(url).status_code == 404
    assert other_client.post(url + "review/", {"decision": "approve"}).status_code == 404


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_sync_now_is_done_by_a_worker(browser, toloka_study, fake_toloka, monkeypatch, exclusive_broker):
    """The button sends tasks.platforms.sync_study; a real worker (pointed at the fake Toloka) reviews."""
    _press(browser, toloka_study, "publish")
    assignment, _ = _worker_batch(fake_toloka, toloka_study, "user-good")
    for name, value in (("TOLOKA_API_URL", fake_toloka.url), ("TOLOKA_TOKEN", FAKE_TOLOKA_TOKEN),
                        ("TOLOKA_RETRIES", "1"), ("TOLOKA_TIMEOUT_S", "5")):  # fmt: skip
        monkeypatch.setenv(name, value)
    purge_queues()
    worker = CeleryWorkerProcess(queues="default")
    worker.start()
    try:
        assert _press(browser, toloka_study, "sync").startswith("Sync requested")
        wait_until(
            lambda: PlatformCampaign.objects.filter(
                study=toloka_study, last_synced_at__isnull=False
            ).exists(),
            timeout_s=90,
            what="the worker's sync to finish (see var/test-logs/celery-*.log)",
        )
    finally:
        worker.stop()
        purge_queues()
    assert fake_toloka.state()["assignments"][assignment["id"]]["status"] == "ACCEPTED"
    assert PlatformCampaign.objects.get(study=toloka_study).last_sync_error == ""
    assert PlatformSubmission.objects.get().decision_applied_at is not None
    page = browser.get(f"/researcher/studies/{toloka_study.pk}/live/").json()["html"]["live"]
    assert "Submissions: 1 accepted" in page and "Last sync: never" not in page
