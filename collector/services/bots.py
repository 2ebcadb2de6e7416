"""Simulated annotators: a test run of a draft study before launch (issue 32 item 4), as oTree's bots.

A run plays N batches through the real player protocol over HTTP (``collector.services.bot_player``): each bot
opens the run's entry link (``tokens.bot_link_token_make``, a study link that names the run) as a worker opens
a study link, reads the player page's payload and the ``state``, loads each trial's picture, reports it
``presented``, waits the study's phases, clicks and ``finish``es; PC bots send a desktop browser's user agent
and mouse clicks, phone bots a phone's and touches; a share of them leave mid-batch (they stop and never
finish, as a closed tab does, holding the slots of their unclicked images until a release or the timeout).

Their data is flagged: the session ``is_bot``, the worker on the platform ``bot``. A draft accepts those
batches and only those (``session_start``). They take and give back in-flight slots as every batch does, so
the run exercises the allocation, and the real Celery validation judges them; but a bot's counted batch adds
nothing to a quota (``session_validate``), and no export, next round, progress table or worker table reads
them. The study page shows them apart, "simulated", with their verdicts (``bot_summary``), and one button
removes them (``bots_remove``). Publishing expires the bots still running (``bots_end_running``), so real
workers find every slot free.

Where bots click: a bot is not shown the ground truth (the player never is); the run, which is the server's
own code, picks each click from the trial's target region (``bot_aim``): most deep inside, some near the
border within the click radius (valid but not inside: the ``inside`` batch rule tells these apart), some
far outside, so the verdicts show how the study's rule judges a plausible crowd.
"""

from __future__ import annotations

import logging
import math
import random
import uuid
from dataclasses import dataclass

import numpy as np
from django.db import transaction
from django.db.models import Count
from scipy import ndimage

from collector.models import DEVICES, Click, Session, Study, TaskIntent, Trial, Worker
from collector.selectors.progress import session_counts
from collector.services.monitor import MonitorRefused, session_expire_now
from collector.services.outbox import task_intent_add
from collector.services.workers import worker_create
from tasks import names as task_names

logger = logging.getLogger(__name__)

BOT_PLATFORM = "bot"
#: At most this many bots in one run (a test run, not a load test: bench/ has those).
MAX_BOTS = 200


class BotRunRefused(ValueError):
    """The run cannot start; the message names the setting at fault and what to do."""


def bot_worker_create(*, run: str) -> Worker:
    """A worker of its own for one bot of run ``run`` (platform ``bot``, a random id)."""
    return worker_create(platform=BOT_PLATFORM, external_id=f"bot-{run}-{uuid.uuid4().hex[:12]}")


def bot_run_check(*, study: Study, bots: int, phone_share: float, leave_share: float) -> None:
    """Raise BotRunRefused unless ``study`` is a draft timed study and the shares and count are in range."""
    if study.state != Study.State.DRAFT:
        raise BotRunRefused(
            f"study {study.pk} is {study.state}: simulated annotators run on a draft only (test before you "
            "publish; remove their data, then publish)."
        )
    if study.is_corrective:
        raise BotRunRefused(
            f"study {study.pk} is a corrective campaign: its simulated annotators are `manage.py "
            "simulate_corrective`."
        )
    if not 1 <= bots <= MAX_BOTS:
        raise BotRunRefused(f"bots={bots}: run between 1 and {MAX_BOTS} simulated annotators.")
    for name, value in (("phone_share", phone_share), ("leave_share", leave_share)):
        if not (0.0 <= value <= 1.0) or math.isnan(value):
            raise BotRunRefused(f"{name}={value}: a share between 0 and 1.")


def bot_run_request(*, study: Study, bots: int, phone_share: float = 0.5, leave_share: float = 0.2) -> str:
    """Ask a Celery worker to run ``bots`` simulated annotators on ``study`` against the server's own
    ``PUBLIC_BASE_URL`` (``tasks.bots.run_bots``, through the outbox); returns the run's id."""
    bot_run_check(study=study, bots=bots, phone_share=phone_share, leave_share=leave_share)
    run = uuid.uuid4().hex[:8]
    with transaction.atomic():
        task_intent_add(name=task_names.BOTS_RUN_BOTS, args=[study.pk, bots, phone_share, leave_share, run])
    logger.info("bot run requested", extra={"study_id": study.pk, "bots": bots, "run": run})
    return run


