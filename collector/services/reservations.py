"""Reservations that follow the worker (issue 32 item 2): a batch's unclicked trials hold their targets'
in-flight slots only while the worker's player is heard from.

Lifecycle of a task trial's slot (``Trial.holds_slot``; docs/architecture.md, "Reservation lifecycle"):

* taken by ``allocate_targets`` when the session starts (``holds_slot`` True, ``inflight_<device>`` + 1);
* given back exactly once, by whichever comes first of: validation of the finished session, expiry of the
  session (``sessions_expire``), or a release (``session_release``: the session was not heard from for
  ``Study.reservation_grace_s``, or a researcher released it). Every path gives back only the trials that
  still hold a slot and sets ``holds_slot`` False in the same transaction;
* a release gives back only *unclicked* trials; when the worker comes back (a heartbeat, the state request,
  the player page), ``session_reclaim`` re-reserves each released trial's target if it is still wanted, or
  replaces it by another wanted target of an image the worker has not seen, or drops it from the batch,
  under the locks of allocation (worker, round, targets in id order): never a slot beyond the quota.

A player whose page goes away (``pagehide``: the tab closed, a navigation) says so with a beacon
(``session_heartbeat(visibility="gone")`` sets ``Session.left_at``): if nothing is heard from it since, the
batch is released ``settings.LEAVE_GRACE_S`` after the signal (at the next release run) instead of a grace
period after the last sign of life. A reload is heard from again within that time, so it keeps its batch.

"Heard from" is the latest of ``Session.last_seen_at`` (heartbeats, visibility events and client reports:
``session_heard``), the session's start, its clicks' arrival and its trials' presentation reports (the click
and presented paths write no session row: ``sessions_release_stale`` reads those instead).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Max
from django.utils import timezone

from collector.models import Click, Round, Session, Study, Target, Trial, Worker
from collector.services.allocation import inflight_release, row_lock, target_candidates

logger = logging.getLogger(__name__)

RELEASED_BY = ("grace", "researcher")
#: How often the player sends a heartbeat (s): below the smallest grace period (30 s, ``Study``'s validator),
#: so one lost heartbeat never releases a batch whose page is open.
HEARTBEAT_S = 20


def _releasable_trials(session_id: int):
    """The session's task trials that still hold a slot and have no click (what a release gives back)."""
    return Trial.objects.filter(
        session_id=session_id, role=Trial.Role.TASK, holds_slot=True, click__isnull=True
    ).exclude(session__is_qualification=True)


def session_heard(*, session_id: int, now: datetime | None = None) -> None:
    """Record that the worker's player was heard from (``Session.last_seen_at`` = now): one UPDATE, no lock
    wait beyond the row's own."""
    Session.objects.filter(pk=session_id).update(last_seen_at=now or timezone.now())


def session_release(*, session: Session, now: datetime | None = None, by: str = "grace") -> int:
    """Give back the in-flight slots of ``session``'s unclicked task trials; returns how many were given back
    (0 when the session is not running or holds none: a second release changes nothing).

    ``by``: ``"grace"`` (the worker was not heard from for the study's grace period) or ``"researcher"`` (the
    study page's control). The session keeps running: its clicked trials stay, and the worker who comes back
    continues (``session_reclaim``). One transaction: the session row locked (so a validation or expiry of
    the same session waits or has already released), then the targets in id order (``inflight_release``).
    """
    if by not in RELEASED_BY:
        raise ValueError(f"by={by!r} is not a release reason; use one of {', '.join(RELEASED_BY)}.")
    now = now or timezone.now()
    with transaction.atomic():
        locked = Session.objects.select_for_update(no_key=True).filter(pk=session.pk).first()
        if locked is None or locked.status != Session.Status.STARTED or locked.is_qualification:
            return 0
        released = _release_locked(session=locked, now=now)
    if released:
        session.released_at = now
        logger.info(
            "session released",
            extra={"session_id": session.pk, "study_id": session.study_id, "by": by, "trials": released},
        )
    return released


def _release_locked(*, session: Session, now: datetime) -> int:
    """``session_release``'s work, the session row locked by the caller."""
    trials = list(_releasable_trials(session.pk).order_by("target_id").values_list("pk", "target_id"))
    if not trials:
        return 0
    Trial.objects.filter(pk__in=[pk for pk, _ in trials]).update(holds_slot=False)
    inflight_release(target_ids=[target_id for _, target_id in trials], device=session.device)
    Session.objects.filter(pk=session.pk).update(released_at=now)
    session.released_at = now
    return len(trials)


