"""Rounds: closing a round whose targets all met their quotas, and handing over to the next round's build."""

from __future__ import annotations

import logging

from django.db.models import Q
from django.utils import timezone

from collector.models import Round, Target
from collector.services.outbox import task_intent_add
from tasks import names as task_names

logger = logging.getLogger(__name__)


def round_is_full(*, round: Round) -> bool:
    """True when every target of ``round`` has ``valid_pc >= quota_pc`` and ``valid_mobile >= quota_mobile``
    (a round without targets is full)."""
    study = round.study
    return (
        not Target.objects.filter(round=round)
        .filter(Q(valid_pc__lt=study.quota_pc) | Q(valid_mobile__lt=study.quota_mobile))
        .exists()
    )


def round_close_if_full(*, round_id: int) -> Round | None:
    """Close the round when it is open and full; returns it when this call closed it, else None.

    Call inside ``transaction.atomic()`` after the counters changed; the round row is locked here (callers
    that lock it earlier, like ``session_validate``, already hold it), so of two concurrent validations the
    later one sees the earlier one's counters and exactly one of them closes the round. When the study
    allows another round (``round.number < study.max_rounds``) the build of the next round is sent after
    commit, by name, with args ``[round_id]``.
    """
    round_ = (
        Round.objects.select_for_update(no_key=True, of=("self",))
        .select_related("study")
        .filter(pk=round_id)
        .first()
    )
    if round_ is None or round_.state != Round.State.OPEN or not round_is_full(round=round_):
        return None
    round_.state = Round.State.CLOSED
    round_.closed_at = timezone.now()
    round_.save(update_fields=["state", "closed_at"])
    logger.info("round closed", extra={"round_id": round_.pk, "study_id": round_.study_id})
    if round_.number < round_.study.max_rounds:
        task_intent_add(name=task_names.SEGMENTATION_BUILD_NEXT_ROUND, args=[round_id])
    return round_
