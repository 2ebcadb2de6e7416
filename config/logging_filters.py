"""Keep secrets out of logs: any configured secret value is replaced before a record is written."""

from __future__ import annotations

import logging

SECRET_SETTING_NAMES = (
    "SECRET_KEY",
    "TOLOKA_TOKEN",
    "PROLIFIC_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_ACCESS_KEY_ID",
)


def secret_values() -> list[str]:
    from django.conf import settings

    values = [getattr(settings, name, "") for name in SECRET_SETTING_NAMES]
    return [v for v in values if isinstance(v, str) and len(v) >= 6]


class RedactSecretsFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string is the logger's problem, not ours
            return True
        redacted = message
        for value in secret_values():
            if value in redacted:
                redacted = redacted.replace(value, "[redacted]")
        if redacted != message:
            record.msg, record.args = redacted, ()
        return True
