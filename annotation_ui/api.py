"""The annotator API under ``/api/annotator/<session_token>/``: JSON, CSRF-exempt, token-only, no cookies.

``state`` (GET), ``client`` (POST, what the browser measured), ``click`` (POST, one click, idempotent; it
may carry the next trial's presentation report), ``presented`` (POST, a trial is about to be shown),
``problem`` (POST, the player reports a refusal it showed the annotator), ``heartbeat`` (POST, the page is
still open: keeps the batch's reservations, re-reserves them after the worker was away), ``finish`` (POST,
the completion step). Each view parses the body with the bounded parser (``annotation_ui.parsers``), validates it with its
declared serializer (``annotation_ui.serializers``) before any service runs, calls one service and
serialises; the OpenAPI schema of these endpoints is served at ``/api/annotator/schema/``.

Every 4xx body is the error envelope of ``config.api_errors``: ``{"code", "message": "<the field, the value and
what to do>", "field": "<dotted path>"|null, ...}``: 400 malformed input (``invalid``, ``invalid_json``), 404 bad
token (``not_found``, field ``token``), 409 refused by the rules (``code`` the reason, with ``position`` or
``missing``).
"""

from __future__ import annotations

import threading

from django.http import Http404
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, status
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.permissions import AllowAny
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from collector.models import Session
from collector.services.clicks import ClickRefused, click_ingest
from collector.services.presentations import PresentationRefused, trial_presented_record
from collector.services.reservations import session_heartbeat, session_reclaim
from collector.services.session_client import session_client_report
from collector.services.session_finish import SessionFinishRefused, session_finish
from collector.services.session_problems import session_problem_record
from collector.services.tokens import TokenInvalid, session_token_read
from config.api_errors import ApiError, error_responses

from . import serializers as contract
from .parsers import AnnotatorJSONParser
from .payloads import click_answer, finish_payload, session_payload
from .views import session_from_token, session_id_from_token

TOKEN_PARAMETER = OpenApiParameter(
    "token", OpenApiTypes.STR, OpenApiParameter.PATH, description="The session token of the task link."
)
#: every error status an annotator endpoint answers (406: an Accept header other than JSON; 415: a body other
#: than JSON), documented with the envelope
ERRORS = error_responses(400, 404, 406, 415, envelope=contract.ErrorOut, s404="The token is not valid.")
REFUSED = error_responses(409, envelope=contract.ErrorOut)


class InputRefused(ApiError):
    """A 4xx of the annotator API: 400 ``invalid`` unless ``status_code`` and ``code`` say otherwise (a 409's
    code is its refusal reason)."""

    def __init__(self, message: str, *, field: str | None = None, status_code: int = 400, code: str = "invalid",
                 **extra):  # fmt: skip
        super().__init__(status_code, code, message, field=field, **extra)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _first_error(errors, data, path: str = "") -> tuple[str, str, object]:
    """(dotted field path, message, offending value) of the first error of a serializer's ``errors``."""
    if isinstance(errors, dict):
        key, nested = next(iter(errors.items()))
        if key == "non_field_errors":
            return _first_error(nested, data, path)
        if isinstance(key, int):  # a ListField's item
            value = data[key] if isinstance(data, list) and key < len(data) else _MISSING
            return _first_error(nested, value, f"{path}[{key}]")
        value = data.get(key, _MISSING) if isinstance(data, dict) else _MISSING
        return _first_error(nested, value, f"{path}.{key}" if path else str(key))
    if isinstance(errors, list) and errors and isinstance(errors[0], dict | list):
        for index, nested in enumerate(errors):
            if nested:
                value = data[index] if isinstance(data, list) and index < len(data) else _MISSING
                return _first_error(nested, value, f"{path}[{index}]")
    if isinstance(errors, list):
        return path, str(errors[0]), data
    return path, str(errors), data


_MISSING = object()


_serializers = threading.local()


def _validator(serializer_class):
    """One instance of ``serializer_class`` per thread, reused for every request: DRF builds a serializer's
    bound fields by deep-copying its declarations (about 70 objects for ClickIn), which cost more than the click's
    database work; validating with ``run_validation`` keeps no state on the instance."""
    cache = _serializers.__dict__
    serializer = cache.get(serializer_class)
    if serializer is None:
        serializer = cache[serializer_class] = serializer_class()
    return serializer


