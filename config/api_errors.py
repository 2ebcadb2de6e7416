"""One error envelope for the three JSON APIs (annotator, evaluation, researcher), answered from one place.

Every 4xx/5xx a client can read is::

    {"code": "<stable name>", "message": "<what is wrong, the field or value at fault, what to do>",
     "field": "<dotted path of the field at fault>" | null, ...}

``code`` is for programs (``not_found``, ``invalid``, ``invalid_json``, ``authentication_failed``, a refusal's
reason such as ``clicks_missing``), ``message`` for people (translated where the API speaks to workers),
``field`` null when no one field is at fault. A body with several field errors (a researcher's study form) lists
them all under ``errors`` (``[{"field", "code", "message"}, ...]``); the top-level three are the first of them.
An endpoint may add keys of its own (the annotator's 409 adds ``position``, ``missing`` or ``item``).

* :func:`exception_handler` is DRF's ``EXCEPTION_HANDLER`` (``config/settings.py``): it answers every
  ``APIException`` (``ValidationError``, ``ParseError``, ``NotAuthenticated``, ``Throttled``...), ``Http404`` and
  Django's ``PermissionDenied`` in the envelope, keeping DRF's status and headers (``WWW-Authenticate``,
  ``Retry-After``).
* :class:`ApiError` is what a view raises for an answer of its own (any status, a code, extra keys); each API
  turns its services' exceptions into it in its base view's ``handle_exception``.
* :func:`error_body` / :func:`error_response` build the same body (a dict / a ``JsonResponse``) where DRF does
  not run: middleware (``annotation_ui.errors``, ``config.unavailable``) and plain Django views.
* :class:`ErrorEnvelope` and :func:`error_responses` document it in the OpenAPI schemas (drf-spectacular).

This module imports nothing of the apps, so every app can import it.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, JsonResponse
from drf_spectacular.utils import OpenApiResponse
from rest_framework import exceptions, serializers
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

#: the description each documented error status gets in a schema, unless the endpoint says more
STATUS_MEANINGS = {
    400: "Malformed input; `field` names it.",
    401: "No valid credentials; `message` says which to send.",
    403: "Not allowed for these credentials.",
    404: "Not found (or not yours).",
    405: "Method not allowed.",
    406: "The Accept header asks for a type this endpoint cannot answer.",
    409: "Refused by the rules; `code` says which.",
    410: "Gone.",
    413: "The body is too large.",
    415: "The body is not JSON.",
    429: "Too many requests; wait as `Retry-After` says.",
    502: "An upstream service (a crowd platform) refused or failed.",
    503: "The database is unavailable for the moment; try again.",
}


def error_body(code: str, message: str, *, field: str | None = None, **extra: Any) -> dict:
    """The envelope as a dict: ``{"code", "message", "field", **extra}``."""
    return {"code": code, "message": message, "field": field, **extra}


def error_response(
    status: int, code: str, message: str, *, field: str | None = None, **extra: Any
) -> JsonResponse:
    """The envelope as a Django ``JsonResponse`` (never cached), for code DRF does not run."""
    response = JsonResponse(error_body(code, message, field=field, **extra), status=status)
    response["Cache-Control"] = "no-store"
    return response


class ApiError(exceptions.APIException):
    """An error answer of a view's own: ``status``, ``code``, ``message``, ``field`` and extra keys."""

    def __init__(
        self, status: int, code: str, message: str, *, field: str | None = None, **extra: Any
    ) -> None:
        super().__init__(message, code)
        self.status_code = status
        self.body = error_body(code, message, field=field, **extra)


def _code_of(exc: exceptions.APIException) -> str:
    codes = exc.get_codes()
    return codes if isinstance(codes, str) else exc.default_code


def field_errors(detail: Any, path: str = "") -> list[dict]:
    """A DRF ``ValidationError.detail`` (nested dicts and lists of ``ErrorDetail``) as a flat list of
    ``{"field": dotted path or None, "code", "message"}``, in the serializer's field order."""
    if isinstance(detail, dict):
        found: list[dict] = []
        for key, nested in detail.items():
            if key in ("non_field_errors", "detail"):
                found += field_errors(nested, path)
            else:
                found += field_errors(nested, f"{path}.{key}" if path else str(key))
        return found
    if isinstance(detail, list):
        found = []
        for index, nested in enumerate(detail):
            if isinstance(nested, dict | list):
                found += field_errors(nested, f"{path}[{index}]")
            else:
                found += field_errors(nested, path)
        return found
    code = getattr(detail, "code", None) or "invalid"
    return [{"field": path or None, "code": code, "message": str(detail)}]


def _validation_body(exc: exceptions.ValidationError) -> dict:
    errors = field_errors(exc.detail)
    if not errors:
        return error_body("invalid", "The request is invalid.")
    first = errors[0]
    message = first["message"] if first["field"] is None else f"{first['field']}: {first['message']}"
    extra = {"errors": errors} if len(errors) > 1 else {}
    return error_body(first["code"], message, field=first["field"], **extra)


def exception_handler(exc: Exception, context: dict) -> Response | None:
    """DRF's ``EXCEPTION_HANDLER``: DRF's own answer (status, headers, rollback) with the envelope as its body;
    None (Django's 500) for anything that is not an API error."""
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or None)
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    response = drf_exception_handler(exc, context)
    if response is None or not isinstance(exc, exceptions.APIException):
        return response
    if isinstance(exc, ApiError):
        response.data = exc.body
    elif isinstance(exc, exceptions.ValidationError):
        response.data = _validation_body(exc)
    else:
        detail = exc.detail
        message = str(detail) if not isinstance(detail, dict | list) else _validation_body(exc)["message"]
        response.data = error_body(_code_of(exc), message, field=getattr(exc, "field", None))
    return response


class FieldErrorOut(serializers.Serializer):
    field = serializers.CharField(allow_null=True, help_text="The field at fault (dotted path), or null.")
    code = serializers.CharField()
    message = serializers.CharField()


class ErrorEnvelope(serializers.Serializer):
    """The body of every error answer (see ``config.api_errors``)."""

    code = serializers.CharField(help_text="A stable, machine-readable name of the error.")
    message = serializers.CharField(help_text="What is wrong, naming the field or value, and what to do.")
    field = serializers.CharField(allow_null=True, help_text="The field at fault (dotted path), or null.")
    errors = FieldErrorOut(
        many=True, required=False, help_text="Every field error, when the body has several."
    )


def error_responses(
    *statuses: int, envelope: type[serializers.Serializer] = ErrorEnvelope, **descriptions: str
) -> dict:
    """``{status: OpenApiResponse(envelope)}`` for an ``extend_schema(responses=...)``; ``descriptions``
    (``s404="..."``) replace the default meaning of a status."""
    return {
        status: OpenApiResponse(
            envelope, description=descriptions.get(f"s{status}", STATUS_MEANINGS.get(status, ""))
        )
        for status in statuses
    }


def page_not_found(request, exception):
    """``handler404`` (``config/urls.py``): an address under ``/api/`` that names no endpoint (a run id that is
    not a UUID, a typo) is a 404 in the envelope like any other of the API's; every other page is Django's."""
    if request.path.startswith("/api/"):
        return error_response(
            404,
            "not_found",
            f"{request.path} is not an address of this API; see its schema for the addresses.",
        )
    from django.views.defaults import page_not_found as django_page_not_found

    return django_page_not_found(request, exception)
