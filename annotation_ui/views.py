"""Annotator pages: the standalone entry link, the player page, and the researcher's preview.

Annotators carry no cookies: every page and API call is authorised by the signed session token in the
URL (``collector.services.tokens``), so the pages work inside crowd platforms' frames.
"""

from __future__ import annotations

import json
import logging

from django.contrib.auth.views import redirect_to_login
from django.core.files.storage import default_storage
from django.http import FileResponse, Http404, HttpResponseRedirect, StreamingHttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.gzip import gzip_page
from django.views.decorators.http import require_GET, require_http_methods

from collector.models import DEVICES, Session, Study, Target
from collector.selectors.permissions import study_visible_or_404
from collector.selectors.preview import preview_targets
from collector.selectors.screens import study_screens
from collector.services.bots import bot_worker_create
from collector.services.link_workers import (
    link_worker_cookie,
    link_worker_cookie_name,
    link_worker_identify,
)
from collector.services.reservations import session_page_served, session_return
from collector.services.session_start import SessionStartRefused, session_start
from collector.services.stimuli import stimulus_path, target_stimuli_ensure
from collector.services.studies import StudyStateError, study_preview_round
from collector.services.tokens import (
    TokenInvalid,
    session_token_make,
    session_token_read,
    study_link_token_read,
)

from .devices import device_from_headers
from .payloads import preview_payload, session_payload, session_stimuli_manifest

logger = logging.getLogger(__name__)

#: Stimuli have content-hash names, so a browser may keep them for a year without asking again.
IMMUTABLE_CACHE = "private, max-age=31536000, immutable"
STIMULUS_TYPES = {"webp": "image/webp", "png": "image/png", "jpg": "image/jpeg"}


def player_context(*, study: Study, payload: dict, correction: bool) -> dict:
    """Template context of the player page: the payload plus its screens (consent, instructions, the end of
    the practice: ``collector.selectors.screens``) in the request's language. The payload gets
    ``screens`` (what the player reports with the client info: the language, and which texts it showed)."""
    practice = sum(1 for trial in payload["trials"] if trial.get("practice"))
    # After a reload the screens count what is left of the batch (the trials not done), not the whole batch.
    left = [trial for trial in payload["trials"] if not trial["done"]]
    practice_left = sum(1 for trial in left if trial.get("practice"))
    task_count = len(left) - practice_left
    screens = study_screens(
        study=study, trial_count=task_count, practice_count=practice_left, correction=correction
    )
    # A batch already under way (a reload) does not ask for consent again: the worker gave it on the first load.
    consent = screens["consent"]["shown"] and not any(trial["done"] for trial in payload["trials"])
    payload["screens"] = {
        "language": screens["language"],
        "consent": screens["consent"]["source"] if consent else "",
        "instructions": screens["instructions"]["source"],
        "practice": practice,
    }
    return {
        "payload": payload,
        "study": study,
        "screens": screens,
        "show_consent": consent,
        "task_count": task_count,
    }


def home(request):
    return render(request, "annotation_ui/message.html", {"title": "Clicklab", "message": ""})


def _message(request, *, title: str, message: str, status: int, retry: dict | None = None):
    """A page with a title and a message. ``retry`` (``{"after_s", "device"}``): a temporary refusal of a
    study link's entry; the page posts the entry again by itself every ``after_s`` seconds (a countdown,
    static/player/waiting.js; a button without JavaScript), and the answer says ``Retry-After``."""
    context = {"title": title, "message": message, "retry": retry}
    response = render(request, "annotation_ui/message.html", context, status=status)
    response["Cache-Control"] = "no-store"
    if retry:
        response["Retry-After"] = str(retry["after_s"])
    return response


#: request attribute: the signed id of the link worker this request named or minted (see study_link_entry)
_MINTED_WORKER = "_link_worker_minted"


