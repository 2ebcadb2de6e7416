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
import uuid
from decimal import Decimal

from django.db import transaction
from django.db.models import Count, Q, Sum
from django.utils import timezone

from collector.models import (
    PlatformCampaign,
    PlatformPool,
    PlatformSubmission,
    Session,
    SessionReview,
    Study,
)
from collector.models.studies import Platform
from collector.platforms import (
    PlatformConflict,
    PlatformCredentialsError,
    PlatformError,
    PlatformNotSupported,
    PlatformUnavailable,
    get_adapter,
)
from collector.selectors import budget as budget_selectors
from collector.services import studies as study_services
from collector.services.codes import completion_code_check
from collector.services.outbox import task_intent_add
from tasks import names as task_names

logger = logging.getLogger(__name__)


class LaunchRefused(Exception):
    """The study cannot be launched as configured; the message says what to change."""


# ------------------------------------------------------------------------------------------------
# budget


def study_budget_estimate(*, study: Study) -> dict:
    """What the current round will cost on the platform, per device and in total: the one estimate of
    ``collector.selectors.budget.budget_estimate`` (its docstring gives the formula)."""
    return budget_selectors.study_budget(study=study)


# ------------------------------------------------------------------------------------------------
# launch, pause, close


def study_launch(*, study_id: int) -> PlatformCampaign:
    """Publish the study (draft → published) and create and open its pools on the platform.

    Refuses a study that breaks the platform's rules (``PlatformAdapter.launch_problems``: on Toloka a
    currency other than USD; on Toloka and MTurk an assignment time limit without time to submit), checks the
    credentials (a clear error naming the token setting), refuses when the estimate exceeds
    ``platform_config["max_budget"]``. Safe to call again: it finishes a half-done launch.
    """
    study = Study.objects.get(pk=study_id)
    adapter = get_adapter(study.platform)
    problems = adapter.launch_problems(study=study)
    if problems:
        raise LaunchRefused(f"study {study.pk} cannot be launched on {adapter.name}: " + " ".join(problems))
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
    trials = session.trials.filter(role__in=("task", "filler")).count() or session.study.batch_size
    needed = session.study.min_valid_per_session  # never scaled down for a short batch (issue 32 item 2)
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
    review = None if reason or session is None else session_review_latest(session_id=session.pk)
    if reason or session is None:  # (no session always comes with a reason)
        submission.decision = PlatformSubmission.Decision.REJECT
        submission.public_comment = reason
    elif review is not None:
        # The researcher decided by hand (session page): that wins over the validation's verdict.
        submission.session = session
        _decision_set(submission=submission, study=study, accept=review.decision == SessionReview.Decision.APPROVE,
                      comment=review.reason)  # fmt: skip
    elif session.validity == Session.Validity.PENDING:
        submission.session = session
        return
    elif session.validity == Session.Validity.COUNTED:
        submission.session = session
        _decision_set(submission=submission, study=study, accept=True,
                      comment=f"Accepted, thank you: {_rule_comment(session).split(';')[0]}.")  # fmt: skip
    else:
        submission.session = session
        submission.decision = PlatformSubmission.Decision.REJECT
        submission.public_comment = f"Rejected: {_rule_comment(session)}"
    submission.decided_at = timezone.now()
    if submission.decision == PlatformSubmission.Decision.REJECT:
        _rejected_work_apply(submission=submission, study=study, session=session)


def _rejected_work_apply(*, submission: PlatformSubmission, study: Study, session: Session | None) -> None:
    """A rejected assignment whose batch was counted here (also when its code was wrong: the session is found
    by the assignment id) follows the study's ``rejected_work`` policy (issue 32 item 2)."""
    from collector.services.validation import session_platform_rejected

    counted = (
        session
        if session is not None and session.platform_assignment_id == submission.external_assignment_id
        else None
    )
    if counted is None and submission.external_assignment_id:
        counted = Session.objects.filter(
            study=study,
            platform_assignment_id=submission.external_assignment_id,
            validity=Session.Validity.COUNTED,
        ).first()
    if counted is not None and counted.validity == Session.Validity.COUNTED:
        session_platform_rejected(session_id=counted.pk)


def _decision_set(*, submission: PlatformSubmission, study: Study, accept: bool, comment: str) -> None:
    """Accept (with the configured bonus, once) or reject ``submission``, not yet applied on the platform."""
    submission.decision = PlatformSubmission.Decision.ACCEPT if accept else PlatformSubmission.Decision.REJECT
    submission.public_comment = comment
    submission.decided_at = timezone.now()
    submission.decision_applied_at = None
    bonus = Decimal(str((study.platform_config or {}).get("bonus_per_counted_session", "0")))
    if (
        accept
        and bonus > 0
        and submission.bonus_operation_id is None
        and get_adapter(study.platform).supports_bonus
    ):
        submission.bonus_amount = bonus
        submission.bonus_operation_id = uuid.uuid4()


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