def validated(serializer_class, data) -> dict:
    """``data`` checked against the contract ``serializer_class``: the validated data (what ``is_valid`` and
    ``validated_data`` give), or InputRefused (400) naming the first field at fault."""
    try:
        return _validator(serializer_class).run_validation(data)
    except exceptions.ValidationError as exc:
        errors = exc.detail  # run_validation raises the serializer's error dict, as ``errors`` would hold
    path, message, value = _first_error(errors, data)
    field = path or None
    if value is _MISSING:
        raise InputRefused(f"{field} is missing: {message} Send it with the request.", field=field)
    message = message if message.endswith(".") else message + "."
    verb = "" if message.startswith(("must", "has", "holds")) else "is refused: "
    raise InputRefused(f"{field}={_short(value)} {verb}{message}", field=field)


#: Accept headers the player and most clients send, each answered with JSON without parsing the header
_JSON_ACCEPTED = frozenset({"", "*/*", "application/json", "application/json, text/plain, */*"})


class AnnotatorNegotiation(DefaultContentNegotiation):
    """DRF's negotiation, with its answer for the Accept headers every player sends taken at once: parsing the
    header and matching it against the renderers was a good part of the third of a millisecond of CPU a click
    saved with the lazy authentication below (measured 2026-12-03). Any other header (``text/html``,
    ``application/json; q=0.5``) or a ``?format=`` override is negotiated as before, 406 and 404 included."""

    def select_renderer(self, request, renderers, format_suffix=None):
        if (
            format_suffix is None
            and request.META.get("HTTP_ACCEPT", "").strip() in _JSON_ACCEPTED
            and self.settings.URL_FORMAT_OVERRIDE not in request.GET
        ):
            renderer = renderers[0]
            return renderer, renderer.media_type
        return super().select_renderer(request, renderers, format_suffix)