def _heard_at(session: Session) -> datetime:
    """The last time the session's worker was heard from (see the module docstring): its start, its last
    heartbeat or report, its last click's arrival, its last presentation report (the click and presented
    paths write no session row; they are read here, for the few candidates of a release only)."""
    last_click = Click.objects.filter(trial__session_id=session.pk).aggregate(at=Max("received_at"))["at"]
    moments = [moment for moment in (session.started_at, session.last_seen_at, last_click) if moment]
    for shown in Trial.objects.filter(session_id=session.pk).values_list("presentations", flat=True):
        for entry in shown or []:
            try:
                moments.append(datetime.fromisoformat(entry["at"]))
            except (KeyError, TypeError, ValueError):
                continue
    return max(moments)


def sessions_release_stale(*, now: datetime | None = None, batch_size: int = 200) -> int:
    """Release every running session not heard from for its study's ``reservation_grace_s`` that still holds
    slots of unclicked trials, and expire those released at least one more grace period ago and still not heard
    from (``_expire_abandoned``); returns how many sessions were released or expired. Each candidate is locked (SKIP
    LOCKED: a session busy finishing or being validated is left to that path) and re-checked under the lock,
    so a heartbeat that arrived meanwhile keeps the batch. The beat task ``tasks.sessions.release_stale``
    runs it every ``RELEASE_STALE_EVERY_S``."""
    now = now or timezone.now()
    released = 0
    studies = (
        Study.objects.filter(sessions__status=Session.Status.STARTED)
        .exclude(kind="corrective")
        .distinct()
        .values_list("pk", "reservation_grace_s")
    )
    for study_id, grace_s in studies:
        cutoff = now - timedelta(seconds=grace_s)
        released += _release_silent(study_id=study_id, cutoff=cutoff, now=now, limit=batch_size * 10)
        released += _expire_abandoned(
            study_id=study_id,
            released_by=cutoff,
            heard_by=cutoff,
            silent_since=cutoff - (now - cutoff),
            now=now,
        )
    return released


def sessions_release_on_demand(*, study: Study, device: str, now: datetime | None = None) -> int:
    """A worker of ``study`` on ``device`` is about to be told the remaining images are in other workers'
    batches: recycle what those workers abandoned now, not at the next release run. A batch not heard from for
    the study's grace period gives its unclicked images back, and is expired at once, its clicked trials'
    slots with it (when nobody waits, the beat gives a released batch one more grace period before it expires
    it). A worker who comes back after that gets a new batch. Returns how many sessions were released or
    expired; 0 at once when ``settings.RELEASE_ON_DEMAND`` is off or the study is corrective.

    The grace period is kept as it is: a waiting worker never takes the images of a batch heard from within
    it (measured with bench/bench_crowd_abandonment.py, releasing sooner took live batches under load and cut
    the tail into more, shorter batches)."""
    if not settings.RELEASE_ON_DEMAND or study.kind == "corrective":
        return 0
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=study.reservation_grace_s)
    count = _release_silent(study_id=study.pk, cutoff=cutoff, now=now, limit=200, device=device)
    count += _expire_abandoned(
        study_id=study.pk, released_by=now, heard_by=cutoff, silent_since=cutoff, now=now, device=device
    )
    if count:
        logger.info("released on demand", extra={"study_id": study.pk, "device": device, "sessions": count})
    return count


def _release_silent(*, study_id: int, cutoff: datetime, now: datetime, limit: int, device: str = "") -> int:
    """Release the study's running sessions (of ``device``, if given) not heard from since ``cutoff``, or
    whose page said it was going away at least ``LEAVE_GRACE_S`` ago with nothing heard since, that still hold
    slots of unclicked trials; returns how many were released."""
    released = 0
    leave_cutoff = now - timedelta(seconds=settings.LEAVE_GRACE_S)
    holding = Trial.objects.filter(role=Trial.Role.TASK, holds_slot=True, click__isnull=True)
    running = Session.objects.filter(
        study_id=study_id,
        status=Session.Status.STARTED,
        is_qualification=False,
        pk__in=holding.values("session_id"),
    )
    if device:
        running = running.filter(device=device)
    # Cheap pre-filters: neither a heartbeat nor the start since the cutoff (clicks are checked below), or
    # a page that said it was going away at least LEAVE_GRACE_S ago.
    silent = running.filter(started_at__lte=cutoff).exclude(last_seen_at__gt=cutoff)
    gone = running.filter(left_at__lte=leave_cutoff)
    for session_id in _candidate_ids(silent, gone, limit=limit):
        with transaction.atomic():
            session = _lock_running(session_id)
            if session is None:
                continue
            heard = _heard_at(session)
            left = (
                session.left_at is not None and session.left_at <= leave_cutoff and heard <= session.left_at
            )
            if heard > cutoff and not left:
                continue
            count = _release_locked(session=session, now=now)
        if count:
            released += 1
            logger.info(
                "session released",
                extra={
                    "session_id": session_id,
                    "study_id": study_id,
                    "by": "left" if left else "grace",
                    "trials": count,
                },
            )
    return released


