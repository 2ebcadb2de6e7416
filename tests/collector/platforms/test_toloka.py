"""Toloka end to end: the real toloka-kit client over HTTP against the local fake (tests/fakes/toloka_api.py).

Workers are simulated the way Toloka would send them: the fake hands out an assignment, the worker opens
our entry URL (Django test client) with the assignment id the Classic view appends, clicks the batch
through the session services, and submits the completion code on the fake. Then our sync reviews.
"""

from __future__ import annotations

import logging
from decimal import Decimal

import pytest
from django.test import Client

from collector.models import PlatformCampaign, PlatformSubmission, Session, Study, Trial
from collector.platforms import PlatformCredentialsError
from collector.services.clicks import click_record
from collector.services.launch import (
    LaunchRefused,
    study_budget_estimate,
    study_close_platform,
    study_launch,
    study_platform_status,
    study_sync,
)
from collector.services.session_finish import session_finish
from collector.services.tokens import session_token_read
from collector.services.validation import session_validate
from tasks.platforms import sync_study
from tests.conftest import FAKE_TOLOKA_TOKEN
from tests.factories import complete_session, make_dataset, make_study, present_trials

pytestmark = pytest.mark.django_db

BASE = "https://clicklab.example.org"


@pytest.fixture
def study(tmp_path, settings, fake_toloka, plain_http_pages):
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.PUBLIC_BASE_URL = BASE
    dataset = make_dataset(tmp_path, n_images=10, size=(64, 48))
    return make_study(
        dataset,
        platform="toloka",
        batch_size=10,
        quota_pc=3,
        quota_mobile=1,
        reward_per_batch=Decimal("0.05"),
        platform_config={"bonus_per_counted_session": "0.01"},
    )


def _pool(study, device="pc"):
    return PlatformCampaign.objects.get(study=study).pools.get(device=device)


def enter(client: Client, pool, assignment_id: str):
    """Open the entry URL as the Classic view builds it; returns the started Session."""
    url = pool.entry_url.replace(BASE, "") + "&toloka_assignment=" + assignment_id
    response = client.get(url)
    assert response.status_code == 303, response.content.decode()[:500]
    token = response["Location"].split("/a/")[1].strip("/")
    return Session.objects.get(pk=session_token_read(token=token))


def worker_does_batch(fake, pool, user_id: str, *, valid_clicks=None, code: str | None = None):
    assignment = fake.take(pool_id=pool.external_id, user_id=user_id)
    session = enter(Client(), pool, assignment["id"])
    session = complete_session(session, valid_clicks=valid_clicks)
    fake.submit(
        assignment_id=assignment["id"], completion_code=session.completion_code if code is None else code
    )
    return assignment, session


def test_budget_estimate_by_hand(study):
    estimate = study_budget_estimate(study=study)
    # pc: ceil(10 targets * 3 / (10 * 0.9)) = 4 sessions, ceil(4 / 0.8) = 5 assignments;
    # cost (5 * 0.05 + 4 * 0.01) * 1.30 = 0.377 -> 0.38. mobile: 2 sessions, 3 assignments,
    # (0.15 + 0.02) * 1.3 = 0.221 -> 0.22.
    assert estimate["devices"]["pc"]["sessions_needed"] == 4
    assert estimate["devices"]["pc"]["assignments"] == 5
    assert estimate["devices"]["pc"]["cost"] == "0.38"
    assert estimate["devices"]["mobile"]["assignments"] == 3
    assert estimate["total"] == "0.60"