@csrf_exempt
@gzip_page
@never_cache
@require_http_methods(["GET", "POST"])
def study_link_entry(request, token: str):
    """``/s/<token>/``: GET shows a page that detects the device class and posts it back; POST starts a
    session for this browser's link worker and answers with the player page itself (no redirect round
    trip: the page then shows its own ``/a/<session token>/`` address, so a reload or a bookmark opens the
    same batch).

    One person is one worker: a signed first-party cookie (``collector.services.link_workers``) names the
    worker again on the next visit, and ``session_start`` resumes that worker's running batch.
    A GET never creates anything, so link previews and prefetchers cannot use up targets."""
    try:
        link = study_link_token_read(token=token)
    except TokenInvalid as exc:
        return _message(request, title=_("Link not valid"), message=str(exc), status=404)
    study = Study.objects.filter(pk=link["study"]).first()
    if study is None:
        return _message(
            request, title=_("Link not valid"), message=_("This study does not exist any more."), status=404
        )
    if request.method == "GET":
        return render(
            request,
            "annotation_ui/entry.html",
            {"study": study, "server_device": device_from_headers(request.headers)},
        )
    detected = request.POST.get("device", "")
    if detected not in DEVICES:
        detected = device_from_headers(request.headers)
    device = link.get("device") or detected
    if link.get("bot"):
        return _bot_entry(request, study=study, device=device, detected=detected, run=str(link["bot"]))
    cookie_name = link_worker_cookie_name(study_id=study.pk)
    # A second run of this request (config.unavailable: the database connection broke) names the worker the
    # first run minted, so it resumes the batch the first may have committed instead of starting another.
    claimed = request.COOKIES.get(cookie_name) or getattr(request, _MINTED_WORKER, None)
    worker, signed_id = link_worker_identify(study_id=study.pk, signed_id=claimed)
    setattr(request, _MINTED_WORKER, signed_id)
    try:
        session = session_start(
            study=study,
            worker=worker,
            device=device,
            platform_device=link.get("device", ""),
            detected_device=detected,
            user_agent=request.headers.get("User-Agent", ""),
        )
    except SessionStartRefused as exc:
        retry = {"after_s": exc.retry_after_s, "device": detected} if exc.retry_after_s else None
        response = _message(request, title=_("No task available"), message=str(exc), status=409, retry=retry)
    else:
        token = session_token_make(session_id=session.pk)
        if request.GET.get("then") == "redirect":
            # The behaviour before issue 14 (a redirect to the player page), kept for clients that want a
            # clean address and for bench/bench_player_loading.py's same-run baseline.
            player_url = reverse("annotation_ui:player", kwargs={"token": token})
            load = "?load=all" if request.GET.get("load") == "all" else ""
            response = HttpResponseRedirect(player_url + load, status=303)
        else:
            session = Session.objects.select_related("study", "round").get(pk=session.pk)
            response = _player_page(request, session=session, token=token)
    response.set_cookie(value=signed_id, **link_worker_cookie(study_id=study.pk, secure=request.is_secure()))
    return response


def _bot_entry(request, *, study: Study, device: str, detected: str, run: str):
    """The link entry of a simulated annotator (``collector.services.bots``): a bot worker of its own per
    visit, a ``Session.is_bot`` batch (a draft accepts those, and only those), the player page as for anyone."""
    worker = bot_worker_create(run=run)
    try:
        session = session_start(
            study=study,
            worker=worker,
            device=device,
            detected_device=detected,
            user_agent=request.headers.get("User-Agent", ""),
            is_bot=True,
        )
    except SessionStartRefused as exc:
        return _message(request, title=_("No task available"), message=str(exc), status=409)
    session = Session.objects.select_related("study", "round").get(pk=session.pk)
    return _player_page(request, session=session, token=session_token_make(session_id=session.pk))


def _player_page(request, *, session: Session, token: str):
    if session.study.is_corrective:  # corrective-click campaign (issue 17): its own page in the same shell
        from .corrective_api import corrective_payload

        return render(
            request,
            "annotation_ui/corrective.html",
            {
                "payload": corrective_payload(session=session, token=token),
                "study": session.study,
                "player_url": reverse("annotation_ui:player", kwargs={"token": token}),
            },
        )
    if session_return(session_id=session.pk) is not None:
        # the worker is back after a release: the batch as re-reserved (collector.services.reservations)
        session = Session.objects.select_related("study", "round").get(pk=session.pk)
        if session.status != Session.Status.STARTED:
            return _message(
                request,
                title=_("Task expired"),
                message=_(
                    "The images of this batch were given to other participants while you were away. "
                    "Open the task again to get a new batch."
                ),
                status=410,
            )
    payload = session_payload(session=session, token=token)
    payload["page"] = session_page_served(session_id=session.pk)
    context = player_context(study=session.study, payload=payload, correction=session.round.number > 1)
    context["player_url"] = reverse("annotation_ui:player", kwargs={"token": token})
    return render(request, "annotation_ui/player.html", context)


def session_id_from_token(token: str) -> int:
    """The session id a token names, without a query; Http404 for a bad token."""
    try:
        return session_token_read(token=token)
    except TokenInvalid:
        raise Http404(_("task link not valid")) from None


def session_from_token(token: str) -> Session:
    """The session a token names; Http404 for a bad token or a deleted session."""
    session = Session.objects.select_related("study").filter(pk=session_id_from_token(token)).first()
    if session is None:
        raise Http404(_("session not found"))
    return session


@gzip_page
@never_cache
@require_GET
def player(request, token: str):
    """``/a/<session_token>/``: instructions, loading, the trials and the finish step of one batch.

    Compressed (about 12 KiB to 3 KiB for a 10-trial batch: every byte counts on a slow phone network
    before START). The page echoes nothing a third party controls, so compression opens no BREACH-style
    length oracle on its token."""
    try:
        session_id = session_token_read(token=token)
    except TokenInvalid as exc:
        return _message(request, title=_("Link not valid"), message=str(exc), status=404)
    session = Session.objects.select_related("study", "round").filter(pk=session_id).first()
    if session is None:
        return _message(
            request, title=_("Link not valid"), message=_("This task does not exist."), status=404
        )
    expired = session.status == Session.Status.STARTED and session.expires_at <= timezone.now()
    if session.status == Session.Status.EXPIRED or expired:
        return _message(
            request,
            title=_("Task expired"),
            message=_("This batch expired before it was finished. Open the task again to get a new batch."),
            status=410,
        )
    return _player_page(request, session=session, token=token)


