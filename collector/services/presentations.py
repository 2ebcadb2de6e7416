"""Trial presentations: the server learns when the player shows a trial, so replays are flagged and a
batch finished elsewhere is not played again.

The player reports each trial just before its phase A starts (wire format below). The server keeps the
report on the trial (``Trial.presentations``, idempotent per ``presentation_id``), and

* refuses it (HTTP 409) when the batch cannot take work any more: the session is finished (e.g. in
  another tab or window), expired, or the trial already has its click (clicked in another tab). The
  player then stops and shows the refusal instead of replaying the trial;
* flags the trial ``replayed`` when it is presented a second time (a reload in phase B, a second tab
  showing the same trial): the worker has seen the target before the timed sequence, so the click
  cannot be trusted and the validation judges the trial invalid (``trial_flagged``), like a trial the
  player flagged itself (tab hidden, focus lost).

Rules for other code (one place, so the click and finish endpoints and the player apply the same ones):
:func:`session_work_check` says whether a session still takes work; :func:`trial_server_flags` gives the
flags the server holds for a trial, which the click path must keep when it stores the client's flags.

Wire format (``annotation_ui.api.Presented``; every 4xx body also carries ``field``)::

    POST /api/annotator/<session token>/presented
    {"position": 3, "presentation_id": "<client uuid, 1-64 chars>"}

    200 {"ok": true, "position": 3, "presentations": 1, "replayed": false}
    409 {"error": "<message for the worker>", "reason": "session_finished" | "session_expired" |
         "trial_done", "position": 3}
    400 {"error": "<what is malformed, or no trial at that position>"}      404 bad token

Send it once per showing (a new ``presentation_id`` after a reload; the same one on a network retry).
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from collector.models import Session, Trial

logger = logging.getLogger(__name__)

REPLAY_FLAG = "replayed"
NOT_PRESENTED_FLAG = "not_presented"
MAX_PRESENTATIONS = 20
MAX_PRESENTATION_ID = 64


class PresentationRefused(Exception):
    """The trial must not be shown; ``reason`` is a machine-readable code, the message is for the worker."""

    def __init__(self, message: str, *, reason: str):
        super().__init__(message)
        self.reason = reason


def session_work_check(*, session: Session, now=None) -> None:
    """Raise PresentationRefused unless ``session`` still takes work (running and not expired).

    The rule a second tab replaying a finished batch hits; call it with the session row locked when the
    answer must hold until commit."""
    now = now or timezone.now()
    if session.status == Session.Status.FINISHED:
        raise PresentationRefused(
            _(
                "This batch is already finished (perhaps in another tab or window). Thank you! Nothing more to "
                "do here."
            ),
            reason="session_finished",
        )
    if session.status == Session.Status.EXPIRED or session.expires_at <= now:
        raise PresentationRefused(
            _("This batch expired before it was finished. Open the task again to get a new batch."),
            reason="session_expired",
        )


def trial_server_flags(*, trial: Trial) -> list[str]:
    """Flags the server holds for ``trial`` whatever the client reports: ``replayed`` once it was
    presented more than once, ``not_presented`` while it was never reported as presented (an old client, or
    a click sent by hand: kept, but judged invalid). The click path stores
    ``sorted(set(client_flags) | set(these))``."""
    shown = len(trial.presentations or [])
    if shown == 0:
        return [NOT_PRESENTED_FLAG]
    return [REPLAY_FLAG] if shown > 1 else []


def trial_presented_record(*, session: Session, position: int, presentation_id: str) -> dict:
    """Record that the player is about to show the trial at ``position``; see the module docstring.

    Returns ``{"position", "presentations", "replayed"}``. Raises PresentationRefused (session finished
    or expired, trial already clicked), or ValueError for a malformed ``presentation_id`` / unknown
    position (the message names it)."""
    key = str(presentation_id or "").strip()
    if not key or len(key) > MAX_PRESENTATION_ID:
        raise ValueError(
            f"presentation_id must be 1-{MAX_PRESENTATION_ID} characters; got {presentation_id!r}."
        )
    with transaction.atomic():
        locked = Session.objects.select_for_update(no_key=True).get(pk=session.pk)
        session_work_check(session=locked)
        trial = (
            Trial.objects.select_for_update(no_key=True, of=("self",))
            .select_related("click")
            .filter(session=locked, position=position)
            .first()
        )
        if trial is None:
            raise ValueError(f"session {locked.pk} has no trial at position {position!r}.")
        if hasattr(trial, "click"):
            raise PresentationRefused(
                _("This image was already answered (perhaps in another tab or window); continue there."),
                reason="trial_done",
            )
        shown = list(trial.presentations or [])
        if not any(entry.get("id") == key for entry in shown) and len(shown) < MAX_PRESENTATIONS:
            shown.append({"id": key, "at": timezone.now().isoformat()})
            trial.presentations = shown
            fields = ["presentations"]
            server_flags = trial_server_flags(trial=trial)
            if server_flags and not set(server_flags) <= set(trial.flags or []):
                trial.flags = sorted(set(trial.flags or []) | set(server_flags))
                fields.append("flags")
            trial.save(update_fields=fields)
    replayed = len(shown) > 1
    if replayed:
        logger.info(
            "trial replayed",
            extra={"session_id": session.pk, "trial_id": trial.pk, "presentations": len(shown)},
        )
    return {"position": position, "presentations": len(shown), "replayed": replayed}
