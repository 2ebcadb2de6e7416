"""Log line formats: JSON lines in production (``LOG_FORMAT=json``), readable lines locally.

Both carry every ``extra={...}`` field of a record (``session_id``, ``study_id``, ...), so any line can be tied
to its session. Values are written as given when JSON can hold them and as their (redacted) text otherwise;
the redaction filter (``config.logging_filters``) has already run on every handler that uses these.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Literal

from .logging_filters import _redact_value, extra_fields


def _fields(record: logging.LogRecord) -> dict:
    fields = {}
    for key, value in extra_fields(record).items():
        if (
            key == "request"
        ):  # django.request: the HttpRequest, written as method and path (django.server: a socket)
            if not hasattr(value, "get_full_path"):
                continue
            value = f"{value.method} {value.get_full_path()}"
        fields[key] = _redact_value(value)
    return fields


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ``ts`` (UTC, ISO 8601), ``level``, ``logger``, ``message``, every extra field,
    and ``exc`` (the traceback text) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in _fields(record).items():
            line[key if key not in line else f"extra_{key}"] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exc"] = record.exc_text
        if record.stack_info:
            line["stack"] = record.stack_info
        return json.dumps(line, ensure_ascii=False, default=str)


def _pair(key: str, value) -> str:
    """``key=value``; strings with spaces, quotes or ``=`` (and lists, dicts) JSON-quoted so the line splits back."""
    plain = isinstance(value, str) and value and not any(c in value for c in ' ="')
    if isinstance(value, str | list | dict) and not plain:
        return f"{key}={json.dumps(value, ensure_ascii=False, default=str)}"
    return f"{key}={value}"


class ReadableFormatter(logging.Formatter):
    """``2026-11-23 13:00:00,123 INFO collector.services.session_start session started session_id=4 study_id=2``."""

    def __init__(
        self,
        fmt: str | None = None,
        datefmt: str | None = None,
        style: Literal["%", "{", "$"] = "%",
        **kwargs,
    ):
        super().__init__(fmt or "%(asctime)s %(levelname)s %(name)s %(message)s", datefmt, style, **kwargs)

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        fields = _fields(record)
        text = super().formatMessage(record)
        return text + "".join(" " + _pair(key, value) for key, value in fields.items())


def logging_config(log_format: str, *, level: str = "INFO", gunicorn: bool = False) -> dict:
    """The ``dictConfig`` of settings.LOGGING (and, with ``gunicorn``, of config/gunicorn.py's ``logconfig_dict``):
    one console handler in ``log_format`` (json or text) with the redaction filter, for every logger that writes."""
    loggers = {
        # Django's own handlers (console only in DEBUG, mail_admins) are replaced: one handler, one filter
        "django": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "django.server": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "django.db.backends": {"level": "WARNING"},
    }
    if gunicorn:
        loggers |= {
            name: {"handlers": ["console"], "level": "INFO", "propagate": False}
            for name in ("gunicorn.error", "gunicorn.access")
        }
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"redact_secrets": {"()": "config.logging_filters.RedactSecretsFilter"}},
        "formatters": {
            "json": {"()": "config.log_format.JsonFormatter"},
            "text": {"()": "config.log_format.ReadableFormatter"},
        },
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "formatter": log_format,
                "filters": ["redact_secrets"],
            },
        },
        "root": {"handlers": ["console"], "level": level},
        "loggers": loggers,
    }
