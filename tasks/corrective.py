"""Model updates of corrective-click campaigns on the ``models`` queue (issue 17).

``update_item(item_id, round)`` makes the item's mask after that round through
``collector.services.corrective.corrective_update_apply``. ``acks_late`` + ``reject_on_worker_lost``: a
worker killed mid-update leaves the message to be delivered again and the item keeps its previous mask
until an update is stored (stored once: the service checks the item still waits for this round). Any
failure is retried ``MAX_RETRIES`` times (backoff 1 s, 2 s, ...), then the item is marked failed with the
reason, which the researcher sees on the study page.
"""

from __future__ import annotations

from celery.utils.log import get_task_logger

from tasks import names
from tasks.base import clicklab_task

logger = get_task_logger(__name__)

MAX_RETRIES = 2


@clicklab_task(names.CORRECTIVE_UPDATE_ITEM, bind=True, max_retries=MAX_RETRIES)
def update_item(self, item_id: int, round_number: int) -> dict:
    from collector.services.corrective import (
        corrective_update_apply,
        corrective_update_attempt,
        corrective_update_fail,
    )

    logger.info("corrective update of item %s round %s: started", item_id, round_number)
    corrective_update_attempt(item_id=item_id)
    try:
        result = corrective_update_apply(item_id=item_id, round_number=round_number)
    except Exception as error:  # every failure is retried, then recorded: never silently dropped
        reason = f"{type(error).__name__}: {error}"
        if self.request.retries < MAX_RETRIES:
            logger.warning(
                "corrective update of item %s round %s failed, retrying: %s", item_id, round_number, reason
            )
            raise self.retry(exc=error, countdown=2**self.request.retries) from None
        attempts = self.request.retries + 1
        corrective_update_fail(
            item_id=item_id, round_number=round_number, reason=f"{reason} (after {attempts} attempts)"
        )
        logger.error(
            "corrective update of item %s round %s failed for good: %s", item_id, round_number, reason
        )
        return {"item_id": item_id, "round": round_number, "stored": False, "error": reason}
    logger.info(
        "corrective update of item %s round %s: stored=%s iou=%s",
        item_id,
        round_number,
        result.stored,
        result.iou,
    )
    return {
        "item_id": item_id,
        "round": round_number,
        "stored": result.stored,
        "iou": result.iou,
        "error": "",
    }


@clicklab_task(names.CORRECTIVE_REQUEUE_PENDING_UPDATES)
def requeue_pending_updates() -> int:
    """Beat task: send the update again for items still waiting for one (a lost message, e.g. the
    file-system broker after a killed worker); a duplicate is a no-op. Returns how many were sent."""
    from collector.models import CorrectiveItem

    pending = list(
        CorrectiveItem.objects.filter(state=CorrectiveItem.State.UPDATING).values_list("pk", "round")
    )
    for item_id, round_number in pending:
        update_item.delay(item_id, round_number)
    return len(pending)
