"""Running a study on its crowd platform: budget estimate, launch, sync (review and pay), pause, close.

The sync applies our validation result to the platform: a submission whose completion code checks out
(``collector.services.codes.completion_code_check``, bound to the assignment id) and whose session was
counted is accepted; a rejected session, a wrong code or a code already used is rejected with a comment
that says why (naming the 7-of-10 rule); a session still being validated waits for the next sync.

Idempotence: each decision, bonus operation id and skill mark is written to our database before the
platform call and marked applied after it. A repeated call is harmless: a second accept gets 409 and we
read the assignment's status instead; a bonus carries the same operation id. 5xx and timeouts are retried
by the client; what still fails stays unapplied and the next sync (Celery beat) tries again.
"""

from __future__ import annotations

import logging
import math
import uuid
from decimal import Decimal

from django.db import transaction
from django.db.models import Count, Q, Sum
from django.utils import timezone

from collector.models import (
    Instance,
    PlatformCampaign,
    PlatformPool,
    PlatformSubmission,
    Session,
    Study,
)
from collector.platforms import (
    PlatformConflict,
    PlatformCredentialsError,
    PlatformError,
    PlatformNotSupported,
    PlatformUnavailable,
    get_adapter,
)
from collector.services import studies as study_services
from collector.services.codes import completion_code_check

logger = logging.getLogger(__name__)

DEVICES = ("pc", "mobile")
#: Fraction of clicks expected valid and of sessions expected counted (planning defaults; override in
#: ``Study.platform_config`` as ``expected_valid_click_fraction`` / ``expected_counted_fraction``).
DEFAULT_VALID_CLICK_FRACTION = 0.9
DEFAULT_COUNTED_FRACTION = 0.8


class LaunchRefused(Exception):
    """The study cannot be launched as configured; the message says what to change."""


# ------------------------------------------------------------------------------------------------
# budget


def _devices(study: Study) -> list[str]:
    wanted = (study.platform_config or {}).get("devices") or list(DEVICES)
    return [d for d in DEVICES if d in wanted and study.quota_for(d) > 0]


def _round_targets(study: Study) -> int:
    open_round = study_services.study_open_round(study=study)
    if open_round is not None:
        return open_round.targets.count()
    return Instance.objects.filter(image__dataset=study.dataset).count()


def study_budget_estimate(*, study: Study) -> dict:
    """What the current round will cost on the platform, per device and in total.

    Sessions needed per device = ceil(targets * quota / (batch_size * valid click fraction)); assignments
    bought = ceil(sessions / counted fraction); cost = assignments * reward * (1 + platform fee) plus the
    configured bonus per counted session (with fee). Later rounds (corrections) are not known before
    round 1 ends and are not included. Money as Decimal strings in ``study.currency``.
    """
    config = study.platform_config or {}
    adapter = get_adapter(study.platform)
    click_fraction = float(config.get("expected_valid_click_fraction", DEFAULT_VALID_CLICK_FRACTION))
    counted_fraction = float(config.get("expected_counted_fraction", DEFAULT_COUNTED_FRACTION))
    fee = Decimal(str(config.get("fee_fraction", adapter.fee_fraction)))
    bonus = Decimal(str(config.get("bonus_per_counted_session", "0")))
    reward = Decimal(study.reward_per_batch)
    targets = _round_targets(study)
    per_device, total = {}, Decimal("0")
    for device in _devices(study):
        sessions = math.ceil(
            targets * study.quota_for(device) / (study.batch_size * max(click_fraction, 0.05))
        )
        assignments = math.ceil(sessions / max(counted_fraction, 0.05)) if sessions else 0
        cost = (assignments * reward + sessions * bonus) * (1 + fee)
        cost = cost.quantize(Decimal("0.01"))
        per_device[device] = {
            "targets": targets,
            "quota": study.quota_for(device),
            "sessions_needed": sessions,
            "assignments": assignments,
            "reward": str(reward),
            "cost": str(cost),
        }
        total += cost
    return {
        "platform": study.platform,
        "currency": study.currency,
        "fee_fraction": str(fee),
        "bonus_per_counted_session": str(bonus),
        "devices": per_device,
        "total": str(total.quantize(Decimal("0.01"))),
        "note": "current round only; correction rounds are built from its clicks and cost extra.",
    }


# ------------------------------------------------------------------------------------------------
# launch, pause, close