def _lock_running(session_id: int) -> Session | None:
    """The session's row locked (SKIP LOCKED: one busy finishing or being validated is left to that path), or
    None when it is locked elsewhere, gone or no longer running."""
    session = Session.objects.select_for_update(no_key=True, skip_locked=True).filter(pk=session_id).first()
    return session if session is not None and session.status == Session.Status.STARTED else None


def _candidate_ids(*querysets, limit: int) -> list[int]:
    """The session ids of ``querysets`` (pre-filters of a release or expiry pass), at most ``limit`` from
    each, in id order (the order the rows are then locked in)."""
    ids: set[int] = set()
    for queryset in querysets:
        ids.update(queryset.order_by("pk").values_list("pk", flat=True)[:limit])
    return sorted(ids)


def _expire_abandoned(
    *,
    study_id: int,
    released_by: datetime,
    heard_by: datetime,
    silent_since: datetime,
    now: datetime,
    device: str = "",
) -> int:
    """Expire the study's running sessions (of ``device``, if given) released by ``released_by`` and not heard
    from since ``heard_by`` (the beat: both a grace period ago), and those never released but not heard from
    since ``silent_since`` (the beat: two grace periods ago; a batch with nothing to release: every task trial
    clicked, the rest fillers, practice or control trials): their workers left for good, so the slots their
    clicked trials still hold come back too (``collector.services.monitor.session_expire_locked`` on the row
    locked here, one lock, ``ended_by`` "grace") instead of waiting for the session timeout. Their clicks stay
    stored (an expired batch is not counted). A worker who comes back later gets a new batch. Returns how many
    expired."""
    from collector.services.monitor import session_expire_locked  # monitor imports allocation only

    expired = 0
    running = Session.objects.filter(study_id=study_id, status=Session.Status.STARTED, is_qualification=False)
    if device:
        running = running.filter(device=device)
    released = running.filter(released_at__lte=released_by).exclude(last_seen_at__gt=heard_by)
    silent = running.filter(released_at__isnull=True, started_at__lte=silent_since).exclude(
        last_seen_at__gt=silent_since
    )
    candidates = _candidate_ids(released, silent, limit=2000)
    for session_id in candidates:
        with transaction.atomic():
            session = _lock_running(session_id)
            if session is None:
                continue
            heard = _heard_at(session)
            if session.released_at is None:
                if heard > silent_since or _releasable_trials(session.pk).exists():
                    continue  # heard from, or the release comes first (next run)
            elif session.released_at > released_by or heard > heard_by:
                continue
            session_expire_locked(session, by="grace", now=now)
        expired += 1
        logger.info("abandoned session expired", extra={"session_id": session_id, "study_id": study_id})
    return expired


def session_reclaim(*, session_id: int, now: datetime | None = None) -> dict | None:
    """The worker of a released session is back: give its released unclicked task trials slots again.

    For each such trial, in position order: its target again if still wanted (``valid + inflight < quota``);
    otherwise another wanted target of an image the worker has not seen in the study (the allocation's
    choice rule, ``target_candidates``); otherwise the trial is dropped from the batch. A trial that gets a
    slot again is shown afresh (its presentations and server flags cleared: the worker replays it from phase
    A and the click counts normally; a tab hidden *while the trial ran* is still flagged by the player).
    If nothing is left of the batch, the session expires (``ended_by`` "grace").

    Returns None when there was nothing to reclaim (the common case: one indexed query), else
    ``{"kept": [...], "replaced": [...], "dropped": [...]}`` (positions). Locks as ``allocate_targets``:
    the worker's row, the round's row, then the targets in id order.
    """
    if not Trial.objects.filter(
        session_id=session_id, role=Trial.Role.TASK, holds_slot=False, click__isnull=True
    ).exists():
        return None
    now = now or timezone.now()
    with transaction.atomic():
        head = Session.objects.filter(pk=session_id).values("worker_id", "round_id").first()
        if head is None:
            return None
        row_lock(Worker, head["worker_id"])
        session = (
            Session.objects.select_for_update(no_key=True, of=("self",))
            .select_related("study", "round")
            .get(pk=session_id)
        )
        if session.status != Session.Status.STARTED or session.expires_at <= now:
            return None
        released = list(
            Trial.objects.filter(session=session, role=Trial.Role.TASK, holds_slot=False, click__isnull=True)
            .select_related("target")
            .order_by("position")
        )
        if not released:
            return None
        round_open = row_lock(Round, session.round_id, "state") == Round.State.OPEN
        kept, replaced, dropped = _reclaim_plan(session=session, released=released, round_open=round_open)
        _reclaim_apply(session=session, kept=kept, replaced=replaced, dropped=dropped, now=now)
    answer = {
        "kept": [trial.position for trial in kept],
        "replaced": [trial.position for trial, _ in replaced],
        "dropped": [trial.position for trial in dropped],
    }
    logger.info(
        "session reclaimed",
        extra={"session_id": session_id, "study_id": session.study_id, **answer},
    )
    return answer


