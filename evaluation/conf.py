"""Limits of the evaluation server: Django settings of these names (config/settings.py reads each from the
environment variable ``CLICKLAB_<name>``, declared in config/environment.py with its default)."""

from __future__ import annotations

from django.conf import settings

NAMES = (
    "EVAL_RUN_TTL_S",
    "EVAL_MAX_ACTIVE_RUNS",
    "EVAL_MAX_UPLOAD_BYTES",
    "EVAL_INLINE_MAX_PIXELS",
    "EVAL_RATE_LIMIT",
    "EVAL_KEY_CACHE_S",
    "EVAL_MAX_CLICKS",
    "EVAL_MAX_GROUPS",
    "EVAL_GROUP_INLINE_MAX_PIXELS",
)


def limit(name: str):
    """The Django setting ``name`` (one of ``NAMES``)."""
    if name not in NAMES:
        raise KeyError(f"{name!r} is not an evaluation limit; the limits are {', '.join(NAMES)}.")
    return getattr(settings, name)