class AnnotatorView(APIView):
    """Token-only (no authentication, no cookies, no CSRF), bounded JSON in, JSON out, never cached."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    parser_classes = [AnnotatorJSONParser]
    renderer_classes = [JSONRenderer]
    throttle_classes: list = []
    content_negotiation_class = AnnotatorNegotiation

    def perform_authentication(self, request):
        # DRF's documented lazy form: with no authentication classes, resolving ``request.user`` up front only
        # built an AnonymousUser no annotator view reads (it is still there, lazily, if one ever does)
        pass

    def input(self, serializer_class) -> dict:
        return validated(serializer_class, self.request.data)

    def handle_exception(self, exc):
        # a bad token says what to do; everything else is answered by config.api_errors' handler
        if isinstance(exc, Http404 | exceptions.NotFound):
            message = _("%(reason)s This task link is not valid; open the task again from the platform.") % {
                "reason": exc
            }
            exc = ApiError(404, "not_found", message, field="token")
        return super().handle_exception(exc)

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        response["Cache-Control"] = "no-store"
        return response


def _session_for_update(token: str, *fields: str) -> Session:
    """The session a token names with only ``fields`` loaded (the rest deferred), for an endpoint that
    writes those; Http404 as ``session_from_token``."""
    session = Session.objects.only("id", *fields).filter(pk=session_id_from_token(token)).first()
    if session is None:
        raise Http404(_("session not found"))
    return session


class State(AnnotatorView):
    """The batch: its trials, which are done, and the finish step once it is finished."""

    @extend_schema(parameters=[TOKEN_PARAMETER], responses={200: contract.STATE_OUT, **ERRORS})
    def get(self, request, token: str):
        session_id = session_id_from_token(token)
        session_reclaim(session_id=session_id)  # a worker back after a release continues (reservations.py)
        session = session_from_token(token)
        return Response(session_payload(session=session, token=token))


class ClientReport(AnnotatorView):
    """What the browser measured (viewport, DPR, refresh rate, pointer, client hints, webdriver)."""

    @extend_schema(
        parameters=[TOKEN_PARAMETER],
        request=contract.ClientReportIn,
        responses={200: contract.OkOut, **ERRORS},
    )
    def post(self, request, token: str):
        # only the fields the report merges into (not the study, which session_from_token joins)
        session = _session_for_update(token, "client_info", "detected_device", "user_agent")
        data = self.input(contract.ClientReportIn)
        try:
            session_client_report(
                session=session,
                client_info=data["client_info"],
                detected_device=data["detected_device"],
                user_agent=request.headers.get("User-Agent", ""),
            )
        except ValueError as exc:
            raise InputRefused(str(exc), field="client_info") from None
        return Response({"ok": True})


class ClickView(AnnotatorView):
    """One click; stored exactly once per ``idempotency_key`` (201 stored, 200 a retry of a stored click)."""

    @extend_schema(
        parameters=[TOKEN_PARAMETER],
        request=contract.ClickIn,
        responses={201: contract.ClickOut, 200: contract.ClickOut, **ERRORS, **REFUSED},
    )
    def post(self, request, token: str):
        # The hot path: the token names the session, and click_ingest reads it with its trials in one query.
        try:
            session_id = session_token_read(token=token)
        except TokenInvalid as exc:
            raise Http404(str(exc)) from None
        data = self.input(contract.ClickIn)
        try:
            receipt = click_ingest(session_id=session_id, **data)
        except ClickRefused as exc:
            raise InputRefused(
                str(exc), field=exc.field, status_code=409, code=exc.reason, position=data["position"]
            ) from None
        except Session.DoesNotExist:
            raise Http404(_("session not found.")) from None
        body = click_answer(receipt, session_id=session_id, carried=data.get("next_presentation"))
        return Response(body, status=status.HTTP_201_CREATED if receipt.created else status.HTTP_200_OK)


class Presented(AnnotatorView):
    """The player is about to show a trial (``collector.services.presentations`` has the rules)."""

    @extend_schema(
        parameters=[TOKEN_PARAMETER],
        request=contract.PresentedIn,
        responses={200: contract.PresentedOut, **ERRORS, **REFUSED},
    )
    def post(self, request, token: str):
        # Like the click: the token names the session, and the service reads what it needs itself.
        try:
            session_id = session_token_read(token=token)
        except TokenInvalid as exc:
            raise Http404(str(exc)) from None
        data = self.input(contract.PresentedIn)
        try:
            result = trial_presented_record(session_id=session_id, **data)
        except Session.DoesNotExist:
            raise Http404(_("session not found.")) from None
        except PresentationRefused as exc:
            raise InputRefused(
                str(exc), field=None, status_code=409, code=exc.reason, position=data["position"]
            ) from None
        except ValueError as exc:
            raise InputRefused(str(exc), field="position") from None
        return Response({"ok": True, **result})


class Problem(AnnotatorView):
    """The player showed the annotator a refusal (a 4xx it stops retrying): stored on the session, logged."""

    @extend_schema(parameters=[TOKEN_PARAMETER], request=contract.ProblemIn, responses={204: None, **ERRORS})
    def post(self, request, token: str):
        session = session_from_token(token)
        data = self.input(contract.ProblemIn)
        session_problem_record(session=session, **data)
        return Response(status=status.HTTP_204_NO_CONTENT)


class Heartbeat(AnnotatorView):
    """The player is open (every ``HEARTBEAT_S`` s, and on each visibility change): the batch keeps its
    reservations; after a release (the worker was away past the study's grace period) they are re-reserved,
    replaced or dropped, and ``reclaimed`` tells the player to reload (``collector.services.reservations``)."""

    @extend_schema(
        parameters=[TOKEN_PARAMETER],
        request=contract.HeartbeatIn,
        responses={200: contract.HeartbeatOut, **ERRORS},
    )
    def post(self, request, token: str):
        session_id = session_id_from_token(token)
        data = self.input(contract.HeartbeatIn)
        try:
            answer = session_heartbeat(
                session_id=session_id, visibility=data["visibility"], page=data["page"]
            )
        except Session.DoesNotExist:
            raise Http404(_("session not found.")) from None
        return Response({"ok": True, **answer})


class Finish(AnnotatorView):
    """The completion step: the code (and where to take it) once the server holds every click."""

    @extend_schema(
        parameters=[TOKEN_PARAMETER],
        request=contract.FinishIn,
        responses={200: contract.FinishOut, **ERRORS, **REFUSED},
    )
    def post(self, request, token: str):
        session_id = session_id_from_token(token)  # session_finish reads the session itself (locked)
        self.input(contract.FinishIn)
        try:
            finished = session_finish(session_id=session_id)
        except SessionFinishRefused as exc:
            reason = "clicks_missing" if exc.missing_positions else "session_closed"
            raise InputRefused(
                str(exc), field=None, status_code=409, code=reason, missing=exc.missing_positions
            ) from None
        except Session.DoesNotExist:
            raise Http404(_("session not found.")) from None
        return Response({"ok": True, "finish": finish_payload(finished)})


state = State.as_view()
client = ClientReport.as_view()
click = ClickView.as_view()
presented = Presented.as_view()
problem = Problem.as_view()
heartbeat = Heartbeat.as_view()
finish = Finish.as_view()
