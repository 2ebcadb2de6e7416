"""Starting a batch: the checks, the allocation and the fill-up, and the refusals a worker can be given.

A session is one batch of trials by one worker on one device. ``session_start`` allocates the targets and
creates the trials in one transaction (or resumes the worker's running batch of the same assignment);
``no_task_refusal`` is the message a worker who gets no batch is given, final or "try again later".
"""

from __future__ import annotations

import functools
import logging
import math
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from collector.models import DEVICES, Round, Session, Study, Trial, Worker
from collector.models.studies import ShortBatchPolicy, StudyKind
from collector.services.prepared import column, in_model_order, prepared_cursor
from collector.services.qualification import (
    not_qualified_message,
    qualification_required,
    qualification_result,
    qualification_session_create,
)
from collector.services.screens import session_filler_trials_add, session_screen_trials_add
from collector.services.session_client import client_info_bounded
from collector.services.studies import study_open_round, study_preview_round

logger = logging.getLogger(__name__)


NO_ROUND_MESSAGE = gettext_lazy(
    "There are no tasks available right now (the current round is complete). Please try again later."
)
NO_IMAGES_LEFT_MESSAGE = gettext_lazy(
    "There are no images left for you in this study. Thank you for your interest!"
)


class SessionStartRefused(Exception):
    """No session can be started; the message is meant for the worker (shown on the entry page), in the
    request's language (raise it with an evaluated ``gettext`` string). ``retry_after_s``: the refusal is
    temporary (the images still wanted are in other workers' batches) and the page may ask again this many
    seconds later; None when it is final."""

    def __init__(self, message: str, *, retry_after_s: int | None = None):
        super().__init__(message)
        self.retry_after_s = retry_after_s


def _check_start(*, study: Study, worker: Worker, device: str, is_bot: bool = False) -> None:
    if device not in DEVICES:
        raise SessionStartRefused(
            _("device %(device)s is not supported; it must be one of %(devices)s.")
            % {"device": repr(device), "devices": ", ".join(DEVICES)}
        )
    if is_bot:
        # A test run before launch (issue 32 item 4): simulated annotators play a draft, and only a draft, of a
        # timed study; real workers keep being refused until it is published.
        if study.state != Study.State.DRAFT or study.is_corrective:
            raise SessionStartRefused(
                f"simulated annotators run on a draft timed study only; study {study.pk} is "
                f"{study.state}{' (corrective)' if study.is_corrective else ''}."
            )
    elif study.state != Study.State.PUBLISHED:
        raise SessionStartRefused(
            _("This task is not open at the moment (the study is %(state)s). Please try again later.")
            % {"state": study.get_state_display().lower()}
        )
    if worker.excluded:
        raise SessionStartRefused(_("You cannot take part in this study any more."))


def _resumable_session(*, study: Study, worker: Worker, platform_assignment_id: str) -> Session | None:
    """The worker's running session of this study for the same assignment, if it has not expired."""
    return (
        Session.objects.filter(
            study=study,
            worker=worker,
            status=Session.Status.STARTED,
            platform_assignment_id=platform_assignment_id,
            expires_at__gt=timezone.now(),
        )
        .order_by("-started_at")
        .first()
    )


def _start_reads(
    *, study: Study, worker: Worker, platform_assignment_id: str
) -> tuple[Session | None, Round | None]:
    """Under the worker's lock: the session to resume (``_resumable_session``) and the study's open round
    (``study_open_round``). PostgreSQL: one prepared statement for both, the round loaded with its id,
    number and state (other fields deferred), its study the one given."""
    if connection.vendor != "postgresql":
        existing = _resumable_session(
            study=study, worker=worker, platform_assignment_id=platform_assignment_id
        )
        return existing, (None if existing is not None else study_open_round(study=study))
    params = {
        "study": study.pk,
        "worker": worker.pk,
        "started": Session.Status.STARTED.value,
        "assignment": platform_assignment_id,
        "now": timezone.now(),
        "open": Round.State.OPEN.value,
    }
    with prepared_cursor() as cursor:
        cursor.execute(_start_reads_sql(), params)
        existing_id, *round_values = cursor.fetchone()
    if existing_id is not None:
        return Session.objects.get(pk=existing_id), None
    if round_values[0] is None:
        return None, None
    open_round = Round.from_db(connection.alias, _START_ROUND_FIELDS, round_values)
    open_round.study = study
    return None, open_round


_START_ROUND_FIELDS = in_model_order(Round, ("id", "study_id", "number", "state"))


