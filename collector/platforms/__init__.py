"""Crowd-platform adapters, one per platform, chosen by ``Study.platform``.

The base adapter and the standalone-link adapter live here; ``toloka``, ``prolific`` and ``mturk`` add
theirs (see ``../shared/spec/crowd-platforms.md`` §4.5).
"""

from __future__ import annotations

from .base import (
    Entry,
    EntryRefused,
    ExternalSubmission,
    FinishAction,
    PlatformAdapter,
    PlatformConflict,
    PlatformCredentialsError,
    PlatformError,
    PlatformNotSupported,
    PlatformUnavailable,
    get_adapter,
    register_adapter,
)

__all__ = [
    "Entry",
    "EntryRefused",
    "ExternalSubmission",
    "FinishAction",
    "PlatformAdapter",
    "PlatformConflict",
    "PlatformCredentialsError",
    "PlatformError",
    "PlatformNotSupported",
    "PlatformUnavailable",
    "get_adapter",
    "register_adapter",
]