# ------------------------------------------------------------------------------------------------
# the study page's buttons: go live, pause, close, sync now


def task_send_after_commit(*, name: str, args: list) -> None:
    """The one place this module sends a Celery task: by name, through the transactional outbox (sent once
    the current transaction commits; the relay retries while the broker is down)."""
    task_intent_add(name=name, args=args)


def study_go_live(*, study_id: int) -> str:
    """The study page's Publish / Launch / Resume button: publish a standalone-link study, or launch a
    crowd-platform study (:func:`study_launch`: project, pools, tasks, open). Returns what happened, in a
    sentence for the researcher; a study is never called live when nothing reached its platform.

    Raises StudyStateError (closed study, no objects), LaunchRefused (budget, devices) or PlatformError
    (credentials, the platform refused or did not answer) with a message that says what is missing."""
    study = Study.objects.get(pk=study_id)
    if study.platform == Platform.LINK:
        study = study_services.study_publish(study_id=study_id)
        return "Published: annotators can start now with the links and QR codes on this page."
    if study.state == Study.State.CLOSED:
        raise study_services.StudyStateError(
            f"study {study.pk} is closed; a closed study cannot be launched again."
        )
    campaign = study_launch(study_id=study_id)
    return study_launch_summary(campaign=campaign)


def study_launch_summary(*, campaign: PlatformCampaign) -> str:
    """What the launch did on the platform and what is left to the researcher, in words."""
    study = campaign.study
    pools = list(campaign.pools.all())
    if campaign.platform == Platform.PROLIFIC:
        code = str((study.platform_config or {}).get("prolific_completion_code", "")).strip()
        code_step = (
            f"set its completion code to {code}"
            if code
            else "create a completion code there and enter it under “Prolific settings” on the study page "
            "(platform_config.prolific_completion_code), or Prolific will not recognise the codes workers bring back"
        )
        return (
            "Published here. Prolific studies are created in Prolific's own interface (not automated by "
            "Clicklab): create one Prolific study per device with the external study URL shown below for "
            f"it, and {code_step}. Approve submissions on Prolific."
        )
    names = ", ".join(
        f"{pool.device} {pool.external_id} ({pool.external_status or 'unknown'})" for pool in pools
    )
    extra = ""
    if campaign.platform == Platform.TOLOKA:
        extra = " Toloka moderates a new project before its pools reach workers."
    elif campaign.platform == Platform.MTURK:
        from django.conf import settings

        extra = " (MTurk sandbox)" if settings.MTURK_SANDBOX else " (MTurk production)"
    return f"Launched on {get_adapter(campaign.platform).name}: {names}.{extra}"


def study_halt(*, study_id: int, close: bool) -> str:
    """The Pause / Close buttons: stop recruiting on the platform (pools closed) when the study was
    launched there, and pause or close the study. Returns what happened in words."""
    launched = PlatformCampaign.objects.filter(study_id=study_id).exists()
    if close:
        if launched:
            study_close_platform(study_id=study_id)
            return "Closed: the platform's pools are closed; submitted work keeps being reviewed and paid."
        study_services.study_close(study_id=study_id)
        return "Closed: no new batches start."
    if launched:
        study_pause_platform(study_id=study_id)
        return "Paused: the platform's pools are closed until you resume."
    study_services.study_pause(study_id=study_id)
    return "Paused: no new batches start until you publish again."


def study_sync_request(*, study_id: int) -> str:
    """The Sync now button: send the platform sync of this study to a worker (it reviews submitted work,
    accepts, rejects and pays; the periodic sync does the same every PLATFORM_SYNC_INTERVAL_S).

    A worker, not the web request, does it: a study with a backlog of submissions needs several platform
    calls each, longer than a web request may take. The page shows the time of the last sync."""
    if not PlatformCampaign.objects.filter(study_id=study_id).exists():
        raise LaunchRefused(f"study {study_id} is not launched on a platform: there is nothing to sync.")
    task_send_after_commit(name=task_names.PLATFORMS_SYNC_STUDY, args=[study_id])
    return (
        "Sync requested: submitted work is being reviewed; the platform status below updates when it is done."
    )


# ------------------------------------------------------------------------------------------------
# manual review of one session


