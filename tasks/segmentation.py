"""The next-round build on the ``models`` queue (sent by the round-closing code, by name, after commit)."""

from __future__ import annotations

from celery.utils.log import get_task_logger
from django.db import OperationalError

from tasks import names
from tasks.base import clicklab_task

logger = get_task_logger(__name__)


@clicklab_task(
    names.SEGMENTATION_BUILD_NEXT_ROUND,
    autoretry_for=(OperationalError, OSError),
    retry_backoff=True,
    retry_backoff_max=300,
    max_retries=5,
)
def build_next_round(round_id: int) -> dict:
    """Build round N+1 from round ``round_id`` via ``collector.services.next_round.round_build_next``.

    All-or-nothing and idempotent (round N+1 is created in one transaction, guarded by the study row
    lock), so a message redelivered after a worker crash builds the round exactly once. Logs one progress
    line per instance. Retries database and file-system errors (transient); a segmenter that cannot run
    (missing checkpoint or package, failing upstream code) is recorded on the round by the service and
    shown to the researcher, who retries once it is fixed. Returns {"round_id": id of round N+1 or None,
    "created": bool, "targets": count, "skipped": {instance id: reason}, "error": why it failed or ""}.
    """
    # Imported here: this module is imported while the Celery app loads, before Django's apps are ready.
    from collector.services.next_round import round_build_next

    def progress(done: int, total: int, instance) -> None:
        logger.info("next-round build of round %s: instance %s/%s done (%s)", round_id, done, total, instance)

    logger.info("next-round build of round %s: started", round_id)
    result = round_build_next(round_id=round_id, progress=progress)
    new_round = result.round
    return {
        "round_id": new_round.pk if new_round is not None else None,
        "created": result.created,
        "targets": new_round.targets.count() if new_round is not None else 0,
        "skipped": {str(k): v for k, v in result.skipped.items()},
        "error": result.error,
    }


@clicklab_task(names.SEGMENTATION_REQUEUE_PENDING_BUILDS)
def requeue_pending_builds() -> int:
    """Beat task: send the build again for closed rounds whose next round is missing (a lost message);
    returns how many were sent. Harmless when a build is running: the guard makes the second a no-op."""
    from collector.services.next_round import rounds_awaiting_build

    pending = rounds_awaiting_build()
    for round_id in pending:
        build_next_round.delay(round_id)
    return len(pending)