def _reclaim_plan(
    *, session: Session, released: list[Trial], round_open: bool
) -> tuple[list[Trial], list[tuple[Trial, int]], list[Trial]]:
    """Under the worker's and the round's locks: which released trials keep their target, which get another
    (trial, target id), which are dropped. Counters are read under the round's lock: starts and validations
    wait for it; expiry and releases only lower ``inflight``, so what is read can only become more available
    before commit."""
    if not round_open:
        return [], [], list(released)
    device = session.device
    quota = session.study.quota_for(device)
    counters = dict(
        (pk, valid + inflight)
        for pk, valid, inflight in Target.objects.filter(pk__in={t.target_id for t in released}).values_list(
            "pk", f"valid_{device}", f"inflight_{device}"
        )
    )
    kept = [trial for trial in released if counters[trial.target_id] < quota]
    lacking = [trial for trial in released if counters[trial.target_id] >= quota]
    replacements: list[int] = []
    if lacking:
        seen_images = Trial.objects.filter(
            session__study_id=session.study_id, session__worker_id=session.worker_id
        ).values("target__instance__image_id")
        replacements = target_candidates(
            round=session.round, device=device, count=len(lacking), seen_images=seen_images
        )
    replaced = list(zip(lacking, replacements, strict=False))
    return kept, replaced, lacking[len(replaced) :]


def _reclaim_apply(
    *, session: Session, kept: list[Trial], replaced: list[tuple[Trial, int]], dropped: list[Trial], now
) -> None:
    """Take one slot per kept or replacing target (locked in id order, like allocation, expiry and
    validation: no lock cycle), show those trials afresh, delete the dropped ones."""
    inflight_field = f"inflight_{session.device}"
    taken = [trial.target_id for trial in kept] + [target_id for _, target_id in replaced]
    if taken:
        list(
            Target.objects.select_for_update(no_key=True)
            .filter(pk__in=set(taken))
            .order_by("pk")
            .values_list("pk")
        )
        Target.objects.filter(pk__in=taken).update(**{inflight_field: F(inflight_field) + 1})
    fresh = {"holds_slot": True, "presentations": [], "flags": []}
    if kept:
        Trial.objects.filter(pk__in=[trial.pk for trial in kept]).update(**fresh)
    for trial, target_id in replaced:
        Trial.objects.filter(pk=trial.pk).update(target_id=target_id, **fresh)
    if dropped:
        Trial.objects.filter(pk__in=[trial.pk for trial in dropped]).delete()
    fields: dict = {"last_seen_at": now}
    if not Trial.objects.filter(session=session, role=Trial.Role.TASK).exists():
        fields.update(status=Session.Status.EXPIRED, ended_by="grace")
    Session.objects.filter(pk=session.pk).update(**fields)