def test_launch_creates_project_pools_and_suites_on_toloka(study, fake_toloka):
    campaign = study_launch(study_id=study.pk)
    state = fake_toloka.state()
    assert Study.objects.get(pk=study.pk).state == Study.State.PUBLISHED
    assert campaign.state == PlatformCampaign.State.OPEN
    (project,) = state["projects"].values()
    assert project["task_spec"]["view_spec"]["type"] == "classic"
    assert "toloka_assignment" in project["task_spec"]["view_spec"]["script"]
    assert "completion_code" in project["task_spec"]["output_spec"]
    assert set(project["task_spec"]["input_spec"]) == {"batch_token", "launch_url"}
    pools = {p["id"]: p for p in state["pools"].values()}
    assert len(pools) == 2 and all(p["status"] == "OPEN" for p in pools.values())
    (skill_id,) = state["skills"]
    for device, category, overlap in (("pc", "PERSONAL_COMPUTER", 5), ("mobile", "SMARTPHONE", 3)):
        pool = pools[_pool(study, device).external_id]
        assert pool["auto_accept_solutions"] is False
        assert Decimal(str(pool["reward_per_assignment"])) == Decimal("0.05")
        # the session's timeout, then 10 minutes to paste the code and submit (issue 32 item 6)
        assert pool["assignment_max_duration_seconds"] == study.session_timeout_s + 600
        conditions = [c for group in pool["filter"]["and"] for c in group["or"]]
        assert {
            "category": "computed",
            "key": "device_category",
            "operator": "EQ",
            "value": category,
        } in conditions
        assert {"category": "skill", "key": skill_id, "operator": "EQ", "value": None} in conditions
        rule = pool["quality_control"]["configs"][0]["rules"][0]
        assert rule["action"]["type"] == "RESTRICTION_V2"
        assert pool["quality_control"]["configs"][0]["collector_config"]["parameters"][
            "fast_submit_threshold_seconds"
        ] == int(0.9 * 10 * 5.0)
        (suite,) = [s for s in state["suites"].values() if s["pool_id"] == pool["id"]]
        assert suite["overlap"] == overlap
        (task,) = suite["tasks"]
        assert task["input_values"]["launch_url"].startswith(f"{BASE}/toloka/{study.pk}/{device}/?batch=")
    # Launch again: nothing new is created on Toloka.
    study_launch(study_id=study.pk)
    again = fake_toloka.state()
    assert (len(again["projects"]), len(again["pools"]), len(again["suites"])) == (1, 2, 2)


def test_full_flow_accepts_rejects_pays_and_marks(study, fake_toloka):
    study_launch(study_id=study.pk)
    pool = _pool(study)
    good, good_session = worker_does_batch(fake_toloka, pool, "user-good")
    bad, bad_session = worker_does_batch(fake_toloka, pool, "user-bad", valid_clicks=5)
    assert good_session.validity == Session.Validity.COUNTED
    assert bad_session.validity == Session.Validity.REJECTED
    assert good_session.worker.external_id == "user-good"  # learned from Toloka at entry

    report = study_sync(study_id=study.pk)

    assert report["accepted"] == 1 and report["rejected"] == 1 and report["bonuses"] == 1
    assignments = fake_toloka.state()["assignments"]
    assert assignments[good["id"]]["status"] == "ACCEPTED"
    assert assignments[bad["id"]]["status"] == "REJECTED"
    assert "5 of 10" in assignments[bad["id"]]["public_comment"]
    assert "7-of-10 rule" in assignments[bad["id"]]["public_comment"]
    bonuses = list(fake_toloka.state()["bonuses"].values())
    assert [(b["user_id"], b["assignment_id"], Decimal(str(b["amount"]))) for b in bonuses] == [
        ("user-good", good["id"], Decimal("0.01"))
    ]
    marked = {s["user_id"] for s in fake_toloka.state()["user_skills"].values()}
    assert marked == {"user-good", "user-bad"}
    status = study_platform_status(study=study)
    assert status["submissions"] == {"pending": 0, "accept": 1, "reject": 1}
    assert status["spent"] == "0.06" and status["spent_with_fee"] == "0.08"

    # A second sync changes nothing on Toloka.
    patches_before = [r for r in fake_toloka.requests() if r["method"] == "PATCH"]
    again = study_sync(study_id=study.pk)
    patches_after = [r for r in fake_toloka.requests() if r["method"] == "PATCH"]
    assert again["accepted"] == again["rejected"] == again["bonuses"] == 0
    assert len(patches_after) == len(patches_before) == 2
    assert len(fake_toloka.state()["bonuses"]) == 1