def study_launch(*, study_id: int) -> PlatformCampaign:
    """Publish the study (draft → published) and create and open its pools on the platform.

    Checks the credentials first (a clear error naming the token setting), refuses when the estimate
    exceeds ``platform_config["max_budget"]``. Safe to call again: it finishes a half-done launch.
    """
    study = Study.objects.get(pk=study_id)
    adapter = get_adapter(study.platform)
    estimate = study_budget_estimate(study=study)
    limit = (study.platform_config or {}).get("max_budget")
    if limit is not None and Decimal(estimate["total"]) > Decimal(str(limit)):
        raise LaunchRefused(
            f"study {study.pk}: the estimated cost {estimate['total']} {study.currency} exceeds "
            f"platform_config.max_budget = {limit}; raise max_budget or lower the quotas or the reward."
        )
    if not estimate["devices"]:
        raise LaunchRefused(
            f"study {study.pk}: no device class to recruit (quota_pc and quota_mobile are 0 or "
            "platform_config.devices excludes both)."
        )
    adapter.check_credentials()
    if study.state == Study.State.DRAFT:
        study = study_services.study_publish(study_id=study.pk)
    elif study.state == Study.State.CLOSED:
        raise LaunchRefused(f"study {study.pk} is closed; create a new study to collect more clicks.")
    campaign, _ = PlatformCampaign.objects.get_or_create(study=study, defaults={"platform": study.platform})
    campaign.budget_estimate = estimate
    campaign.save(update_fields=["budget_estimate"])
    for device, plan in estimate["devices"].items():
        PlatformPool.objects.get_or_create(
            campaign=campaign,
            device=device,
            defaults={
                "reward_per_assignment": study.reward_per_batch,
                "assignments_planned": plan["assignments"],
            },
        )
    adapter.publish(campaign=campaign)
    for pool in campaign.pools.all():
        adapter.open(pool=pool)
    if study.state == Study.State.PAUSED:
        study_services.study_publish(study_id=study.pk)
    campaign.state = PlatformCampaign.State.OPEN
    campaign.launched_at = campaign.launched_at or timezone.now()
    campaign.save(update_fields=["state", "launched_at"])
    logger.info("study launched", extra={"study_id": study.pk, "platform": study.platform})
    return campaign


def study_pause_platform(*, study_id: int) -> PlatformCampaign:
    """Stop recruiting (close the pools; ``study_launch`` reopens them) and pause the study."""
    campaign = PlatformCampaign.objects.select_related("study").get(study_id=study_id)
    adapter = get_adapter(campaign.platform)
    for pool in campaign.pools.all():
        adapter.close(pool=pool)
    if campaign.study.state == Study.State.PUBLISHED:
        study_services.study_pause(study_id=study_id)
    campaign.state = PlatformCampaign.State.PAUSED
    campaign.save(update_fields=["state"])
    return campaign


def study_close_platform(*, study_id: int) -> PlatformCampaign:
    """Close the platform pools and the study. Submissions keep being synced (reviews still owed)."""
    campaign = PlatformCampaign.objects.select_related("study").get(study_id=study_id)
    adapter = get_adapter(campaign.platform)
    for pool in campaign.pools.all():
        adapter.close(pool=pool)
    study_services.study_close(study_id=study_id)
    campaign.state = PlatformCampaign.State.CLOSED
    campaign.closed_at = campaign.closed_at or timezone.now()
    campaign.save(update_fields=["state", "closed_at"])
    return campaign


# ------------------------------------------------------------------------------------------------
# sync


def _rule_comment(session: Session) -> str:
    trials = session.trials.count() or session.study.batch_size
    needed = math.ceil(session.study.min_valid_per_session * trials / session.study.batch_size)
    valid = session.valid_clicks if session.valid_clicks is not None else 0
    return (
        f"{valid} of {trials} clicks were on the shown object; the task requires at least {needed} of "
        f"{trials} (the {session.study.min_valid_per_session}-of-{session.study.batch_size} rule in the "
        "instructions)."
    )