class ReviewRefused(Exception):
    """The review cannot be recorded or sent; the message says why and what to do."""


def session_review_latest(*, session_id: int) -> SessionReview | None:
    """The researcher's decision in force for a session (the latest review), or None."""
    return SessionReview.objects.filter(session_id=session_id).order_by("-reviewed_at", "-id").first()


def session_review(*, session_id: int, decision: str, reason: str, reviewed_by) -> SessionReview:
    """Approve or reject a finished session by hand, recorded with who and when (``SessionReview``).

    ``decision``: ``approve`` | ``reject``; ``reason``: why (required to reject: a platform shows it to the
    worker). On a crowd platform the decision is sent at once through the adapter when the worker's
    submission is known (accept, reject, or a rejected assignment accepted after all); what the platform
    said is kept in ``platform_outcome``; a submission not synced yet gets the decision at the next sync.
    Accepted work cannot be rejected afterwards on any platform: that raises ReviewRefused, as do a
    session still running, an unknown decision and a reject without a reason.

    The review changes payment only; which clicks count stays the validation's decision."""
    if decision not in SessionReview.Decision.values:
        raise ReviewRefused(f"decision {decision!r} is unknown; use approve or reject.")
    reason = (reason or "").strip()
    if decision == SessionReview.Decision.REJECT and not reason:
        raise ReviewRefused("reason: say why the batch is rejected (the worker sees it on the platform).")
    accept = decision == SessionReview.Decision.APPROVE
    with transaction.atomic():
        session = (
            Session.objects.select_for_update(no_key=True, of=("self",))
            .select_related("study")
            .get(pk=session_id)
        )
        if session.status != Session.Status.FINISHED:
            raise ReviewRefused(
                f"session {session.pk} is {session.status}; only a finished batch can be approved or rejected."
            )
        submission = (
            PlatformSubmission.objects.select_for_update(no_key=True, of=("self",))
            .select_related("pool__campaign__study")
            .filter(session=session)
            .first()
        )
        if (
            submission is not None
            and not accept
            and submission.decision == PlatformSubmission.Decision.ACCEPT
            and submission.decision_applied_at is not None
        ):
            raise ReviewRefused(
                f"assignment {submission.external_assignment_id} is already accepted on "
                f"{submission.pool.campaign.platform}; accepted work cannot be rejected. Exclude the worker "
                "instead if you do not want more of their work."
            )
        review = SessionReview.objects.create(
            session=session,
            decision=decision,
            reason=reason or "Approved by the researcher.",
            reviewed_by=reviewed_by,
        )
        already = (
            submission is not None
            and submission.decision_applied_at is not None
            and (
                submission.decision
                == (PlatformSubmission.Decision.ACCEPT if accept else PlatformSubmission.Decision.REJECT)
            )
        )
        if submission is not None and not already:
            _decision_set(submission=submission, study=session.study, accept=accept, comment=review.reason)
            submission.save()
    review.platform_outcome = _review_send(
        session=session, submission=submission, already=already, accept=accept
    )
    SessionReview.objects.filter(pk=review.pk).update(platform_outcome=review.platform_outcome)
    logger.info(
        "session reviewed", extra={"session_id": session.pk, "decision": decision, "review_id": review.pk}
    )
    return review


def _review_send(
    *, session: Session, submission: PlatformSubmission | None, already: bool, accept: bool
) -> str:
    if session.study.platform == Platform.LINK:
        return ""
    if submission is None and session.study.platform == Platform.PROLIFIC:
        return (
            f"Not automated: {'approve' if accept else 'reject'} Prolific submission "
            f"{session.platform_assignment_id} in Prolific's interface."
        )
    if submission is None:
        return "No submission synced yet: the decision is sent when the worker's submission arrives."
    if already:
        return f"Already {submission.decision}ed on {submission.pool.campaign.platform}; nothing sent."
    adapter = get_adapter(submission.pool.campaign.platform)
    try:
        _apply_decision(adapter=adapter, submission=submission)
        if submission.bonus_operation_id and submission.bonus_applied_at is None:
            _apply_bonus(adapter=adapter, submission=submission)
    except PlatformNotSupported as exc:
        PlatformSubmission.objects.filter(pk=submission.pk).update(last_error=str(exc))
        return f"Not automated: {exc}"
    except PlatformError as exc:
        PlatformSubmission.objects.filter(pk=submission.pk).update(
            attempts=submission.attempts + 1, last_error=str(exc)
        )
        return f"Not sent yet ({exc}); the next sync tries again."
    return f"Sent: assignment {submission.external_assignment_id} {submission.decision}ed on {adapter.name}."