@functools.cache
def _start_reads_sql() -> str:
    """The statement of ``_start_reads`` (PostgreSQL), built once from the models' metadata: the conditions
    and orders of ``_resumable_session`` and ``study_open_round``."""
    quote = connection.ops.quote_name
    session, round_ = Session._meta, Round._meta

    round_columns = ", ".join(f"r.{quote(round_.get_field(name).column)}" for name in _START_ROUND_FIELDS)
    return (
        f"SELECT s.id, {round_columns} FROM (SELECT 1) AS one "
        f"LEFT JOIN LATERAL (SELECT {column(session, 'id')} AS id FROM {quote(session.db_table)} "
        f"WHERE {column(session, 'study')} = %(study)s AND {column(session, 'worker')} = %(worker)s "
        f"AND {column(session, 'status')} = %(started)s "
        f"AND {column(session, 'platform_assignment_id')} = %(assignment)s "
        f"AND {column(session, 'expires_at')} > %(now)s ORDER BY {column(session, 'started_at')} DESC LIMIT 1) AS s "
        f"ON true LEFT JOIN LATERAL (SELECT * FROM {quote(round_.db_table)} "
        f"WHERE {column(round_, 'study')} = %(study)s AND {column(round_, 'state')} = %(open)s "
        f"ORDER BY {column(round_, 'number')} DESC LIMIT 1) AS r ON true"
    )


def session_start(
    *,
    study: Study,
    worker: Worker,
    device: str,
    platform_device: str = "",
    detected_device: str = "",
    user_agent: str = "",
    client_info: dict | None = None,
    platform_assignment_id: str = "",
    platform_batch_id: str = "",
    is_bot: bool = False,
) -> Session:
    """Start (or resume) a batch for ``worker`` on ``device`` ("pc" | "mobile").

    In one transaction: find the open round, allocate up to ``study.batch_size`` targets through
    ``collector.services.allocation.allocate_targets`` (which reserves them with the inflight counters),
    and create the Session with Trials at positions 0..n-1 in allocation order. ``expires_at`` is now +
    ``study.session_timeout_s``. If the worker already runs an unexpired session of this study for the
    same ``platform_assignment_id`` it is returned instead, so reopening an entry link resumes the batch.

    ``is_bot``: a simulated annotator's batch (``Session.is_bot``; ``collector.services.bots``), started on a
    draft study only (its round 1 prepared as a preview prepares it), taking in-flight slots as any batch.

    Raises SessionStartRefused with a message for the worker (study not open, no round, no targets left).
    Before a temporary refusal (the images still wanted are in other batches), the batches abandoned by then
    give their images back (``reservations.sessions_release_on_demand``, outside the start's transaction and
    its locks) and the start is tried once more.
    """
    start = functools.partial(
        _session_start_once,
        study=study,
        worker=worker,
        device=device,
        platform_device=platform_device,
        detected_device=detected_device,
        user_agent=user_agent,
        client_info=client_info,
        platform_assignment_id=platform_assignment_id,
        platform_batch_id=platform_batch_id,
        is_bot=is_bot,
    )
    from collector.services.reservations import sessions_release_on_demand

    try:
        return start()
    except _NothingAllocated as nothing:
        refusal = no_task_refusal(round=nothing.round, worker=worker, device=device)
    if refusal.retry_after_s is None or not sessions_release_on_demand(study=study, device=device):
        raise refusal
    try:
        return start()
    except _NothingAllocated as nothing:
        raise no_task_refusal(round=nothing.round, worker=worker, device=device) from None


class _NothingAllocated(Exception):
    """Raised inside the start's transaction when allocation took nothing (the transaction rolls back)."""

    def __init__(self, round: Round):
        super().__init__(f"nothing allocated in round {round.pk}")
        self.round = round