def submission_decide(*, submission: PlatformSubmission) -> None:
    """Set ``decision`` and ``public_comment`` of a pending submission, or leave it pending while its
    session is being validated. Call inside ``transaction.atomic()`` with the row locked."""
    if submission.decision != PlatformSubmission.Decision.PENDING:
        return
    study = submission.pool.campaign.study
    code = submission.completion_code
    session_id = completion_code_check(code=code, assignment_id=submission.external_assignment_id)
    session = Session.objects.filter(pk=session_id, study=study).first() if session_id else None
    reason = ""
    if session is None or session.platform_assignment_id != submission.external_assignment_id:
        reason = (
            f"Rejected: the completion code {code[:40]!r} is not the code our task showed you for this "
            "assignment (each code works only for the assignment it was issued in)."
        )
    else:
        other = PlatformSubmission.objects.filter(session=session).exclude(pk=submission.pk).first()
        if other is not None:
            reason = "Rejected: this completion code was already used for another submission."
    if reason:
        submission.decision = PlatformSubmission.Decision.REJECT
        submission.public_comment = reason
    elif session.validity == Session.Validity.PENDING:
        submission.session = session
        return
    elif session.validity == Session.Validity.COUNTED:
        submission.session = session
        submission.decision = PlatformSubmission.Decision.ACCEPT
        submission.public_comment = f"Accepted, thank you: {_rule_comment(session).split(';')[0]}."
        bonus = Decimal(str((study.platform_config or {}).get("bonus_per_counted_session", "0")))
        if bonus > 0 and get_adapter(study.platform).supports_bonus:
            submission.bonus_amount = bonus
            submission.bonus_operation_id = uuid.uuid4()
    else:
        submission.session = session
        submission.decision = PlatformSubmission.Decision.REJECT
        submission.public_comment = f"Rejected: {_rule_comment(session)}"
    submission.decided_at = timezone.now()


def _apply_decision(*, adapter, submission: PlatformSubmission) -> None:
    pool = submission.pool
    action = adapter.accept if submission.decision == PlatformSubmission.Decision.ACCEPT else adapter.reject
    wanted = "ACCEPTED" if submission.decision == PlatformSubmission.Decision.ACCEPT else "REJECTED"
    try:
        action(pool=pool, assignment_id=submission.external_assignment_id, comment=submission.public_comment)
    except PlatformConflict:
        # Already done (by an earlier run whose answer was lost) or changed by someone else: ask.
        status = adapter.assignment_status(pool=pool, assignment_id=submission.external_assignment_id)
        if status != wanted:
            raise PlatformError(
                f"assignment {submission.external_assignment_id} is {status} on {adapter.name}, we wanted "
                f"{wanted}; review it on the platform."
            ) from None
    PlatformSubmission.objects.filter(pk=submission.pk).update(
        decision_applied_at=timezone.now(), last_error=""
    )


def _apply_bonus(*, adapter, submission: PlatformSubmission) -> None:
    bonus_id = adapter.bonus(
        pool=submission.pool,
        assignment_id=submission.external_assignment_id,
        worker_id=submission.external_worker_id,
        amount=submission.bonus_amount,
        message="Bonus for a careful batch of clicks. Thank you!",
        operation_id=str(submission.bonus_operation_id),
    )
    PlatformSubmission.objects.filter(pk=submission.pk).update(
        external_bonus_id=bonus_id, bonus_applied_at=timezone.now()
    )


def _submission_process(*, adapter, campaign: PlatformCampaign, submission_id: int, report: dict) -> None:
    with transaction.atomic():
        submission = (
            PlatformSubmission.objects.select_for_update(no_key=True, of=("self",))
            .select_related("pool__campaign__study")
            .get(pk=submission_id)
        )
        submission_decide(submission=submission)
        submission.save()
    if submission.decision == PlatformSubmission.Decision.PENDING:
        report["waiting"] += 1
        return
    try:
        if submission.decision_applied_at is None:
            _apply_decision(adapter=adapter, submission=submission)
            report[
                "accepted" if submission.decision == PlatformSubmission.Decision.ACCEPT else "rejected"
            ] += 1
        if submission.bonus_operation_id and submission.bonus_applied_at is None:
            _apply_bonus(adapter=adapter, submission=submission)
            report["bonuses"] += 1
        if submission.worker_marked_at is None:
            adapter.mark_worker(campaign=campaign, worker_id=submission.external_worker_id)
            PlatformSubmission.objects.filter(pk=submission.pk).update(worker_marked_at=timezone.now())
    except PlatformNotSupported as exc:
        PlatformSubmission.objects.filter(pk=submission.pk).update(last_error=str(exc))
        report["manual"] += 1
    except PlatformUnavailable as exc:
        PlatformSubmission.objects.filter(pk=submission.pk).update(
            attempts=submission.attempts + 1, last_error=str(exc)
        )
        report["failed"] += 1
    except PlatformCredentialsError:
        raise
    except PlatformError as exc:
        PlatformSubmission.objects.filter(pk=submission.pk).update(
            attempts=submission.attempts + 1, last_error=str(exc)
        )
        report["failed"] += 1


