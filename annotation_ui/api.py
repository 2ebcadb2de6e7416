"""The annotator API under ``/api/annotator/<session_token>/``: JSON, CSRF-exempt, token-only, no cookies.

Views parse the request, call one service and serialise: ``state`` (GET), ``client`` (POST, what the
browser measured), ``click`` (POST, one click, idempotent), ``finish`` (POST, the completion step).
Errors are ``{"error": message}`` with 400 (malformed), 404 (bad token), 409 (refused by the rules).
"""

from __future__ import annotations

import json

from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from collector.models import Session
from collector.services.sessions import (
    ClickRefused,
    SessionFinishRefused,
    click_record,
    session_client_report,
    session_finish,
    session_missing_positions,
)

from .payloads import finish_payload, session_payload
from .views import session_from_token

MAX_BODY_BYTES = 16_000
CLICK_FIELDS = (
    "position",
    "idempotency_key",
    "x",
    "y",
    "shown_width",
    "shown_height",
    "pointer_type",
    "reaction_ms",
    "event_timestamp_ms",
    "phase_onsets_ms",
    "blocked_clicks",
    "flags",
    "refresh_hz",
)
REQUIRED_CLICK_FIELDS = ("position", "idempotency_key", "x", "y", "shown_width", "shown_height")


class BadRequest(Exception):
    pass


def _json_body(request) -> dict:
    if len(request.body) > MAX_BODY_BYTES:
        raise BadRequest(f"request body is larger than {MAX_BODY_BYTES} bytes.")
    try:
        data = json.loads(request.body or b"{}")
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("request body is not valid JSON.") from None
    if not isinstance(data, dict):
        raise BadRequest("request body must be a JSON object.")
    return data


def _error(message: str, status: int, **extra) -> JsonResponse:
    response = JsonResponse({"error": message, **extra}, status=status)
    response["Cache-Control"] = "no-store"
    return response


def _ok(data: dict, status: int = 200) -> JsonResponse:
    response = JsonResponse(data, status=status)
    response["Cache-Control"] = "no-store"
    return response


@csrf_exempt
@never_cache
@require_GET
def state(request, token: str):
    session = session_from_token(token)
    return _ok(session_payload(session=session, token=token))


@csrf_exempt
@require_POST
def client(request, token: str):
    session = session_from_token(token)
    try:
        data = _json_body(request)
        info = data.get("client_info", {})
        session_client_report(
            session=session,
            client_info=info,
            detected_device=str(data.get("detected_device", "")),
            user_agent=request.headers.get("User-Agent", ""),
        )
    except (BadRequest, ValueError) as exc:
        return _error(str(exc), 400)
    return _ok({"ok": True})


@csrf_exempt
@require_POST
def click(request, token: str):
    session = session_from_token(token)
    try:
        data = _json_body(request)
        missing = [name for name in REQUIRED_CLICK_FIELDS if data.get(name) in (None, "")]
        if missing:
            raise BadRequest(f"missing field(s): {', '.join(missing)}.")
        if not isinstance(data["position"], int) or isinstance(data["position"], bool):
            raise BadRequest(f"position={data['position']!r} must be an integer.")
        kwargs = {name: data[name] for name in CLICK_FIELDS if name in data}
        kwargs["pointer_type"] = str(kwargs.get("pointer_type") or "")
    except BadRequest as exc:
        return _error(str(exc), 400)
    try:
        stored, created = click_record(session=session, **kwargs)
    except ClickRefused as exc:
        return _error(str(exc), 409, position=data["position"])
    return _ok(
        {
            "ok": True,
            "created": created,
            "position": stored.trial.position,
            "missing": session_missing_positions(session=session),
        },
        status=201 if created else 200,
    )


@csrf_exempt
@require_POST
def finish(request, token: str):
    session = session_from_token(token)
    try:
        finished = session_finish(session_id=session.pk)
    except SessionFinishRefused as exc:
        return _error(str(exc), 409, missing=exc.missing_positions)
    except Session.DoesNotExist:
        return _error("session not found.", 404)
    return _ok({"ok": True, "finish": finish_payload(finished)})