def test_pending_validation_waits(study, fake_toloka):
    study_launch(study_id=study.pk)
    pool = _pool(study)
    assignment = fake_toloka.take(pool_id=pool.external_id, user_id="user-slow")
    session = enter(Client(), pool, assignment["id"])
    # Click everything (off target), finish, but do not validate yet.
    present_trials(session)
    for trial in Trial.objects.filter(session=session):
        click_record(
            session=session, position=trial.position, idempotency_key=f"k{trial.pk}", x=1.0, y=1.0,
            shown_width=64.0, shown_height=48.0, pointer_type="mouse", reaction_ms=600.0,
            event_timestamp_ms=1.0, phase_onsets_ms={}, blocked_clicks=0, flags=[], refresh_hz=60.0,
        )  # fmt: skip
    session = session_finish(session_id=session.pk)
    fake_toloka.submit(assignment_id=assignment["id"], completion_code=session.completion_code)

    report = study_sync(study_id=study.pk)

    assert report["waiting"] == 1
    assert fake_toloka.state()["assignments"][assignment["id"]]["status"] == "SUBMITTED"
    session_validate(session_id=session.pk)
    report = study_sync(study_id=study.pk)
    assert report["rejected"] == 1
    assert fake_toloka.state()["assignments"][assignment["id"]]["status"] == "REJECTED"


def test_second_accept_gets_409_and_is_recorded_as_applied(study, fake_toloka):
    study_launch(study_id=study.pk)
    good, _ = worker_does_batch(fake_toloka, _pool(study), "user-a")
    study_sync(study_id=study.pk)
    # Our record of the accept is lost (e.g. the worker died after the call): the next sync accepts again.
    PlatformSubmission.objects.update(decision_applied_at=None, bonus_applied_at=None)

    report = study_sync(study_id=study.pk)

    responses = [r for r in fake_toloka.requests() if r["method"] == "PATCH"]
    assert len(responses) == 2  # the second PATCH got 409 CONFLICT_STATE
    submission = PlatformSubmission.objects.get()
    assert submission.decision_applied_at is not None and submission.last_error == ""
    assert report["failed"] == 0
    assert fake_toloka.state()["assignments"][good["id"]]["status"] == "ACCEPTED"
    assert len(fake_toloka.state()["bonuses"]) == 1  # same operation id: no second bonus


def test_5xx_is_retried_and_persistent_failure_is_left_for_the_next_sync(study, fake_toloka):
    study_launch(study_id=study.pk)
    good, _ = worker_does_batch(fake_toloka, _pool(study), "user-a")
    fake_toloka.fault(method="PATCH", path=r"^/api/v1/assignments/", times=1, status=500)

    study_sync(study_id=study.pk)  # one 500, then the client's retry succeeds

    assert fake_toloka.state()["assignments"][good["id"]]["status"] == "ACCEPTED"
    assert len([r for r in fake_toloka.requests() if r["method"] == "PATCH"]) == 2

    other, _ = worker_does_batch(fake_toloka, _pool(study), "user-b", valid_clicks=2)
    fake_toloka.fault(method="PATCH", path=r"^/api/v1/assignments/", times=2, status=503, empty=True)
    report = study_sync(study_id=study.pk)
    assert report["failed"] == 1
    stuck = PlatformSubmission.objects.get(external_assignment_id=other["id"])
    assert (
        stuck.decision == "reject"
        and stuck.decision_applied_at is None
        and "safe to repeat" in stuck.last_error
    )
    assert fake_toloka.state()["assignments"][other["id"]]["status"] == "SUBMITTED"

    report = study_sync(study_id=study.pk)
    assert report["rejected"] == 1
    assert fake_toloka.state()["assignments"][other["id"]]["status"] == "REJECTED"


def test_timeouts_after_the_effect_do_not_duplicate_it(study, fake_toloka):
    study_launch(study_id=study.pk)
    good, _ = worker_does_batch(fake_toloka, _pool(study), "user-a")
    # Toloka does the work but answers too late (client timeout 1 s): accept and bonus.
    fake_toloka.fault(method="PATCH", path=r"^/api/v1/assignments/", times=1, delay_s=1.5, after=True)
    fake_toloka.fault(method="POST", path=r"^/api/v1/user-bonuses", times=1, delay_s=1.5, after=True)

    for _ in range(2):  # the client retries at once; anything still unapplied is finished by the next sync
        study_sync(study_id=study.pk)

    state = fake_toloka.state()
    assert state["assignments"][good["id"]]["status"] == "ACCEPTED"
    assert len(state["bonuses"]) == 1
    submission = PlatformSubmission.objects.get()
    assert submission.decision_applied_at is not None and submission.bonus_applied_at is not None
    assert submission.external_bonus_id == next(iter(state["bonuses"]))
    assert (
        len(
            [
                r
                for r in fake_toloka.requests()
                if r["path"].startswith("/api/v1/user-bonuses") and r["method"] == "POST"
            ]
        )
        == 2
    )


