"""The researcher's controls over running sessions (issue 32 item 3, as oTree's session monitor): expire a
session now, block a worker. Releasing a session's unclicked trials is ``collector.services.reservations.
session_release(session=..., by="researcher")``, the same function the grace period uses.

Slot accounting (``collector.services.allocation``'s invariant ``valid + inflight <= quota``): a task trial
of a running session holds one in-flight slot of its target while ``Trial.holds_slot`` is True. A release gives
back the slot of every trial that still holds one and has no click, once (``holds_slot`` turns False in the
same transaction); expiry and validation give back only the slots still held, so no slot is returned twice.
Every function locks the session row first (``FOR NO KEY UPDATE``), then the targets in id order
(``inflight_release``), the order of expiry and validation.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from collector.models import Session, Trial, Worker
from collector.services.allocation import inflight_release

logger = logging.getLogger(__name__)

#: Who ended an expired session (``Session.ended_by``).
ENDED_BY_RESEARCHER = "researcher"
ENDED_BY_TIMEOUT = "timeout"


class MonitorRefused(Exception):
    """The control does not apply to this session or worker now; the message says why and what to do."""


def _slot_trials(session: Session, *, unclicked_only: bool):
    """The task trials of ``session`` still holding a slot (a qualification test and practice or control
    trials never took one), optionally only those without a click."""
    trials = Trial.objects.filter(session=session, role=Trial.Role.TASK, holds_slot=True)
    if session.is_qualification:
        return trials.none()
    if unclicked_only:
        trials = trials.filter(click__isnull=True)
    return trials


def _give_back(session: Session, trials) -> int:
    """Give back the slots of ``trials`` (a queryset of ``session``'s, under the session's lock) and mark
    them; returns how many. Call inside the transaction that locked the session."""
    rows = list(trials.order_by("pk").values_list("pk", "target_id"))
    if not rows:
        return 0
    Trial.objects.filter(pk__in=[pk for pk, _ in rows]).update(holds_slot=False)
    inflight_release(target_ids=[target_id for _, target_id in rows], device=session.device)
    return len(rows)


def _locked_session(session_id: int) -> Session | None:
    return Session.objects.select_for_update(no_key=True, of=("self",)).filter(pk=session_id).first()


def session_expire_locked(
    session: Session, *, by: str = ENDED_BY_RESEARCHER, now: datetime | None = None
) -> int:
    """Expire ``session``, a running session whose row the caller already holds locked (call inside the
    transaction of its ``select_for_update``, status checked there): status expired, ``ended_by = by``,
    ``expires_at`` no later than ``now``, every slot it still holds given back. Returns how many slots came
    back. Takes no lock of the session itself (the targets are locked in id order by ``inflight_release``)."""
    now = now or timezone.now()
    released = _give_back(session, _slot_trials(session, unclicked_only=False))
    session.status = Session.Status.EXPIRED
    session.ended_by = by
    session.expires_at = min(session.expires_at, now)
    session.save(update_fields=["status", "ended_by", "expires_at"])
    logger.info(
        "session expired",
        extra={"session_id": session.pk, "study_id": session.study_id, "slots": released, "by": by},
    )
    return released


def session_expire_now(
    *, session_id: int, by: str = ENDED_BY_RESEARCHER, now: datetime | None = None
) -> Session:
    """End the running session ``session_id`` now, as ``sessions_expire`` does at its timeout: lock it, then
    :func:`session_expire_locked`. Raises MonitorRefused when the session is gone or no longer running
    (finished sessions are validated; an expired one is already ended)."""
    with transaction.atomic():
        session = _locked_session(session_id)
        if session is None:
            raise MonitorRefused(f"session {session_id} does not exist any more.")
        if session.status != Session.Status.STARTED:
            raise MonitorRefused(
                f"session {session_id} is {session.status}, not running: only a running session can be expired."
            )
        session_expire_locked(session, by=by, now=now)
    return session


def worker_block(*, worker_id: int, reason: str, by: str, study_id: int | None = None) -> list[int]:
    """Block worker ``worker_id`` (``Worker.excluded``): no new batch in any study (``session_start`` refuses
    with a message), and their running sessions (of ``study_id`` when given, else of every study) expired now
    with their slots given back. ``reason`` and ``by`` (the researcher's name) go into ``Worker.notes`` with
    the time. Returns the ids of the sessions expired. Raises MonitorRefused for an empty reason or an unknown
    worker."""
    reason = reason.strip()
    if not reason:
        raise MonitorRefused(
            "say why the worker is blocked (the reason field is empty); it goes into their notes."
        )
    now = timezone.now()
    with transaction.atomic():
        worker = Worker.objects.select_for_update(no_key=True).filter(pk=worker_id).first()
        if worker is None:
            raise MonitorRefused(f"worker {worker_id} does not exist.")
        line = f"{now:%Y-%m-%d %H:%M} UTC blocked by {by}: {reason}"
        worker.notes = f"{worker.notes}\n{line}" if worker.notes else line
        worker.excluded = True
        worker.save(update_fields=["notes", "excluded"])
        running = Session.objects.filter(worker=worker, status=Session.Status.STARTED)
        if study_id is not None:
            running = running.filter(study_id=study_id)
        expired = [
            session_expire_now(session_id=pk, by=ENDED_BY_RESEARCHER, now=now).pk
            for pk in running.order_by("pk").values_list("pk", flat=True)
        ]
    logger.info("worker blocked", extra={"worker_id": worker_id, "session_ids": expired, "by": by})
    return expired
