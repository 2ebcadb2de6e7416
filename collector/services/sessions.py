"""Sessions: starting a batch, recording its clicks exactly once, and finishing it.

A session is one batch of trials by one worker on one device. ``session_start`` allocates the targets and
creates the trials in one transaction; ``click_record`` stores the one click of a trial, keyed by a
client idempotency key so retried uploads never store a click twice; ``session_finish`` closes the batch
once the server holds every click, makes the completion code and enqueues validation after commit.
"""

from __future__ import annotations

import json
import logging
import math
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from collector.models import Click, Round, Session, Study, Trial, Worker
from collector.services.codes import completion_code_make
from collector.services.studies import study_open_round
from config.celery import app as celery_app

logger = logging.getLogger(__name__)

#: Celery task that validates a finished session (tasks/validation.py, ALLOCATION).
VALIDATE_SESSION_TASK = "tasks.validation.validate_session"

DEVICES = ("pc", "mobile")
POINTER_TYPES = ("mouse", "touch", "pen", "")
MAX_KEY_LENGTH = 64
#: Upper bound for client-reported lists/dicts stored on a trial, so a hostile client cannot bloat rows.
MAX_FLAGS = 20
MAX_PHASE_KEYS = 20
MAX_CLIENT_INFO_BYTES = 8000
NO_ROUND_MESSAGE = (
    "There are no tasks available right now (the current round is complete). Please try again later."
)


class SessionStartRefused(Exception):
    """No session can be started; the message is meant for the worker (shown on the entry page)."""


class ClickRefused(Exception):
    """The click cannot be stored; the message names the field or state at fault."""


class SessionFinishRefused(Exception):
    """The session cannot be finished yet; ``missing_positions`` lists trials still without a click."""

    def __init__(self, message: str, *, missing_positions: list[int] | None = None):
        super().__init__(message)
        self.missing_positions = missing_positions or []


# --------------------------------------------------------------------------------------------------
# start


def _check_start(*, study: Study, worker: Worker, device: str) -> None:
    if device not in DEVICES:
        raise SessionStartRefused(
            f"device {device!r} is not supported; it must be one of {', '.join(DEVICES)}."
        )
    if study.state != Study.State.PUBLISHED:
        raise SessionStartRefused(
            "This task is not open at the moment (the study is "
            f"{study.get_state_display().lower()}). Please try again later."
        )
    if worker.excluded:
        raise SessionStartRefused("You cannot take part in this study any more.")


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
) -> Session:
    """Start (or resume) a batch for ``worker`` on ``device`` ("pc" | "mobile").

    In one transaction: find the open round, allocate up to ``study.batch_size`` targets through
    ``collector.services.allocation.allocate_targets`` (which reserves them with the inflight counters),
    and create the Session with Trials at positions 0..n-1 in allocation order. ``expires_at`` is now +
    ``study.session_timeout_s``. If the worker already runs an unexpired session of this study for the
    same ``platform_assignment_id`` it is returned instead, so reopening an entry link resumes the batch.

    Raises SessionStartRefused with a message for the worker (study not open, no round, no targets left).
    """
    _check_start(study=study, worker=worker, device=device)
    from collector.services.allocation import allocate_targets  # ALLOCATION's module

    with transaction.atomic():
        # Serialise starts of the same worker, so a double-clicked entry link opens one session, not two.
        Worker.objects.select_for_update(no_key=True).filter(pk=worker.pk).first()
        existing = _resumable_session(
            study=study, worker=worker, platform_assignment_id=platform_assignment_id
        )
        if existing is not None:
            return existing
        open_round = study_open_round(study=study)
        if open_round is None:
            raise SessionStartRefused(NO_ROUND_MESSAGE)
        targets = allocate_targets(round=open_round, worker=worker, device=device, count=study.batch_size)
        if not targets and not Round.objects.filter(pk=open_round.pk, state=Round.State.OPEN).exists():
            raise SessionStartRefused(NO_ROUND_MESSAGE)  # closed by a validation while this start waited
        if not targets:
            raise SessionStartRefused(
                "There are no images left for you in this study. Thank you for your interest!"
            )
        now = timezone.now()
        session = Session.objects.create(
            study=study,
            round=open_round,
            worker=worker,
            device=device,
            platform_device=platform_device[:20],
            detected_device=detected_device[:20],
            user_agent=user_agent[:2000],
            client_info=_bounded_client_info(client_info or {}),
            platform_assignment_id=platform_assignment_id[:200],
            platform_batch_id=platform_batch_id[:200],
            expires_at=now + timedelta(seconds=study.session_timeout_s),
        )
        Trial.objects.bulk_create(
            [Trial(session=session, target=target, position=index) for index, target in enumerate(targets)]
        )
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


