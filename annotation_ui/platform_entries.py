"""Entry pages for crowd platforms (Toloka, Prolific, MTurk) and a server-side exit page.

An entry reads the platform's parameters through the study's adapter (``parse_entry``), shows a preview
when the platform is only previewing (MTurk ``ASSIGNMENT_ID_NOT_AVAILABLE``, Toloka without an assignment
id), otherwise starts (or resumes) the worker's session with ``session_start`` and hands over to the player
page ``/a/<session token>/``. No cookie is read or set: the token travels in the URL, so the pages work in
MTurk's frame. MTurk responses are frameable by the MTurk hosts only (``collector.platforms.framing``).

``/platform-exit/<session token>/`` does the adapter's finish action on the server (show the code; show
the code and then redirect to Prolific; auto-post to MTurk's externalSubmit) for a finished session.
"""

from __future__ import annotations

import logging

from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.translation import get_language
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from collector.models import Session, Study
from collector.platforms import EntryRefused, PlatformUnavailable, get_adapter
from collector.services.sessions import SessionStartRefused, session_start
from collector.services.tokens import TokenInvalid, session_token_make, session_token_read
from collector.services.workers import worker_get_or_create

from .devices import device_from_headers

logger = logging.getLogger(__name__)

DEVICES = ("pc", "mobile")
#: Seconds the exit page shows the completion code before it redirects (Prolific).
REDIRECT_AFTER_S = 5
# The exit page's redirect (static/player/ui.js does the same in the player): after the delay, an opaque
# request to the platform's origin (no cookies, nothing read); the page moves on only if it answers.
EXIT_SCRIPT = """<script>
setTimeout(function () {
  var url = document.getElementById("platform-return").href;
  var controller = new AbortController();
  setTimeout(function () { controller.abort(); }, 8000);
  fetch(new URL(url).origin + "/", {mode: "no-cors", credentials: "omit", cache: "no-store", signal: controller.signal})
    .then(function () { window.location.href = url; },
          function () { document.getElementById("platform-unreachable").hidden = false; });
}, %(delay_ms)d);
</script>"""


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
    """The finish action of a finished session, done by the server (frameable for framed platforms)."""
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
    if action.kind == "redirect":
        # The code first, then the redirect, and only to a platform that answers (EXIT_SCRIPT): if it
        # cannot be reached the participant stays here with the code instead of on a browser error page.
        # Without JavaScript, a plain refresh.
        html = format_html(
            "<!doctype html><html lang='{}'><head><meta charset='utf-8'><title>{}</title>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            "<noscript><meta http-equiv='refresh' content='{};url={}'></noscript></head><body>"
            "<main class='message'><h1>{}</h1><p>{} <strong id='completion-code'>{}"
            "</strong></p><p>{}</p><p id='platform-unreachable' hidden><b>{}</b></p></main>{}</body></html>",
            get_language(),
            _("Thank you!"),
            REDIRECT_AFTER_S,
            action.url,
            _("Thank you!"),
            _("Your completion code:"),
            action.code,
            format_html(
                _(
                    "Write it down: you are taken back to the platform in a few seconds. If that does not "
                    "happen, {link_start}continue here{link_end}, or enter the code on the platform."
                ),
                link_start=format_html("<a id='platform-return' href='{}'>", action.url),
                link_end=mark_safe("</a>"),
            ),
            _(
                "The platform could not be reached, so you stay on this page. Copy the code above and enter "
                "it on the platform, or use the link on this page once your connection works."
            ),
            mark_safe(EXIT_SCRIPT % {"delay_ms": REDIRECT_AFTER_S * 1000}),
        )
        return _html(html)
    if action.kind == "auto_post":
        inputs = format_html_join("", '<input type="hidden" name="{}" value="{}">', action.fields.items())
        html = format_html(
            "<!doctype html><html lang='{}'><head><meta charset='utf-8'><title>{}</title></head><body>"
            "<form id='platform-submit' method='post' action='{}'>{}"
            "<p>{} <strong>{}</strong></p><button type='submit'>{}</button></form>"
            "<script>document.getElementById('platform-submit').submit();</script></body></html>",
            get_language(),
            _("Submitting"),
            action.url,
            inputs,
            _("Your code:"),
            action.code,
            _("Submit the task"),
        )
        return _html(html)
    return _message(
        request,
        title=_("Thank you!"),
        message=_("Your completion code: %(code)s. Copy it into the task on the platform and submit.")
        % {"code": action.code},
        status=200,
    )


def _html(html: str):
    response = HttpResponse(html)
    response["Cache-Control"] = "no-store"
    return response
