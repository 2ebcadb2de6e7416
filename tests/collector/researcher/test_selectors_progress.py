"""collector.selectors.progress / budget / timing / workers on batches done through the real services."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pytest

from collector.models import Session, Target
from collector.selectors.budget import budget_estimate, study_budget
from collector.selectors.progress import session_counts, session_payment_state, study_progress
from collector.selectors.timing import (
    phase_durations_from_onsets,
    study_device_comparison,
    study_phase_durations_ms,
    study_reaction_ms,
)
from collector.selectors.workers import study_worker_table
from tests.factories import make_validated_batch, make_worker

pytestmark = pytest.mark.django_db


@pytest.fixture
def three_batches(alice_study):
    """pc: one counted (3/3 valid) and one rejected (1/3 valid) batch; mobile: one counted batch."""
    counted_pc = make_validated_batch(alice_study, device="pc", reaction_ms=400.0)
    rejected_pc = make_validated_batch(alice_study, device="pc", valid_positions={0}, reaction_ms=100.0)
    counted_mobile = make_validated_batch(alice_study, device="mobile", reaction_ms=700.0)
    return counted_pc, rejected_pc, counted_mobile


def test_validation_outcomes_are_what_the_fixture_claims(three_batches):
    counted_pc, rejected_pc, counted_mobile = three_batches
    assert counted_pc.validity == Session.Validity.COUNTED
    assert rejected_pc.validity == Session.Validity.REJECTED
    assert counted_mobile.validity == Session.Validity.COUNTED


def test_quota_progress_per_round_and_device(alice_study, three_batches):
    rounds = study_progress(study=alice_study)["rounds"]
    assert len(rounds) == 1 and rounds[0]["number"] == 1 and rounds[0]["targets"] == 3
    pc, mobile = rounds[0]["devices"]["pc"], rounds[0]["devices"]["mobile"]
    # only counted sessions add valid clicks: 3 pc (the rejected batch adds none), 3 mobile
    assert (pc["valid"], pc["quota_total"], pc["inflight"], pc["targets_full"]) == (3, 75, 0, 0)
    assert (mobile["valid"], mobile["quota_total"]) == (3, 75)
    assert pc["fraction"] == pytest.approx(3 / 75)


def test_valid_clicks_above_quota_are_capped_per_target(alice_study, three_batches):
    Target.objects.filter(round__study=alice_study).update(valid_pc=30)
    pc = study_progress(study=alice_study)["rounds"][0]["devices"]["pc"]
    assert (pc["valid"], pc["valid_raw"], pc["targets_full"], pc["fraction"]) == (75, 90, 3, 1.0)


def test_session_summary_counts_and_reasons(alice_study, three_batches):
    summary = study_progress(study=alice_study)["sessions"]
    assert summary["counts"]["all"] == {
        "started": 3, "in_progress": 0, "finished": 3, "expired": 0, "counted": 2, "rejected": 1, "pending": 0,
    }  # fmt: skip
    assert summary["counts"]["pc"]["rejected"] == 1 and summary["counts"]["mobile"]["rejected"] == 0
    assert sum(r["sessions"] for r in summary["rejection_reasons"]) == 1


def test_session_counts_by_status_and_verdict(alice_study, three_batches):
    from collector.services.monitor import session_expire_now
    from collector.services.session_start import session_start

    session_start(study=alice_study, worker=make_worker(), device="mobile")  # running
    session_expire_now(
        session_id=session_start(study=alice_study, worker=make_worker(), device="pc").pk
    )  # fmt: skip
    make_validated_batch(alice_study, device="pc", validate=False)  # finished, not validated yet
    bot = make_validated_batch(alice_study, device="pc")
    Session.objects.filter(pk=bot.pk).update(is_bot=True)

    every = Session.objects.filter(study=alice_study)
    assert session_counts(every) == {
        "started": 7, "in_progress": 1, "finished": 5, "expired": 1, "counted": 3, "rejected": 1, "pending": 1,
    }  # fmt: skip
    assert session_counts(every.filter(is_bot=True)) == {
        "started": 1, "in_progress": 0, "finished": 1, "expired": 0, "counted": 1, "rejected": 0, "pending": 0,
    }  # fmt: skip
    counts = study_progress(study=alice_study)["sessions"]["counts"]  # no bot in the progress table
    assert counts["all"] == session_counts(every.filter(is_bot=False))
    assert counts["mobile"] == session_counts(every.filter(is_bot=False, device="mobile"))
    assert (counts["all"]["in_progress"], counts["all"]["expired"], counts["all"]["pending"]) == (1, 1, 1)


def test_the_simulated_annotators_card_shows_the_same_counts(client, alice, alice_study, three_batches):
    from django.urls import reverse

    from collector.services.bots import bot_summary
    from collector.services.monitor import session_expire_now
    from collector.services.session_start import session_start

    counted_pc, rejected_pc, counted_mobile = three_batches
    running = session_start(study=alice_study, worker=make_worker(), device="pc")
    left = session_start(study=alice_study, worker=make_worker(), device="pc")
    session_expire_now(session_id=left.pk)
    bots = Session.objects.filter(pk__in=[counted_pc.pk, rejected_pc.pk, running.pk, left.pk])
    bots.update(is_bot=True)

    summary = bot_summary(study=alice_study)
    assert summary is not None
    assert {key: summary[key] for key in session_counts(bots)} == session_counts(bots) == {
        "started": 4, "in_progress": 1, "finished": 2, "expired": 1, "counted": 1, "rejected": 1, "pending": 0,
    }  # fmt: skip
    assert set(summary["devices"]) == {"pc"} and summary["devices"]["pc"] == session_counts(bots)

    client.force_login(alice)
    page = client.get(reverse("researcher:study_detail", args=[alice_study.pk])).content.decode()
    card = page[page.index('id="bots-summary"') :]
    assert (
        '<b class="bots-counted">1 counted</b>' in card and '<b class="bots-rejected">1 rejected</b>' in card
    )
    assert "2 finished, 1 expired (left mid-batch, or ended)" in card
    assert '<tr class="bots-pc"><td>pc</td><td class="num">4</td>' in card and "bots-mobile" not in card


def test_batch_times_cover_finished_batches(alice_study, three_batches):
    times = study_progress(study=alice_study)["batch_times"]
    assert (times["all"]["batches"], times["pc"]["batches"], times["mobile"]["batches"]) == (3, 2, 1)
    assert times["all"]["median_s"] >= 0


def test_money_follows_the_documented_rule(alice_study, three_batches):
    counted_pc, rejected_pc, counted_mobile = three_batches
    money = study_progress(study=alice_study)["money"]
    assert (money["spent"], money["owed_sessions"], money["owed"]) == (Decimal("0"), 2, Decimal("0.04"))
    Session.objects.filter(pk=counted_pc.pk).update(platform_state={"review": "ACCEPTED"})
    Session.objects.filter(pk=rejected_pc.pk).update(platform_state={"paid": True, "bonus": "0.10"})
    money = study_progress(study=alice_study)["money"]
    assert money["spent"] == Decimal("0.02") * 2 + Decimal("0.10")
    assert (money["paid_counted"], money["paid_rejected"], money["owed_sessions"]) == (1, 1, 1)
    Session.objects.filter(pk=counted_mobile.pk).update(platform_state={"review": "rejected"})
    assert study_progress(study=alice_study)["money"]["owed_sessions"] == 0


@pytest.mark.parametrize(
    ("validity", "state", "expected", "submission", "review"),
    [
        ("counted", {}, "owed", None, None),
        ("rejected", {}, "unpaid", None, None),
        ("pending", None, "unpaid", None, None),
        ("rejected", {"review": "approved"}, "paid", None, None),
        ("counted", {"status": "REJECTED"}, "unpaid", None, None),
        ("counted", {"paid": False, "review": "accepted"}, "unpaid", None, None),
        ("rejected", {}, "paid", {"decision": "accept", "applied": True}, None),
        ("counted", {}, "owed", {"decision": "accept", "applied": False}, None),
        ("counted", {"paid": True}, "unpaid", {"decision": "reject", "applied": True}, "approve"),
        ("counted", {}, "owed", {"decision": "pending", "applied": False}, None),
        ("rejected", {}, "owed", None, "approve"),
        ("counted", {}, "unpaid", None, "reject"),
    ],
)
def test_session_payment_state(validity, state, expected, submission, review):
    assert (
        session_payment_state(validity=validity, platform_state=state, submission=submission, review=review)
        == expected
    )


@pytest.mark.parametrize(
    ("validity", "state", "expected"),
    [
        ("counted", {}, "owed"),
        ("rejected", {}, "unpaid"),
        ("pending", None, "unpaid"),
        ("rejected", {"review": "approved"}, "paid"),
        ("counted", {"status": "REJECTED"}, "unpaid"),
        ("counted", {"paid": False, "review": "accepted"}, "unpaid"),
    ],
)
def test_session_payment_state_without_submission_or_review(validity, state, expected):
    assert session_payment_state(validity=validity, platform_state=state) == expected


def test_budget_estimate_by_hand():
    # pc: ceil(21 × 25 / (10 × 0.9)) = ceil(58.33) = 59 sessions; ceil(59 / 0.8) = ceil(73.75) = 74 paid batches;
    # 74 × 0.05 = 3.70 (no fee for standalone links). mobile: quota 10 → ceil(23.33) = 24 sessions, 30 paid, 1.50.
    estimate = budget_estimate(
        targets=21, quota_pc=25, quota_mobile=10, batch_size=10, reward_per_batch=Decimal("0.05")
    )
    pc, mobile = estimate["devices"]["pc"], estimate["devices"]["mobile"]
    assert (pc["sessions_needed"], pc["assignments"], pc["cost"]) == (59, 74, "3.70")
    assert (mobile["sessions_needed"], mobile["assignments"], mobile["cost"]) == (24, 30, "1.50")
    assert (estimate["batches"], estimate["total"]) == (104, "5.20")
    assert "0.9 valid clicks" in estimate["formula"] and "fee 0" in estimate["formula"]
    # Toloka's 30 % fee and a 0.01 bonus per counted session: pc (74 × 0.05 + 59 × 0.01) × 1.3 = 5.577 → 5.58
    toloka = budget_estimate(
        targets=21, quota_pc=25, quota_mobile=0, batch_size=10, reward_per_batch=Decimal("0.05"),
        platform="toloka", platform_config={"bonus_per_counted_session": "0.01"},
    )  # fmt: skip
    assert list(toloka["devices"]) == ["pc"] and toloka["total"] == "5.58"
    with pytest.raises(ValueError, match="batch_size=0"):
        budget_estimate(targets=1, quota_pc=1, quota_mobile=1, batch_size=0, reward_per_batch=Decimal(1))


def test_one_budget_figure_everywhere(client, alice, alice_study):
    """The study page, the form's estimate, the API and the launch's estimate show the same total."""
    from collector.services.launch import study_budget_estimate

    ours = study_budget(study=alice_study)
    # 3 targets × 25 / (3 × 0.9) = 27.8 → 28 sessions, 35 paid batches per device; 70 × 0.02 = 1.40
    assert (ours["targets"], ours["batches"], ours["total"]) == (3, 70, "1.40")
    assert study_budget_estimate(study=alice_study) == ours
    client.force_login(alice)
    page = client.get(f"/researcher/studies/{alice_study.pk}/").content.decode()
    assert "1.40 USD" in page and page.count(" USD</b> for ") == 1
    form = client.get(
        "/researcher/studies/new/estimate/",
        {
            "dataset": alice_study.dataset_id,
            "quota_pc": 25,
            "quota_mobile": 25,
            "batch_size": 3,
            "reward": "0.02",
        },
    ).json()
    api = client.get(f"/api/researcher/studies/{alice_study.pk}/budget/").json()
    assert form["total"] == api["total"] == "1.40"


def test_phase_durations_from_onsets():
    assert phase_durations_from_onsets({"A": 10.0, "b": 1510.5, "C": 3500.0, "D": 5000.0}) == {
        "A": 1500.5, "B": 1989.5, "C": 1500.0,
    }  # fmt: skip
    assert phase_durations_from_onsets({"A": 0.0, "C": 3000.0, "D": "x"}) == {}
    assert phase_durations_from_onsets(None) == {}


def test_timing_by_device(alice_study, three_batches):
    reactions = study_reaction_ms(study=alice_study)
    np.testing.assert_allclose(np.sort(reactions["mobile"]), [700.0, 701.0, 702.0])
    assert reactions["pc"].size == 6
    phases = study_phase_durations_ms(study=alice_study)
    np.testing.assert_allclose(phases["B"]["pc"], [2000.0] * 6)
    comparison = study_device_comparison(study=alice_study)
    assert comparison["pc"]["counted_rate"] == pytest.approx(0.5)
    assert comparison["pc"]["valid_rate"] == pytest.approx(4 / 6)
    assert comparison["mobile"]["median_reaction_ms"] == pytest.approx(701.0)


def test_worker_table_is_pseudonymous_with_quality_signals(alice_study):
    fast = make_worker(external_id="platform-id-fast")
    make_validated_batch(alice_study, device="pc", worker=fast, valid_positions={0}, reaction_ms=100.0)
    rows = study_worker_table(study=alice_study)
    assert len(rows) == 1
    row = rows[0]
    assert row["pseudonym"] == fast.pseudonym and "platform-id-fast" not in str(row)
    assert (row["sessions"], row["rejected"], row["clicks"], row["valid_clicks"]) == (1, 1, 3, 1)
    assert row["valid_rate"] == pytest.approx(1 / 3)
    assert row["fast_clicks"] == 3  # 100, 101, 102 ms < min_reaction_ms 150
    assert row["devices"] == ["pc"]


def test_worker_table_does_not_count_unvalidated_clicks_as_invalid(alice_study):
    worker = make_worker(external_id="platform-id-waiting")
    make_validated_batch(alice_study, device="pc", worker=worker, validate=False)
    (row,) = study_worker_table(study=alice_study)
    assert (row["clicks"], row["judged_clicks"], row["pending_clicks"], row["valid_clicks"]) == (3, 0, 3, 0)
    assert row["valid_rate"] is None  # nothing judged yet: neither valid nor invalid
    other = make_worker(external_id="platform-id-judged")
    make_validated_batch(alice_study, device="mobile", worker=other, valid_positions={0, 1})
    rows = {row["pseudonym"]: row for row in study_worker_table(study=alice_study)}
    judged = rows[other.pseudonym]
    assert (judged["judged_clicks"], judged["pending_clicks"], judged["valid_clicks"]) == (3, 0, 2)
    assert judged["valid_rate"] == pytest.approx(2 / 3)
    assert rows[worker.pseudonym]["valid_rate"] is None


def test_money_follows_platform_submissions_and_manual_reviews(alice_study, three_batches, alice):
    from collector.models import PlatformCampaign, PlatformPool, PlatformSubmission, SessionReview

    counted_pc, rejected_pc, counted_mobile = three_batches
    campaign = PlatformCampaign.objects.create(study=alice_study, platform="link")
    pool = PlatformPool.objects.create(campaign=campaign, device="pc", reward_per_assignment=Decimal("0.02"))
    PlatformSubmission.objects.create(
        pool=pool, external_assignment_id="a1", session=counted_pc, decision="accept",
        decision_applied_at=counted_pc.finished_at, reward=Decimal("0.03"),
        bonus_amount=Decimal("0.01"), bonus_applied_at=counted_pc.finished_at,
    )  # fmt: skip
    SessionReview.objects.create(session=rejected_pc, decision="approve", reason="fine", reviewed_by=alice)
    SessionReview.objects.create(session=counted_mobile, decision="reject", reason="bot", reviewed_by=alice)
    money = study_progress(study=alice_study)["money"]
    # paid: the accepted submission (its own reward 0.03 + bonus 0.01); owed: the approved rejected batch;
    # the counted mobile batch rejected by hand is unpaid
    assert (money["spent"], money["bonuses"], money["paid_counted"]) == (Decimal("0.04"), Decimal("0.01"), 1)
    assert (money["owed_sessions"], money["owed"]) == (1, Decimal("0.02"))


def test_study_list_summary_uses_the_current_round(alice_study, bob_study, three_batches):
    from collector.selectors.progress import studies_progress_summary

    summary = studies_progress_summary(study_ids=[alice_study.pk, bob_study.pk])
    # alice: 3 pc + 3 mobile valid clicks of 3 targets × (25 + 25)
    assert summary[alice_study.pk] == {
        "round": 1, "round_state": "open", "valid": 6, "quota_total": 150, "fraction": 6 / 150, "running": 0,
    }  # fmt: skip
    assert summary[bob_study.pk]["valid"] == 0 and summary[bob_study.pk]["quota_total"] == 150
