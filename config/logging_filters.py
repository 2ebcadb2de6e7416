"""Keep secrets and annotator tokens out of logs: a filter on every handler rewrites a record before it is written.

What it removes, wherever it appears in the record (the message, its arguments, every ``extra={...}`` field,
the exception text):

- configured secret values (``SECRET_SETTING_NAMES``) -> ``[redacted]``;
- signed tokens (``collector.services.tokens``: ``django.core.signing`` values, ``payload:timestamp:signature``,
  in request paths too, where the colons may come percent-encoded) -> ``[token]``. Whoever holds a session
  token can act as that annotator, so Django's "Not Found: /a/<token>/" lines, the development server's and
  gunicorn's access lines and anything else that echoes a path carry the marker instead.

Ids (``session_id``, ``study_id``, ...) are kept: they tie a line to a session without letting anyone act on it.
"""

from __future__ import annotations

import logging
import re

SECRET_SETTING_NAMES = (
    "SECRET_KEY",
    "TOLOKA_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_ACCESS_KEY_ID",
)
TOKEN_MARK = "[token]"
SECRET_MARK = "[redacted]"

# django.core.signing.dumps: base64url payload (a leading "." when compressed), ":", base62 timestamp, ":",
# base64url HMAC-SHA256 (43 characters). Colons may arrive as %3A in a raw request path.
_SEP = r"(?::|%3[Aa])"
TOKEN_PATTERN = re.compile(
    rf"\.?[A-Za-z0-9_\-]{{2,}}{_SEP}[0-9A-Za-z]{{1,14}}{_SEP}[A-Za-z0-9_\-]{{43}}(?![A-Za-z0-9_\-])"
)

#: Attributes every LogRecord has; anything else on a record came from ``extra={...}`` (or a library's own).
STANDARD_ATTRIBUTES = frozenset(
    vars(logging.LogRecord("x", logging.INFO, __file__, 0, "", (), None)).keys()
) | {"message", "asctime", "taskName"}


def secret_values() -> list[str]:
    try:
        from django.conf import settings

        values = [getattr(settings, name, "") for name in SECRET_SETTING_NAMES]
        values += list(getattr(settings, "SECRET_KEY_FALLBACKS", []))  # former keys are secrets too
    except Exception:  # settings not configured (a library used on its own): no secrets to know of
        return []
    return [v for v in values if isinstance(v, str) and len(v) >= 6]


def redact(text: str) -> str:
    """``text`` with every configured secret and every signed token replaced by a marker."""
    for value in secret_values():
        if value in text:
            text = text.replace(value, SECRET_MARK)
    return TOKEN_PATTERN.sub(TOKEN_MARK, text)


def extra_fields(record: logging.LogRecord) -> dict:
    """The record's ``extra={...}`` fields, in the order they were set."""
    return {key: value for key, value in vars(record).items() if key not in STANDARD_ATTRIBUTES}


def _redact_value(value):
    if isinstance(value, str):
        return redact(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, list | tuple):
        return [_redact_value(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _redact_value(item) for key, item in value.items()}
    return redact(str(value))


class RedactSecretsFilter(logging.Filter):
    """On every handler (config.settings.LOGGING, the gunicorn configuration): never drops a record, rewrites it."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string is the logger's problem: keep the raw text, redacted
            message = f"{record.msg} {record.args!r}"
        redacted = redact(message)
        if redacted != message or record.args:
            record.msg, record.args = redacted, ()
        for key, value in extra_fields(record).items():
            if key == "request":  # django.request's HttpRequest: handlers read it; only its repr is written
                continue
            setattr(record, key, _redact_value(value))
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)  # formatters write exc_text, never a fresh traceback
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True