def test_wrong_and_reused_codes_are_rejected_with_a_reason(study, fake_toloka):
    study_launch(study_id=study.pk)
    pool = _pool(study)
    good, good_session = worker_does_batch(fake_toloka, pool, "user-a")
    # Another worker pastes user-a's code; a third types a made-up one.
    copied, _ = worker_does_batch(fake_toloka, pool, "user-b", code=good_session.completion_code)
    made_up, _ = worker_does_batch(fake_toloka, pool, "user-c", code="12-AAAAAAAAAA")

    study_sync(study_id=study.pk)

    assignments = fake_toloka.state()["assignments"]
    assert assignments[good["id"]]["status"] == "ACCEPTED"
    for assignment in (copied, made_up):
        assert assignments[assignment["id"]]["status"] == "REJECTED"
        assert (
            "not the code our task showed you for this assignment"
            in assignments[assignment["id"]]["public_comment"]
        )
    assert len(fake_toloka.state()["bonuses"]) == 1


def test_bad_or_missing_token_is_a_clear_error_without_the_token(study, fake_toloka, settings):
    settings.TOLOKA_TOKEN = "AQAAAAwrongTokenValue9876543210abc"
    with pytest.raises(PlatformCredentialsError) as error:
        study_launch(study_id=study.pk)
    assert "TOLOKA_TOKEN" in str(error.value) and settings.TOLOKA_TOKEN not in str(error.value)
    assert Study.objects.get(pk=study.pk).state == Study.State.DRAFT  # nothing launched

    settings.TOLOKA_TOKEN = ""
    with pytest.raises(PlatformCredentialsError, match="TOLOKA_TOKEN is not set"):
        study_launch(study_id=study.pk)

    settings.TOLOKA_TOKEN = FAKE_TOLOKA_TOKEN
    study_launch(study_id=study.pk)
    settings.TOLOKA_TOKEN = "AQAAAAwrongTokenValue9876543210abc"
    with pytest.raises(PlatformCredentialsError):
        study_sync(study_id=study.pk)
    assert "TOLOKA_TOKEN" in PlatformCampaign.objects.get(study=study).last_sync_error
    sync_study(study.pk)  # the Celery task logs the error and does not retry (nothing to raise)


def test_token_never_logged_or_rendered(study, fake_toloka, caplog, admin_client):
    caplog.set_level(logging.DEBUG)
    study_launch(study_id=study.pk)
    pool = _pool(study)
    assignment = fake_toloka.take(pool_id=pool.external_id, user_id="user-a")
    page = Client().get(
        pool.entry_url.replace(BASE, "") + "&toloka_assignment=" + assignment["id"], follow=True
    )
    study_sync(study_id=study.pk)
    campaign = PlatformCampaign.objects.get(study=study)
    admin_page = admin_client.get(f"/admin/collector/platformcampaign/{campaign.pk}/change/")
    assert admin_page.status_code == 200
    assert caplog.records, "expected log records from the flow"
    for text in (caplog.text, page.content.decode(), admin_page.content.decode()):
        assert FAKE_TOLOKA_TOKEN not in text


def test_entry_preview_refusals_and_reload(study, fake_toloka):
    study_launch(study_id=study.pk)
    pc, mobile = _pool(study), _pool(study, "mobile")
    client = Client()
    preview = client.get(pc.entry_url.replace(BASE, ""))
    assert preview.status_code == 200 and b"Preview" in preview.content
    assert Session.objects.count() == 0

    forged = client.get(f"/toloka/{study.pk}/pc/?batch=forged&toloka_assignment=1")
    assert forged.status_code == 400
    other_pool = fake_toloka.take(pool_id=mobile.external_id, user_id="user-m")
    wrong = client.get(pc.entry_url.replace(BASE, "") + "&toloka_assignment=" + other_pool["id"])
    assert wrong.status_code == 400 and b"another task" in wrong.content
    unknown = client.get(pc.entry_url.replace(BASE, "") + "&toloka_assignment=999999999")
    assert unknown.status_code == 400

    assignment = fake_toloka.take(pool_id=pc.external_id, user_id="user-a")
    session = enter(client, pc, assignment["id"])
    assert session.device == "pc" and session.platform_batch_id == pc.external_id
    assert enter(client, pc, assignment["id"]).pk == session.pk  # reload resumes
    complete_session(session)
    assert enter(client, pc, assignment["id"]).pk == session.pk  # after the end: the same finished session
    assert Session.objects.count() == 1

    fake_toloka.fault(method="GET", path=r"^/api/v1/assignments/", times=5, status=500)
    down = client.get(pc.entry_url.replace(BASE, "") + "&toloka_assignment=" + assignment["id"])
    assert down.status_code == 503 and b"reload" in down.content