@dataclass(frozen=True)
class BotAim:
    """Where a bot clicks a trial's image (canonical px) and what kind of click it means to be."""

    x: float
    y: float
    kind: str  # "inside" | "border" (within the radius, outside the region) | "outside"


def bot_aim(*, session_id: int, position: int, rng: random.Random) -> BotAim:
    """A click for trial ``position`` of bot session ``session_id``: 75 % deep inside the target region, 15 %
    just outside its border (within half the click radius: valid, not inside), 10 % far from it."""
    from collector.services.validation import target_region

    trial = Trial.objects.select_related("target__instance__image", "session__study").get(
        session_id=session_id, position=position, session__is_bot=True
    )
    region, _ignore = target_region(target=trial.target)
    image = trial.target.instance.image
    radius_px = trial.session.study.radius_fraction * image.diagonal_px
    draw = rng.random()
    if draw < 0.75 and region.any():
        depth = ndimage.distance_transform_edt(region)
        rows, cols = np.nonzero(depth >= max(1.0, 0.5 * float(depth.max())))
        pick = rng.randrange(len(rows))
        return BotAim(x=cols[pick] + 0.5, y=rows[pick] + 0.5, kind="inside")
    if draw < 0.9 and region.any():
        outside = ndimage.distance_transform_edt(~region)
        ring = (outside >= 1.0) & (outside <= max(1.0, 0.5 * radius_px))
        rows, cols = np.nonzero(ring)
        if len(rows):
            pick = rng.randrange(len(rows))
            return BotAim(x=cols[pick] + 0.5, y=rows[pick] + 0.5, kind="border")
    outside = ndimage.distance_transform_edt(~region) if region.any() else np.full(region.shape, np.inf)
    rows, cols = np.nonzero(outside > 2 * radius_px)
    if not len(rows):
        return BotAim(x=0.5, y=0.5, kind="outside")
    pick = rng.randrange(len(rows))
    return BotAim(x=cols[pick] + 0.5, y=rows[pick] + 0.5, kind="outside")


def _bot_sessions(study_id: int):
    return Session.objects.filter(study_id=study_id, is_bot=True)


def bots_end_running(*, study_id: int) -> int:
    """Expire the study's bot sessions still running (their slots given back); returns how many. Publishing
    calls it, so real workers start on a round no bot holds."""
    ended = 0
    for session_id in (
        _bot_sessions(study_id).filter(status=Session.Status.STARTED).values_list("pk", flat=True)
    ):
        try:
            session_expire_now(session_id=session_id, by="researcher")
        except MonitorRefused:  # finished meanwhile: its validation gives its slots back
            continue
        ended += 1
    return ended


def bots_remove(*, study_id: int) -> dict:
    """Delete every simulated annotator's data of ``study_id``: their sessions, trials and clicks, and the bot
    workers left without sessions, and the sent requests of its runs (so the page's card goes too). A running
    bot session gives its slots back first; a quota counter is not touched otherwise (bots never add to one). Returns ``{"sessions", "trials", "clicks", "workers"}``."""
    bots_end_running(study_id=study_id)  # every slot a running bot still holds
    with transaction.atomic():
        sessions = _bot_sessions(study_id)
        worker_ids = list(sessions.values_list("worker_id", flat=True).distinct())
        counts = {
            "sessions": sessions.count(),
            "trials": Trial.objects.filter(session__in=sessions).count(),
            "clicks": Click.objects.filter(trial__session__in=sessions).count(),
        }
        sessions.delete()  # trials, clicks, presentations and reviews cascade
        orphans = Worker.objects.filter(pk__in=worker_ids, platform=BOT_PLATFORM, sessions__isnull=True)
        counts["workers"] = orphans.count()
        orphans.delete()
        # the runs asked for are done with (sent): the page's card goes with their data
        TaskIntent.objects.filter(
            task_name=task_names.BOTS_RUN_BOTS, args__0=study_id, sent_at__isnull=False
        ).delete()
    logger.info("simulated data removed", extra={"study_id": study_id, **counts})
    return counts