def session_heartbeat(
    *, session_id: int, visibility: str = "visible", page: int | None = None, now: datetime | None = None
) -> dict:
    """The player of ``session_id`` is open (``visibility``: "visible" or "hidden", logged only: a hidden page
    still counts as heard from). Records it, re-reserves a released batch (``session_reclaim``) and answers
    ``{"status", "reclaimed", "kept", "replaced", "dropped"}``. Raises Session.DoesNotExist.

    ``visibility`` "gone": the page is going away (the player's pagehide beacon). Not a sign of life: it sets
    ``Session.left_at`` only, so the batch is released ``settings.LEAVE_GRACE_S`` later unless the worker is
    heard from again by then (a reload is). ``page``: the page the beacon came from (``session_page_served``'s
    number, in the player's payload). A beacon of an earlier page is ignored: a reload's beacon may be handled
    after the new page was served, and must not mark the open page as gone. Without ``page`` the beacon counts."""
    now = now or timezone.now()
    if visibility == "gone":
        sessions = Session.objects.filter(pk=session_id)
        if not (sessions if page is None else sessions.filter(page_loads=page)).update(left_at=now):
            if not sessions.exists():
                raise Session.DoesNotExist(f"session {session_id} does not exist.")
            logger.info("stale page beacon ignored", extra={"session_id": session_id, "page": page})
        else:
            logger.info("player left", extra={"session_id": session_id})
        status = Session.objects.filter(pk=session_id).values_list("status", flat=True).first()
        return {"status": status, "reclaimed": False, "kept": [], "replaced": [], "dropped": []}
    sessions = Session.objects.filter(pk=session_id)
    if visibility == "hidden":
        # A closing tab sends both its hidden heartbeat (visibilitychange) and its beacon, and the server may
        # get them in either order: a hidden heartbeat after the page's own going-away signal is no sign of
        # life. A page hidden without going away (another app in front) has no left_at and counts.
        if not sessions.filter(left_at__isnull=True).update(last_seen_at=now):
            if not sessions.exists():
                raise Session.DoesNotExist(f"session {session_id} does not exist.")
            logger.info("hidden heartbeat after the beacon ignored", extra={"session_id": session_id})
            status = sessions.values_list("status", flat=True).first()
            return {"status": status, "reclaimed": False, "kept": [], "replaced": [], "dropped": []}
    elif not sessions.update(last_seen_at=now, left_at=None):  # visible: the page is back (a bfcache return)
        raise Session.DoesNotExist(f"session {session_id} does not exist.")
    reclaimed = session_reclaim(session_id=session_id, now=now)
    status = Session.objects.filter(pk=session_id).values_list("status", flat=True).first()
    if visibility == "hidden":
        logger.info("player hidden", extra={"session_id": session_id})
    return {
        "status": status,
        "reclaimed": reclaimed is not None,
        **(reclaimed or {"kept": [], "replaced": [], "dropped": []}),
    }


def session_return(*, session_id: int, now: datetime | None = None) -> dict | None:
    """The player page of ``session_id`` is loaded: a worker who left and came back continues cleanly.

    After a release, ``session_reclaim`` re-reserves the batch (its answer is returned). Without one, a page
    not heard from for at least ``settings.RETURN_AFTER_S`` (default 30 s: longer than a heartbeat interval,
    so a page that stayed open never qualifies, and a reload to look at a target again seconds later does not
    either) was left: the trial it showed without a click is shown afresh, its earlier showings cleared, so
    the replay from phase A is not flagged ``replayed`` and its click counts normally. A tab hidden while a
    trial ran is still flagged by the player (``visibility_hidden``) for a worker who did not leave.

    The page load itself is heard from (``last_seen_at``), so the beacon its previous page sent on the way out
    (a reload) releases nothing."""
    reclaimed = session_reclaim(session_id=session_id, now=now)
    if reclaimed is not None:
        return reclaimed
    now = now or timezone.now()
    session = Session.objects.filter(pk=session_id, status=Session.Status.STARTED).first()
    if session is None:
        return None
    if _heard_at(session) <= now - timedelta(seconds=settings.RETURN_AFTER_S):
        shown = Trial.objects.filter(session_id=session_id, role=Trial.Role.TASK, click__isnull=True).exclude(
            presentations=[]
        )
        if shown.update(presentations=[], flags=[]):
            logger.info("worker returned", extra={"session_id": session_id, "study_id": session.study_id})
    # The page served is a sign of life: a reload after the pagehide beacon keeps its batch.
    session_heard(session_id=session_id, now=now)
    return None


def session_page_served(*, session_id: int, now: datetime | None = None) -> int:
    """The player page of ``session_id`` is being served: count it (``Session.page_loads``), clear the
    previous page's going-away signal and mark the session heard from, in one UPDATE. Returns the new page's
    number, which its pagehide beacon sends back (``session_heartbeat``). Whatever order the previous page's
    beacon and this UPDATE take on the row, the open page is not taken for gone: before, its ``left_at`` is
    cleared here; after, it names a page that is no longer the latest and is ignored."""
    now = now or timezone.now()
    with transaction.atomic():
        Session.objects.filter(pk=session_id).update(
            page_loads=F("page_loads") + 1, left_at=None, last_seen_at=now
        )
        return Session.objects.filter(pk=session_id).values_list("page_loads", flat=True).first() or 0


def study_wait_hint_s(*, study: Study) -> int:
    """How long a worker told "try again later" should wait, in seconds: the grace period plus the release
    task's interval (when an abandoned batch's images come back at the latest)."""
    return int(study.reservation_grace_s + settings.RELEASE_STALE_EVERY_S)