def study_sync(*, study_id: int) -> dict:
    """Fetch submitted assignments, decide, and apply accept/reject, bonuses and skills.

    Returns counts: fetched, accepted, rejected, bonuses, waiting (validation pending), failed (left for the
    next sync), manual (platform actions to do by hand). Raises PlatformCredentialsError on a bad token.
    """
    campaign = PlatformCampaign.objects.select_related("study").get(study_id=study_id)
    adapter = get_adapter(campaign.platform)
    report = dict.fromkeys(("fetched", "accepted", "rejected", "bonuses", "waiting", "failed", "manual"), 0)
    try:
        for pool in campaign.pools.exclude(external_id=""):
            for found in adapter.fetch_submissions(pool=pool):
                report["fetched"] += 1
                PlatformSubmission.objects.get_or_create(
                    pool=pool,
                    external_assignment_id=found.assignment_id,
                    defaults={
                        "external_worker_id": found.worker_id,
                        "completion_code": found.code[:200],
                        "submitted_at": found.submitted_at,
                        "reward": found.reward,
                    },
                )
        unfinished = PlatformSubmission.objects.filter(pool__campaign=campaign).filter(
            Q(decision_applied_at__isnull=True)
            | Q(bonus_operation_id__isnull=False, bonus_applied_at__isnull=True)
            | Q(worker_marked_at__isnull=True)
        )
        for submission_id in unfinished.order_by("pk").values_list("pk", flat=True):
            _submission_process(
                adapter=adapter, campaign=campaign, submission_id=submission_id, report=report
            )
    except PlatformError as exc:
        PlatformCampaign.objects.filter(pk=campaign.pk).update(last_sync_error=str(exc))
        raise
    PlatformCampaign.objects.filter(pk=campaign.pk).update(last_synced_at=timezone.now(), last_sync_error="")
    logger.info("platform sync", extra={"study_id": study_id, **report})
    return report


# ------------------------------------------------------------------------------------------------
# status


def study_platform_status(*, study: Study) -> dict:
    """Pools, submissions by decision and money spent (rewards of accepted work + bonuses paid, before
    the platform fee, and with it)."""
    campaign = PlatformCampaign.objects.filter(study=study).first()
    if campaign is None:
        return {"platform": study.platform, "state": "not launched", "pools": [], "spent": "0.00"}
    subs = PlatformSubmission.objects.filter(pool__campaign=campaign)
    counts = dict(subs.values_list("decision").annotate(n=Count("pk")))
    applied = subs.filter(decision_applied_at__isnull=False)
    rewards = applied.filter(decision=PlatformSubmission.Decision.ACCEPT).aggregate(s=Sum("reward"))["s"] or 0
    bonuses = subs.filter(bonus_applied_at__isnull=False).aggregate(s=Sum("bonus_amount"))["s"] or 0
    fee = Decimal(
        str((study.platform_config or {}).get("fee_fraction", get_adapter(campaign.platform).fee_fraction))
    )
    spent = Decimal(rewards) + Decimal(bonuses)
    return {
        "platform": campaign.platform,
        "state": campaign.state,
        "currency": study.currency,
        "pools": [
            {
                "device": p.device,
                "external_id": p.external_id,
                "status": p.external_status,
                "assignments_planned": p.assignments_planned,
                "entry_url": p.entry_url,
            }
            for p in campaign.pools.all()
        ],
        "submissions": {k: counts.get(k, 0) for k in PlatformSubmission.Decision.values},
        "unapplied": subs.filter(decision_applied_at__isnull=True).exclude(decision="pending").count(),
        "rewards_paid": str(Decimal(rewards).quantize(Decimal("0.01"))),
        "bonuses_paid": str(Decimal(bonuses).quantize(Decimal("0.01"))),
        "spent": str(spent.quantize(Decimal("0.01"))),
        "spent_with_fee": str((spent * (1 + fee)).quantize(Decimal("0.01"))),
        "budget_estimate": campaign.budget_estimate.get("total", ""),
        "last_synced_at": campaign.last_synced_at.isoformat() if campaign.last_synced_at else "",
        "last_sync_error": campaign.last_sync_error,
    }