def _bounded_client_info(info: dict) -> dict:
    if not isinstance(info, dict):
        raise ValueError("client_info must be a JSON object.")
    if len(json.dumps(info, default=str)) > MAX_CLIENT_INFO_BYTES:
        raise ValueError(f"client_info is larger than {MAX_CLIENT_INFO_BYTES} bytes; send fewer fields.")
    return info


def session_client_report(
    *, session: Session, client_info: dict, detected_device: str = "", user_agent: str = ""
) -> Session:
    """Merge what the browser measured (viewport, DPR, refresh rate, pointer, client hints, webdriver)
    into ``session.client_info``; ``detected_device`` is the browser's own device class."""
    merged = {**session.client_info, **_bounded_client_info(client_info)}
    session.client_info = _bounded_client_info(merged)
    fields = ["client_info"]
    if detected_device in DEVICES:
        session.detected_device = detected_device
        fields.append("detected_device")
    if user_agent and not session.user_agent:
        session.user_agent = user_agent[:2000]
        fields.append("user_agent")
    session.save(update_fields=fields)
    return session


# --------------------------------------------------------------------------------------------------
# clicks


def _finite(name: str, value, *, minimum: float | None = None) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ClickRefused(f"{name}={value!r} is not a number.") from None
    if not math.isfinite(number):
        raise ClickRefused(f"{name}={value!r} is not a finite number.")
    if minimum is not None and number < minimum:
        raise ClickRefused(f"{name}={number} is below {minimum}.")
    return number


def _optional_finite(name: str, value) -> float | None:
    return None if value is None else _finite(name, value)


def _clean_phase_onsets(phase_onsets_ms) -> dict:
    if phase_onsets_ms is None:
        return {}
    if not isinstance(phase_onsets_ms, dict) or len(phase_onsets_ms) > MAX_PHASE_KEYS:
        raise ClickRefused(
            f"phase_onsets_ms must be an object of at most {MAX_PHASE_KEYS} phase names to milliseconds."
        )
    cleaned = {}
    for key, value in phase_onsets_ms.items():
        if isinstance(value, dict | list):
            raise ClickRefused(f"phase_onsets_ms[{key!r}] must be a number.")
        cleaned[str(key)[:20]] = _optional_finite(f"phase_onsets_ms[{key!r}]", value)
    return cleaned


def _clean_flags(flags) -> list[str]:
    if flags is None:
        return []
    if not isinstance(flags, list) or len(flags) > MAX_FLAGS:
        raise ClickRefused(f"flags must be a list of at most {MAX_FLAGS} strings.")
    return sorted({str(flag)[:40] for flag in flags})