def bot_summary(*, study: Study) -> dict | None:
    """What the study page's "Simulated annotators" card shows, or None when no bot ever ran: the batches by
    state and verdict (under the study's batch rule; the keys of ``collector.selectors.progress.
    session_counts``), the same per device that ran any (``devices``), the rejection reasons, and the last run
    asked for (``requested``: bots, shares, when, whether a worker took it)."""
    last = (
        TaskIntent.objects.filter(task_name=task_names.BOTS_RUN_BOTS, args__0=study.pk)
        .order_by("-created_at")
        .first()
    )
    sessions = _bot_sessions(study.pk)
    counts = session_counts(sessions)
    if last is None and not counts["started"]:
        return None
    devices = {device: session_counts(sessions.filter(device=device)) for device in DEVICES}
    devices = {device: row for device, row in devices.items() if row["started"]}
    reasons = (
        sessions.filter(validity=Session.Validity.REJECTED)
        .values("rejection_reason")
        .annotate(n=Count("id"))
        .order_by("-n", "rejection_reason")[:5]
    )
    requested = None
    if last is not None:
        _study, bots, phone_share, leave_share, run = (list(last.args) + [None] * 5)[:5]
        requested = {
            "bots": bots,
            "phone_share": phone_share,
            "leave_share": leave_share,
            "run": run,
            "at": last.created_at,
            "sent": last.sent_at is not None,
            "ended": counts["started"] >= (bots or 0) and not counts["pending"],
        }
    return {
        **counts,
        "devices": devices,
        "reasons": [{"reason": row["rejection_reason"], "sessions": row["n"]} for row in reasons],
        "requested": requested,
        "rule": study.get_batch_rule_display(),
    }


def bot_run(
    *,
    study_id: int,
    bots: int,
    phone_share: float = 0.5,
    leave_share: float = 0.2,
    base_url: str | None = None,
    run: str | None = None,
    seed: int | None = None,
    concurrency: int = 8,
):
    """Run ``bots`` simulated annotators on draft ``study_id`` against the server at ``base_url`` (default:
    ``settings.PUBLIC_BASE_URL``, the address the study's links name); returns the
    ``bot_player.BotRunReport``. Blocks until every bot finished or left (about a batch's phases times
    ``bots / concurrency``). Raises BotRunRefused for a study that is not a draft timed study."""
    from django.conf import settings
    from django.db import close_old_connections, connection
    from django.urls import reverse

    from collector.services.bot_player import bots_play
    from collector.services.tokens import bot_link_token_make

    study = Study.objects.get(pk=study_id)
    bot_run_check(study=study, bots=bots, phone_share=phone_share, leave_share=leave_share)
    run = run or uuid.uuid4().hex[:8]
    base = (base_url or settings.PUBLIC_BASE_URL).rstrip("/")
    aim_rng = random.Random(seed)

    def entry_url_for(device: str) -> str:
        token = bot_link_token_make(study_id=study_id, device=device, run=run)
        return base + reverse("annotation_ui:study_link", kwargs={"token": token})

    def aim(session_id: int, position: int) -> tuple[float, float, str]:
        close_old_connections()
        try:
            chosen = bot_aim(session_id=session_id, position=position, rng=random.Random(aim_rng.random()))
        finally:
            if not connection.in_atomic_block:
                connection.close()  # a bot's thread ends with its batch: no connection left behind
        return chosen.x, chosen.y, chosen.kind

    logger.info("bot run started", extra={"study_id": study_id, "bots": bots, "run": run, "base_url": base})
    report = bots_play(
        entry_url_for=entry_url_for,
        bots=bots,
        phone_share=phone_share,
        leave_share=leave_share,
        aim=aim,
        seed=seed,
        concurrency=concurrency,
        batch_size=study.batch_size,
    )
    logger.info("bot run ended", extra={"study_id": study_id, "run": run, **report.summary})
    return report