def test_close_closes_pools_and_study(study, fake_toloka):
    study_launch(study_id=study.pk)
    study_close_platform(study_id=study.pk)
    assert {p["status"] for p in fake_toloka.state()["pools"].values()} == {"CLOSED"}
    assert Study.objects.get(pk=study.pk).state == Study.State.CLOSED
    assert PlatformCampaign.objects.get(study=study).state == PlatformCampaign.State.CLOSED


# --- issue 32 item 6: Toloka's currency and a time limit that leaves time to submit the code ---


def _api_calls(fake) -> list[str]:
    return [f"{r['method']} {r['path']}" for r in fake.requests() if r["path"].startswith("/api/")]


def test_a_study_in_another_currency_is_refused_before_anything_is_created(study, fake_toloka):
    Study.objects.filter(pk=study.pk).update(currency="EUR")  # made outside the form (admin, an older study)
    with pytest.raises(LaunchRefused) as refused:
        study_launch(study_id=study.pk)
    message = str(refused.value)
    assert "currency: Toloka pays workers in USD, and study" in message and "in EUR" in message
    assert "reward 0.0500 as dollars" in message
    assert Study.objects.get(pk=study.pk).state == Study.State.DRAFT
    assert _api_calls(fake_toloka) == [], "nothing reached Toloka"
    assert not PlatformCampaign.objects.filter(study=study).exists()


def test_the_time_limit_leaves_time_to_submit_the_code(study, fake_toloka):
    study.platform_config = {
        **study.platform_config,
        "assignment_max_duration_s": study.session_timeout_s + 30,
    }
    study.save(update_fields=["platform_config"])
    with pytest.raises(
        LaunchRefused, match=r"platform_config.assignment_max_duration_s: 1830 s leaves a worker"
    ):
        study_launch(study_id=study.pk)
    assert _api_calls(fake_toloka) == []
    study.platform_config["assignment_max_duration_s"] = study.session_timeout_s + 300
    study.save(update_fields=["platform_config"])
    study_launch(study_id=study.pk)
    limits = {p["assignment_max_duration_seconds"] for p in fake_toloka.state()["pools"].values()}
    assert limits == {study.session_timeout_s + 300}


@pytest.mark.parametrize("policy", ["release", "count"])
def test_counted_work_toloka_rejects_follows_the_rejected_work_policy(study, fake_toloka, policy):
    """Issue 32 item 2: a batch counted here whose Toloka assignment the sync rejects (a made-up code) gives its
    valid clicks back to the quotas (``release``, the default) or keeps them (``count``), once, recorded on
    the session; a second sync changes nothing."""
    from collector.models import Target

    Study.objects.filter(pk=study.pk).update(rejected_work=policy)
    study_launch(study_id=study.pk)
    pool = _pool(study)
    _, good = worker_does_batch(fake_toloka, pool, "user-a")
    _, made_up = worker_does_batch(fake_toloka, pool, "user-c", code="12-AAAAAAAAAA")
    good.refresh_from_db()
    made_up.refresh_from_db()
    assert good.validity == made_up.validity == "counted"
    before = sum(Target.objects.filter(round__study=study).values_list("valid_pc", flat=True))
    assert before == good.valid_clicks + made_up.valid_clicks

    for _ in range(2):
        study_sync(study_id=study.pk)
    made_up.refresh_from_db()
    record = made_up.platform_state["rejected"]
    assert record["policy"] == policy
    assert record["released"] == (made_up.valid_clicks if policy == "release" else 0)
    after = sum(Target.objects.filter(round__study=study).values_list("valid_pc", flat=True))
    assert after == before - record["released"]
    good.refresh_from_db()
    assert "rejected" not in good.platform_state
