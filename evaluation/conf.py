"""Limits of the evaluation server; each can be overridden by a Django setting of the same name."""

from __future__ import annotations

import os

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

DEFAULTS: dict[str, int | str] = {
    "EVAL_RUN_TTL_S": 24 * 3600,  # a run expires this long after it was created
    "EVAL_MAX_ACTIVE_RUNS": 3,  # unfinished, unexpired runs per user
    # request body of a submission; at most Django's DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB by default)
    "EVAL_MAX_UPLOAD_BYTES": 2_500_000,
    "EVAL_INLINE_MAX_PIXELS": 4_000_000,  # larger samples are scored by a Celery worker
    "EVAL_RATE_LIMIT": "6000/min",  # requests per key (or per user without a key)
    "EVAL_KEY_CACHE_S": 5,  # a process remembers a valid key this long (a revocation elsewhere takes this long)
    "EVAL_MAX_CLICKS": 100,
    "EVAL_MAX_GROUPS": 20,  # clicking groups of a clicker="group" run
    # clicking-group runs compute clickability maps: in a Celery worker for samples larger than this (0: all).
    # In the request up to the same size as the other clickers: a queue hop per interaction made a remote
    # group run 5-8x slower than a local one with a fast method (bench/bench_eval_remote.py).
    "EVAL_GROUP_INLINE_MAX_PIXELS": 4_000_000,
}


def limit(name: str):
    """The Django setting ``name``, else the environment variable ``CLICKLAB_<name>``, else the default."""
    if hasattr(settings, name):
        return getattr(settings, name)
    raw = os.environ.get(f"CLICKLAB_{name}")
    if raw is None:
        return DEFAULTS[name]
    try:
        return type(DEFAULTS[name])(raw)
    except ValueError:
        raise ImproperlyConfigured(
            f"environment variable CLICKLAB_{name}={raw!r} is not {'a whole number' if isinstance(DEFAULTS[name], int) else 'a ' + type(DEFAULTS[name]).__name__}: set it to "
            f"e.g. {DEFAULTS[name]!r}, or unset it for that default."
        ) from None
