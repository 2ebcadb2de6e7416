"""The click, presented and finish endpoints' common case, answered before the rest of the middleware and DRF.

Clicks and presented reports (one of each per trial) are most of the annotator API's traffic; a finish comes
once a batch, and cost as much web time as the batch's ten clicks until it too came this way (see
``session_finish``). Profiled under
load (py-spy, gunicorn gthread workers, wrk sending clicks), the middleware after WhiteNoise and DRF's dispatch
(request wrapping, content negotiation, the ClickIn serializer) held about 40% of the web process's Python time
per click, the click's own work (``click_ingest``) about 30%.

``ClickFastPathMiddleware`` sits in MIDDLEWARE right after SecurityMiddleware, WhiteNoise and the database
retry (``config.unavailable.DatabaseRetryMiddleware``, which wraps it), so the SSL redirect, the host check
and the security headers still come from Django. For ``POST /api/annotator/<token>/click`` (and
``/presented``, ``/finish``) it parses the body with the API's own parser
(``parsers.parse_body``), checks it with ``click_input`` (``presented_input``): plain Python that accepts only
what the ClickIn (PresentedIn) serializer accepts and gives the same values, else None; reads the token and runs
``click_ingest`` (``trial_presented_record``, ``session_finish``), the service the DRF view calls. A stored
click or a retry of one (201/200), a recorded presentation (200), a finished session (200), is answered here
with the DRF view's body and headers. Everything else (a bad token, input the plain check does not take, a 409
refusal, a database error) goes down the normal path with the body it read, which answers it as before: a
refusal is decided before anything is written, and the writes are idempotent (a click's key, a presentation's
id, a finished session), so the second pass gives the normal answer.
A connection the database server ended makes the normal path fail too: ``config.unavailable``'s
``DatabaseRetryMiddleware``, above this one, then runs the whole request once more on a new connection.
An error of another kind is logged as a warning (with its traceback) before the normal path takes over: it
would otherwise only show as a slower endpoint. ``CLICK_FAST_PATH`` (setting, default on) turns it off.
"""

from __future__ import annotations

import logging
import math
import re

from django.conf import settings
from django.db import DatabaseError
from django.http import HttpResponse
from django.utils import translation
from django.utils.cache import patch_vary_headers
from rest_framework.renderers import JSONRenderer

from collector.models import Session
from collector.platforms.base import get_adapter
from collector.services.outbox import broker_warm
from collector.services.presentations import PresentationRefused, trial_presented_record
from collector.services.sessions import ClickRefused, SessionFinishRefused, click_ingest, session_finish
from collector.services.tokens import TokenInvalid, session_token_read

from .parsers import MAX_BODY_BYTES, BodyRefused, parse_body
from .payloads import click_answer, finish_payload
from .serializers import FLAG_PATTERN, MAX_COORDINATE_PX, MAX_POSITION, MAX_TIMESTAMP_MS, TOKEN_PATTERN

logger = logging.getLogger(__name__)
#: What the normal path answers as a 4xx or a 503: the fast path hands these over without a word.
_EXPECTED = (BodyRefused, TokenInvalid, ClickRefused, PresentationRefused, SessionFinishRefused, ValueError,
             Session.DoesNotExist, DatabaseError)  # fmt: skip
