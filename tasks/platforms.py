"""Platform sync: the beat job that reviews submitted work on every running campaign.

``sync_open_campaigns`` (beat, every ``PLATFORM_SYNC_INTERVAL_S``) sends one ``sync_study`` per campaign
that is open, paused, or closed with reviews still owed. ``sync_study`` calls
``collector.services.launch.study_sync``; it retries when the platform is unavailable and gives up
(logging the readable error) on bad credentials, which only a researcher can fix.
"""

from __future__ import annotations

import logging

from django.db.models import Q

from collector.models import PlatformCampaign, PlatformSubmission
from collector.platforms import PlatformCredentialsError, PlatformUnavailable
from collector.services.launch import study_sync
from collector.services.qualification import qualification_platform_send
from tasks import names
from tasks.base import clicklab_task

logger = logging.getLogger(__name__)


@clicklab_task(names.PLATFORMS_SYNC_OPEN_CAMPAIGNS)
def sync_open_campaigns() -> int:
    """Send ``sync_study`` for each campaign that may have work to review; returns how many."""
    owed = PlatformSubmission.objects.filter(
        Q(decision_applied_at__isnull=True) | Q(worker_marked_at__isnull=True)
    ).values("pool__campaign_id")
    campaigns = PlatformCampaign.objects.filter(
        Q(state__in=[PlatformCampaign.State.OPEN, PlatformCampaign.State.PAUSED]) | Q(pk__in=owed)
    ).values_list("study_id", flat=True)
    study_ids = sorted(set(campaigns))
    for study_id in study_ids:
        sync_study.delay(study_id)
    return len(study_ids)


@clicklab_task(names.PLATFORMS_SYNC_STUDY, bind=True, max_retries=5, default_retry_delay=60)
def sync_study(self, study_id: int) -> None:
    if not PlatformCampaign.objects.filter(study_id=study_id).exists():
        return
    try:
        report = study_sync(study_id=study_id)
    except PlatformCredentialsError as exc:
        logger.error("platform sync refused: %s", exc, extra={"study_id": study_id})
        return
    except PlatformUnavailable as exc:
        raise self.retry(exc=exc) from None
    if report["failed"]:
        logger.warning("platform sync left %s submission(s) for the next run", report["failed"],
                       extra={"study_id": study_id})  # fmt: skip


@clicklab_task(names.PLATFORMS_QUALIFICATION_SEND, bind=True, max_retries=5, default_retry_delay=60)
def qualification_send(self, qualification_id: int) -> bool:
    """Set the worker's qualification skill on the platform (corrective campaigns, issue 17); retried while
    the platform is unavailable, given up (logged, the reason kept on the row) on credentials or a refusal."""
    from collector.models import CorrectiveQualification
    from collector.platforms import PlatformError

    try:
        return qualification_platform_send(qualification_id=qualification_id)
    except PlatformUnavailable as exc:
        raise self.retry(exc=exc) from None
    except PlatformError as exc:
        logger.error("qualification skill not set: %s", exc, extra={"qualification_id": qualification_id})
        CorrectiveQualification.objects.filter(pk=qualification_id).update(platform_error=str(exc)[:2000])
        return False
