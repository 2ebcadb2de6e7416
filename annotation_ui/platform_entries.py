"""Entry pages for crowd platforms (Toloka, Prolific, MTurk) and a server-side exit page.

An entry reads the platform's parameters through the study's adapter (``parse_entry``), shows a preview
when the platform is only previewing (MTurk ``ASSIGNMENT_ID_NOT_AVAILABLE``, Toloka without an assignment
id), otherwise starts (or resumes) the worker's session with ``session_start`` and hands over to the player
page ``/a/<session token>/``. No cookie is read or set: the token travels in the URL, so the pages work in
MTurk's frame. MTurk responses are frameable by the MTurk hosts only (``collector.platforms.framing``).

``/platform-exit/<session token>/`` shows a finished session the players' end screen (the shared include
``_end_screens.html``: the code, its Copy button, the same words) and does the adapter's finish action with the
players' own finish step (``static/player/exit.js`` runs ``runFinishAction`` of ``static/player/ui.js``: show the
code; show it and then redirect to Prolific once Prolific answers; auto-post to MTurk's externalSubmit). The
screen is rendered on the server, so the code is there without JavaScript too (then a plain refresh, or a
submit button, does the finish action).
"""

from __future__ import annotations

import logging

from django.http import HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from collector.models import DEVICES, Session, Study
from collector.platforms import EntryRefused, PlatformUnavailable, get_adapter
from collector.services.session_start import SessionStartRefused, session_start
from collector.services.tokens import TokenInvalid, session_token_make, session_token_read
from collector.services.workers import worker_get_or_create

from .devices import device_from_headers

logger = logging.getLogger(__name__)

#: Seconds the exit page shows the completion code before it redirects (Prolific) or posts (MTurk).
REDIRECT_AFTER_S = 5


def _message(request, *, title: str, message: str, status: int, frameable: bool = False):
    response = render(
        request, "annotation_ui/message.html", {"title": title, "message": message}, status=status
    )
    response["Cache-Control"] = "no-store"
    response.platform_frameable = frameable
    return response


def _player_redirect(session: Session, *, frameable: bool):
    url = reverse("annotation_ui:player", kwargs={"token": session_token_make(session_id=session.pk)})
    response = HttpResponseRedirect(url, status=303)
    response.platform_frameable = frameable
    return response


def _entry(request, *, platform: str, study_id: int, device: str | None):
    adapter = get_adapter(platform)
    frameable = adapter.framed
    study = Study.objects.filter(pk=study_id, platform=platform).first()
    if study is None:
        return _message(
            request,
            title=_("Link not valid"),
            message=_("This study does not exist."),
            status=404,
            frameable=frameable,
        )
    device = device or (study.platform_config or {}).get("device") or device_from_headers(request.headers)
    if device not in DEVICES:
        return _message(
            request,
            title=_("Link not valid"),
            message=_("This link names an unknown device."),
            status=404,
            frameable=frameable,
        )
    try:
        entry = adapter.parse_entry(study=study, device=device, params=request.GET)
    except EntryRefused as exc:
        return _message(request, title=_("Link not valid"), message=str(exc), status=400, frameable=frameable)
    except PlatformUnavailable:
        return _message(
            request,
            title=_("Please try again"),
            message=_(
                "The platform could not confirm your assignment right now. Please reload this page in a minute."
            ),
            status=503,
            frameable=frameable,
        )
    if entry.is_preview:
        return _message(
            request,
            title=_("Preview: click on objects in images"),
            message=_(
                "You will see %(batch)s images. For each, look at the image, then at the object shown, then click "
                "once on that object. At least %(valid)s of %(batch)s clicks must be on the object. Accept the "
                "task to start."
            )
            % {"batch": study.batch_size, "valid": study.min_valid_per_session},
            status=200,
            frameable=frameable,
        )
    worker = worker_get_or_create(platform=platform, external_id=entry.external_worker_id)
    finished = Session.objects.filter(
        study=study,
        worker=worker,
        platform_assignment_id=entry.external_assignment_id,
        status=Session.Status.FINISHED,
        is_qualification=False,  # after a test, session_start decides: the real batch, or the refusal
    ).first()
    if finished is not None:  # a reload after the end shows the end again, never a second batch
        return _player_redirect(finished, frameable=frameable)
    try:
        session = session_start(
            study=study,
            worker=worker,
            device=device,
            platform_device=device,
            detected_device=device_from_headers(request.headers),
            user_agent=request.headers.get("User-Agent", ""),
            platform_assignment_id=entry.external_assignment_id,
            platform_batch_id=entry.external_batch_id,
        )
    except SessionStartRefused as exc:
        return _message(
            request, title=_("No task available"), message=str(exc), status=409, frameable=frameable
        )
    if entry.return_info and any(
        (session.platform_state or {}).get(k) != v for k, v in entry.return_info.items()
    ):
        session.platform_state = {**(session.platform_state or {}), **entry.return_info}
        Session.objects.filter(pk=session.pk).update(platform_state=session.platform_state)
    logger.info(
        "platform entry", extra={"study_id": study.pk, "session_id": session.pk, "platform": platform}
    )
    return _player_redirect(session, frameable=frameable)


@never_cache
@require_GET
def toloka_entry(request, study_id: int, device: str):
    """``/toloka/<study>/<device>/?batch=<token>&toloka_assignment=<id>`` (the Classic view adds the id)."""
    return _entry(request, platform="toloka", study_id=study_id, device=device)


@never_cache
@require_GET
def prolific_entry(request, study_id: int, device: str | None = None):
    """``/prolific/<study>/[<device>/]?PROLIFIC_PID=&STUDY_ID=&SESSION_ID=``."""
    return _entry(request, platform="prolific", study_id=study_id, device=device)


@never_cache
@require_GET
def mturk_entry(request, study_id: int, device: str):
    """``/mturk/<study>/<device>/?assignmentId=&hitId=&workerId=&turkSubmitTo=`` inside MTurk's frame."""
    return _entry(request, platform="mturk", study_id=study_id, device=device)


@never_cache
@require_GET
def platform_exit(request, token: str):
    """The end screen of a finished session, then its platform's finish action (frameable for framed platforms)."""
    try:
        session_id = session_token_read(token=token)
    except TokenInvalid as exc:
        return _message(request, title=_("Link not valid"), message=str(exc), status=404)
    session = Session.objects.select_related("study").filter(pk=session_id).first()
    if session is None or session.status != Session.Status.FINISHED:
        return _message(
            request,
            title=_("Not finished"),
            message=_("This batch is not finished yet: go back to the task."),
            status=409,
        )
    action = get_adapter(session.study.platform).finish_action(session=session)
    response = render(
        request,
        "annotation_ui/platform_exit.html",
        {
            "action": action,
            "redirect_after_s": REDIRECT_AFTER_S,
            "exit_payload": {"finish": action.as_dict(), "redirect_delay_ms": REDIRECT_AFTER_S * 1000},
        },
    )
    response["Cache-Control"] = "no-store"
    return response