FAST_PATH = re.compile(r"/api/annotator/(?P<token>[^/]+)/(?P<endpoint>click|presented|finish)")
# the serializers' own patterns, used with fullmatch (their "$" would also take a trailing line feed, which
# the StrictString check refuses anyway)
_KEY = re.compile(TOKEN_PATTERN.removeprefix("^").removesuffix("$"))
_FLAG = re.compile(FLAG_PATTERN.removeprefix("^").removesuffix("$"))
_RENDERER = JSONRenderer()  # the DRF views' renderer: the same bytes
_POINTER_TYPES = frozenset(("mouse", "touch", "pen", ""))
_ONSET_NAMES = ("A", "B", "C", "D", "click")
# name: (lowest, highest, required, default when absent (_ABSENT: left out), null allowed)
_ABSENT = object()
_NUMBERS = {
    "x": (-MAX_COORDINATE_PX, MAX_COORDINATE_PX, True, _ABSENT, False),
    "y": (-MAX_COORDINATE_PX, MAX_COORDINATE_PX, True, _ABSENT, False),
    "shown_width": (1.0, MAX_COORDINATE_PX, True, _ABSENT, False),
    "shown_height": (1.0, MAX_COORDINATE_PX, True, _ABSENT, False),
    "reaction_ms": (-MAX_TIMESTAMP_MS, MAX_TIMESTAMP_MS, False, _ABSENT, True),
    "event_timestamp_ms": (-MAX_TIMESTAMP_MS, MAX_TIMESTAMP_MS, False, _ABSENT, True),
    "load_wait_ms": (0.0, MAX_TIMESTAMP_MS, False, 0.0, False),
    "refresh_hz": (0.0, 1000.0, False, _ABSENT, True),
}


class _NotPlain(Exception):
    """The input is not the common well-formed click: the normal path decides."""


def _number(value, lowest: float, highest: float) -> float:
    if type(value) is not float and type(value) is not int:  # bool is not int here
        raise _NotPlain
    try:
        number = float(value)
    except OverflowError:
        raise _NotPlain from None
    if not (math.isfinite(number) and lowest <= number <= highest):
        raise _NotPlain
    return number


def _onsets(value) -> dict | None:
    if value is None:
        return None
    if type(value) is not dict:
        raise _NotPlain
    onsets = {}
    for name in _ONSET_NAMES:  # the serializer's field order; other keys are ignored, as there
        if name in value:
            item = value[name]
            onsets[name] = None if item is None else _number(item, -MAX_TIMESTAMP_MS, MAX_TIMESTAMP_MS)
    return onsets


def _integer(value, highest: int) -> int:
    if type(value) is not int or not 0 <= value <= highest:
        raise _NotPlain
    return value


def _flags(value) -> list | None:
    if value is None:
        return None
    if type(value) is not list or len(value) > 20:
        raise _NotPlain
    for flag in value:
        if type(flag) is not str or not _FLAG.fullmatch(flag):
            raise _NotPlain
    return list(value)


def _numbers(data: dict, out: dict) -> None:
    for name, (lowest, highest, required, default, nullable) in _NUMBERS.items():
        if name not in data:
            if required:
                raise _NotPlain
            if default is not _ABSENT:
                out[name] = default
        elif data[name] is None:
            if not nullable:
                raise _NotPlain
            out[name] = None
        else:
            out[name] = _number(data[name], lowest, highest)


def click_input(data: dict) -> dict | None:
    """``data`` (a parsed body) as ``ClickIn`` validates it, or None when it is anything but a plainly valid
    click. Never accepts what the serializer refuses, and never gives other values (the tests in
    tests/annotation_ui/test_fast_click.py hold the two together); may send an unusual valid click to the
    serializer."""
    try:
        key = data["idempotency_key"]
        if type(key) is not str or not _KEY.fullmatch(key):
            return None
        out: dict = {"position": _integer(data["position"], MAX_POSITION), "idempotency_key": key}
        _numbers(data, out)
        pointer_type = data.get("pointer_type", "")
        if type(pointer_type) is not str or pointer_type not in _POINTER_TYPES:
            return None
        out["pointer_type"] = pointer_type
        for name in ("phase_onsets_ms", "scheduled_onsets_ms"):
            if name in data:
                out[name] = _onsets(data[name])
        out["blocked_clicks"] = _integer(data.get("blocked_clicks", 0), 10_000)
        if "flags" in data:
            out["flags"] = _flags(data["flags"])
        if "next_presentation" in data:
            attached = data["next_presentation"]
            if attached is not None:
                attached = presented_input(attached) if type(attached) is dict else None
                if attached is None:
                    return None
            out["next_presentation"] = attached
    except (KeyError, _NotPlain):
        return None
    return out