@require_GET
def stimulus(request, token: str, position: int, kind: str, name: str):
    """A stimulus file, served only to the session holding the trial whose target it belongs to."""
    session = session_from_token(token)
    trial = (
        session.trials.select_related("target__round__study", "target__instance__image")
        .filter(position=position)
        .first()
    )
    if trial is None or session.status != Session.Status.STARTED:
        raise Http404("no such trial")
    return _serve_stimulus(trial.target, kind=kind, name=name)


def _stimulus_type(name: str) -> str:
    return STIMULUS_TYPES.get(name.rsplit(".", 1)[-1], "application/octet-stream")


#: Bundle layout: 4-byte big-endian length N, N bytes of JSON index, then the files back to back.
BUNDLE_CHUNK = 64 * 1024


@require_GET
def stimuli_bundle(request, token: str, digest: str):
    """All pictures of a session's batch in one response, for the loading step.

    On a slow phone network each request costs a round trip (HTTP/1.1 runs six at a time), so one request
    instead of twenty gets START enabled sooner. The body is ``uint32 N`` (big-endian), an N-byte JSON
    index ``[{position, kind, name, type, length}]``, then the files in index order. Served only to the
    session's own token while it runs; ``digest`` must name the session's current list of files (a
    content hash, so the response is cached for good). The per-file URLs stay for fallback and preview."""
    session = session_from_token(token)
    if session.status != Session.Status.STARTED:
        raise Http404("no running batch")
    entries, current = session_stimuli_manifest(session=session)
    if digest != current:
        raise Http404("stale stimuli bundle")
    index = [
        {
            **entry,
            "type": _stimulus_type(entry["name"]),
            "length": default_storage.size(stimulus_path(entry["name"])),
        }
        for entry in entries
    ]
    head = json.dumps(index, separators=(",", ":")).encode()

    def body():
        yield len(head).to_bytes(4, "big") + head
        for entry in index:
            with default_storage.open(stimulus_path(entry["name"]), "rb") as handle:
                while chunk := handle.read(BUNDLE_CHUNK):
                    yield chunk

    response = StreamingHttpResponse(body(), content_type="application/octet-stream")
    response["Content-Length"] = str(4 + len(head) + sum(entry["length"] for entry in index))
    response["Cache-Control"] = IMMUTABLE_CACHE
    return response


def _serve_stimulus(target: Target, *, kind: str, name: str):
    record = target_stimuli_ensure(target=target)
    entry = record.get(kind) if kind in ("display", "target") else None
    if not entry or entry.get("name") != name:
        raise Http404("no such stimulus")
    response = FileResponse(
        default_storage.open(stimulus_path(name), "rb"), content_type=_stimulus_type(name)
    )
    response["Cache-Control"] = IMMUTABLE_CACHE
    return response


@gzip_page
@never_cache
@require_GET
def preview(request, study_id: int):
    """``/preview/<study_id>/?device=pc|mobile&batch=<n>``: the researcher walks through the batch a new
    worker on that device would get now (the allocation's choice and a shuffled order, batch n a different
    shuffle), phase by phase, without timers; a draft can be previewed (its round 1 is prepared); no
    session is stored. Whether a click would count: ``collector.researcher.views.preview_check``."""
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    study = study_visible_or_404(user=request.user, study_id=study_id)
    device = request.GET.get("device") if request.GET.get("device") in DEVICES else "pc"
    batch = request.GET.get("batch", "")
    # ASCII digits, at most 9 (int() refuses other Unicode digits and more than 4,300 digits with a ValueError)
    seed = int(batch) if batch.isascii() and batch.isdigit() and len(batch) <= 9 else 0
    try:
        round_ = study_preview_round(study_id=study.pk)
    except StudyStateError as exc:
        return _message(request, title=_("Nothing to preview"), message=str(exc), status=409)
    targets = preview_targets(round=round_, device=device, seed=seed)
    payload = preview_payload(study=study, targets=targets)
    context = player_context(study=study, payload=payload, correction=round_.number > 1)
    return render(request, "annotation_ui/player.html", context)


@require_GET
def preview_stimulus(request, study_id: int, target_id: int, kind: str, name: str):
    if not request.user.is_authenticated:
        raise Http404("login required")
    study = study_visible_or_404(user=request.user, study_id=study_id)
    target = get_object_or_404(
        Target.objects.select_related("round__study", "instance__image"), pk=target_id, round__study=study
    )
    return _serve_stimulus(target, kind=kind, name=name)