def _session_start_once(
    *,
    study: Study,
    worker: Worker,
    device: str,
    platform_device: str,
    detected_device: str,
    user_agent: str,
    client_info: dict | None,
    platform_assignment_id: str,
    platform_batch_id: str,
    is_bot: bool,
) -> Session:
    """``session_start``'s one try: checks, then one transaction (raises ``_NothingAllocated`` when the
    allocation took nothing: the refusal is worded after the transaction, its reads holding no lock)."""
    _check_start(study=study, worker=worker, device=device, is_bot=is_bot)
    if is_bot:
        study_preview_round(study_id=study.pk)  # a draft's round 1, exactly what publishing uses
    from collector.services.allocation import allocate_targets, allocation_possible, row_lock

    with transaction.atomic():
        # Serialise starts of the same worker, so a double-clicked entry link opens one session, not two.
        row_lock(Worker, worker.pk)
        existing, open_round = _start_reads(
            study=study, worker=worker, platform_assignment_id=platform_assignment_id[:200]
        )
        if existing is not None:
            return existing
        if open_round is None:
            raise SessionStartRefused(str(NO_ROUND_MESSAGE))
        # What the browser and the platform told us, the same for a test session and a batch.
        recorded = {
            "device": device,
            "platform_device": platform_device[:20],
            "detected_device": detected_device[:20],
            "user_agent": user_agent[:2000],
            "client_info": client_info_bounded(client_info or {}),
            "platform_assignment_id": platform_assignment_id[:200],
            "platform_batch_id": platform_batch_id[:200],
        }
        if qualification_required(study):
            # Corrective campaigns with a qualification test (issue 17): the test first, real tasks only after
            # a pass; a failed worker is refused for good.
            result = qualification_result(study=study, worker=worker)
            if result is None:
                test = qualification_session_create(study=study, round=open_round, worker=worker, **recorded)
                if test is None:
                    raise SessionStartRefused(str(NO_ROUND_MESSAGE))
                return test
            if not result.passed:
                raise SessionStartRefused(not_qualified_message())
        if not allocation_possible(round=open_round, device=device, count=study.batch_size):
            raise _NothingAllocated(
                open_round
            )  # nothing to take: no session row, no wait for the round's turn
        # The session row first: allocation takes the round's turn (a row lock held to the commit, which
        # every start of the round waits for), so the less that runs after it, the more starts per second.
        now = timezone.now()
        session = Session.objects.create(
            study=study,
            round=open_round,
            worker=worker,
            expires_at=now + timedelta(seconds=study.session_timeout_s),
            is_bot=is_bot,
            **recorded,
        )
        targets = allocate_targets(
            round=open_round,
            worker=worker,
            device=device,
            count=study.batch_size,
            worker_locked=True,
            session=session,  # its trials created with the allocation: positions 0..n-1 in the order returned
        )
        if not targets and not Round.objects.filter(pk=open_round.pk, state=Round.State.OPEN).exists():
            raise SessionStartRefused(str(NO_ROUND_MESSAGE))  # closed by a validation while this start waited
        if not targets:
            raise _NothingAllocated(open_round)  # rolls the session row back; the refusal is worded below
        _fill_up(session=session, study=study, allocated=len(targets))
        if study.practice_trials or study.control_trials:
            session_screen_trials_add(session=session)  # practice and control trials (issue 32 item 5)
    logger.info(
        "session started",
        extra={
            "session_id": session.pk,
            "study_id": study.pk,
            "round_id": open_round.pk,
            "trials": len(targets),
        },
    )
    return session


def _fill_up(*, session: Session, study: Study, allocated: int) -> None:
    """A round's tail under ``Study.short_batches`` ``pad``: fewer than ``batch_size`` targets were allocated,
    so the batch is filled up with images already done (``collector.services.screens``); too short even so,
    the start is refused (raised inside ``session_start``'s transaction, which rolls the allocation back)."""
    from collector.services.allocation import least_trials

    if (
        study.short_batches != ShortBatchPolicy.PAD
        or study.kind != StudyKind.TIMED
        or allocated >= study.batch_size
    ):
        return
    fillers = session_filler_trials_add(session=session, count=study.batch_size)
    if allocated + fillers < least_trials(study=study, count=study.batch_size):
        raise SessionStartRefused(str(NO_IMAGES_LEFT_MESSAGE))


def no_task_refusal(*, round: Round, worker: Worker, device: str) -> SessionStartRefused:
    """The refusal a worker who gets no batch is given, its message in the request's language: final (every
    target of the round has its ``device`` quota met, or the images still wanted are ones this worker has
    already seen) or temporary (the images still wanted are in other workers' running batches: when to try
    again, from the study's grace period, after which an abandoned batch gives its images back; the page
    asks again by itself every ``settings.WAIT_RECHECK_S``, its ``retry_after_s``)."""
    from collector.services.allocation import least_batch
    from collector.services.reservations import study_wait_hint_s

    study = round.study
    quota = study.quota_for(device)
    valid, inflight = f"valid_{device}", f"inflight_{device}"
    open_targets = round.targets.filter(**{f"{valid}__lt": quota})
    if not open_targets.exists():
        return SessionStartRefused(
            _("This study has all the answers it needs for your device. Thank you for your interest!")
        )
    seen = Trial.objects.filter(session__study_id=study.pk, session__worker_id=worker.pk).values(
        "target__instance__image_id"
    )
    unseen = open_targets.exclude(instance__image_id__in=seen)
    unseen_images = unseen.values("instance__image_id").distinct().count()
    if unseen_images < least_batch(study=study, count=study.batch_size):
        return SessionStartRefused(str(NO_IMAGES_LEFT_MESSAGE))
    waiting = unseen.filter(**{f"{inflight}__gt": 0}).exists()
    if not waiting:
        return SessionStartRefused(str(NO_IMAGES_LEFT_MESSAGE))
    hint_s = study_wait_hint_s(study=study)
    minutes = max(1, math.ceil(hint_s / 60))
    message = _(
        "All the remaining images are being worked on by other participants right now. Some may come back "
        "if a participant leaves: please try again in about %(minutes)s minute(s)."
    ) % {"minutes": minutes}
    return SessionStartRefused(message, retry_after_s=max(1, math.ceil(min(hint_s, settings.WAIT_RECHECK_S))))