def presented_input(data: dict) -> dict | None:
    """``data`` as ``PresentedIn`` validates it, or None when it is anything but plainly valid (see
    ``click_input``)."""
    key = data.get("presentation_id")
    if type(key) is not str or not _KEY.fullmatch(key):
        return None
    try:
        return {"position": _integer(data.get("position"), MAX_POSITION), "presentation_id": key}
    except _NotPlain:
        return None


def _click(session_id: int, data: dict) -> tuple[int, dict] | None:
    fields = click_input(data)
    if fields is None:
        return None
    receipt = click_ingest(session_id=session_id, **fields)
    body = click_answer(receipt, session_id=session_id, carried=fields.get("next_presentation"))
    return (201 if receipt.created else 200), body


def _presented(session_id: int, data: dict) -> tuple[int, dict] | None:
    fields = presented_input(data)
    if fields is None:
        return None
    return 200, {"ok": True, **trial_presented_record(session_id=session_id, **fields)}


def _finish(session_id: int, data) -> tuple[int, dict] | None:
    if type(data) is not dict:  # FinishIn takes any object (it has no fields), nothing else
        return None
    return 200, {"ok": True, "finish": finish_payload(session_finish(session_id=session_id))}


_ENDPOINTS = {"click": _click, "presented": _presented, "finish": _finish}


class ClickFastPathMiddleware:
    """See the module docstring. Must follow SecurityMiddleware (and WhiteNoise) in MIDDLEWARE."""

    def __init__(self, get_response):
        self.get_response = get_response
        # Django builds the middleware once per web process, at boot: import there what a finish would import
        # on its first run (the platform adapters for the finish step's payload, toloka-kit's client among
        # them; the broker's transport for the outbox's send), about 0.2 s that fell mid-burst.
        get_adapter("link")  # registers every built-in adapter
        broker_warm()

    def __call__(self, request):
        if request.method == "POST" and getattr(settings, "CLICK_FAST_PATH", True):
            match = FAST_PATH.fullmatch(request.path_info)
            if match is not None:
                response = self._answer(request, match.group("token"), _ENDPOINTS[match.group("endpoint")])
                if response is not None:
                    return response
        return self.get_response(request)

    def _answer(self, request, token: str, endpoint) -> HttpResponse | None:
        request.get_host()  # DisallowedHost (400) as CommonMiddleware would raise it
        if request.content_type != "application/json":
            return None
        try:
            if int(request.META.get("CONTENT_LENGTH") or 0) > MAX_BODY_BYTES:
                return None
            data = parse_body(request.body)  # kept on the request: the normal path parses it again
            # the language LocaleMiddleware (below) would activate: a carried showing's refusal is a message
            language = translation.get_language_from_request(request)
            with translation.override(language):
                answer = endpoint(session_token_read(token=token), data)
        except _EXPECTED:
            # a refusal or a database error: the normal path answers it (a refusal wrote nothing; a write
            # stored before an error is answered there as the retry it is)
            return None
        except Exception:
            logger.warning("annotator API fast path: unexpected error, the DRF view answers", exc_info=True)
            return None
        if answer is None:
            return None
        status, body = answer
        response = HttpResponse(_RENDERER.render(body), content_type="application/json", status=status)
        # what the normal path's layers add to this answer: DRF (Allow), the annotator API (no-store),
        # CommonMiddleware (Content-Length), LocaleMiddleware (Vary, Content-Language), XFrameOptionsMiddleware
        response["Allow"] = "POST, OPTIONS"
        response["Cache-Control"] = "no-store"
        response["Content-Length"] = str(len(response.content))
        patch_vary_headers(response, ("Accept-Language",))
        response.headers.setdefault("Content-Language", language)
        response.headers.setdefault("X-Frame-Options", settings.X_FRAME_OPTIONS)
        return response