def click_record(
    *,
    session: Session,
    position: int,
    idempotency_key: str,
    x: float,
    y: float,
    shown_width: float,
    shown_height: float,
    pointer_type: str = "",
    reaction_ms: float | None = None,
    event_timestamp_ms: float | None = None,
    phase_onsets_ms: dict | None = None,
    blocked_clicks: int = 0,
    flags: list[str] | None = None,
    refresh_hz: float | None = None,
) -> tuple[Click, bool]:
    """Store the one click of the trial at ``position``; returns (click, created).

    ``x``/``y``: canonical image pixels (x = column, y = row, floats, origin top-left; Image.width/height
    frame); ``shown_width``/``shown_height``: CSS px of the image as displayed; ``reaction_ms``: phase D onset
    to the click; ``event_timestamp_ms``: the pointer event's timeStamp (performance.now() clock);
    ``phase_onsets_ms``: measured rAF onsets of phases A-D (same clock); ``blocked_clicks``: presses during
    A-C; ``flags``: reasons the trial is invalid (tab hidden, blur, viewport change); ``refresh_hz``: the
    client's refresh estimate.

    Exactly once per ``idempotency_key``: a retry with the same key returns the stored click with
    created=False (unique constraint + get on conflict). A different key for a trial that already has its
    click raises ClickRefused, as do a finished/expired session and malformed values.
    """
    key = str(idempotency_key or "").strip()
    if not key or len(key) > MAX_KEY_LENGTH:
        raise ClickRefused(f"idempotency_key must be 1-{MAX_KEY_LENGTH} characters; got {idempotency_key!r}.")
    existing = Click.objects.filter(idempotency_key=key).select_related("trial").first()
    if existing is not None:
        return _replayed(existing, session=session, position=position)

    values = {
        "x": _finite("x", x),
        "y": _finite("y", y),
        "shown_width": _finite("shown_width", shown_width, minimum=1.0),
        "shown_height": _finite("shown_height", shown_height, minimum=1.0),
        "reaction_ms": _optional_finite("reaction_ms", reaction_ms),
        "event_timestamp_ms": _optional_finite("event_timestamp_ms", event_timestamp_ms),
    }
    if pointer_type not in POINTER_TYPES:
        raise ClickRefused(f"pointer_type={pointer_type!r} must be one of mouse, touch, pen.")
    try:
        blocked = int(blocked_clicks or 0)
    except (TypeError, ValueError):
        raise ClickRefused(f"blocked_clicks={blocked_clicks!r} is not an integer.") from None
    if not 0 <= blocked <= 10000:
        raise ClickRefused(f"blocked_clicks={blocked} must be between 0 and 10000.")
    onsets = _clean_phase_onsets(phase_onsets_ms)
    clean_flags = _clean_flags(flags)
    refresh = _optional_finite("refresh_hz", refresh_hz)

    with transaction.atomic():
        locked = Session.objects.select_for_update(no_key=True).get(pk=session.pk)
        if locked.status != Session.Status.STARTED:
            raise ClickRefused(f"session {locked.pk} is {locked.status}; it takes no more clicks.")
        if locked.expires_at <= timezone.now():
            raise ClickRefused(f"session {locked.pk} expired at {locked.expires_at:%H:%M:%S} UTC.")
        trial = Trial.objects.filter(session=locked, position=position).first()
        if trial is None:
            raise ClickRefused(f"session {locked.pk} has no trial at position {position!r}.")
        try:
            with transaction.atomic():
                click = Click.objects.create(
                    trial=trial, idempotency_key=key, pointer_type=pointer_type, **values
                )
        except IntegrityError:
            click = None
        if click is None:
            # Lost a race: either the same key (a concurrent retry) or another click for this trial.
            winner = Click.objects.filter(idempotency_key=key).select_related("trial").first()
            if winner is not None:
                return _replayed(winner, session=session, position=position)
            raise ClickRefused(f"trial {position} of session {locked.pk} already has its click.")
        trial.phase_onsets_ms = onsets
        trial.blocked_clicks = blocked
        trial.flags = clean_flags
        trial.refresh_hz = refresh
        trial.save(update_fields=["phase_onsets_ms", "blocked_clicks", "flags", "refresh_hz"])
    logger.info(
        "click recorded",
        extra={"session_id": session.pk, "trial_id": trial.pk, "position": position, "click_id": click.pk},
    )
    return click, True


def _replayed(click: Click, *, session: Session, position: int) -> tuple[Click, bool]:
    if click.trial.session_id != session.pk or click.trial.position != position:
        raise ClickRefused(
            f"idempotency_key is already used by another trial; send a new key for trial {position}."
        )
    return click, False


# --------------------------------------------------------------------------------------------------
# finish


def session_missing_positions(*, session: Session) -> list[int]:
    """Positions of the session's trials that have no click yet, ascending."""
    return list(
        Trial.objects.filter(session=session, click__isnull=True)
        .order_by("position")
        .values_list("position", flat=True)
    )


def session_finish(*, session_id: int) -> Session:
    """Finish the session once every trial has its click: status finished, completion code, and
    ``tasks.validation.validate_session`` sent after commit. Idempotent: finishing again returns the same
    session and code without sending the task again.

    Raises SessionFinishRefused (with ``missing_positions``) while clicks are missing, or (without them)
    when the session expired.
    """
    with transaction.atomic():
        session = Session.objects.select_for_update(no_key=True).get(pk=session_id)
        if session.status == Session.Status.FINISHED:
            return session
        if session.status != Session.Status.STARTED:
            raise SessionFinishRefused(
                f"session {session.pk} is {session.status}; it can no longer be finished. "
                "Open the task again to get a new batch."
            )
        missing = session_missing_positions(session=session)
        if missing and session.expires_at <= timezone.now():
            # No click can be added any more, so asking the browser to replay trials would loop.
            raise SessionFinishRefused(
                f"session {session.pk} expired at {session.expires_at:%H:%M:%S} UTC before all clicks arrived; "
                "open the task again to get a new batch."
            )
        if missing:
            raise SessionFinishRefused(
                f"session {session.pk} still lacks clicks for trial(s) {', '.join(map(str, missing))}.",
                missing_positions=missing,
            )
        session.status = Session.Status.FINISHED
        session.finished_at = timezone.now()
        session.completion_code = completion_code_make(
            session_id=session.pk, assignment_id=session.platform_assignment_id
        )
        session.save(update_fields=["status", "finished_at", "completion_code"])
        transaction.on_commit(lambda: celery_app.send_task(VALIDATE_SESSION_TASK, args=[session_id]))
    logger.info("session finished", extra={"session_id": session.pk, "study_id": session.study_id})
    return session
