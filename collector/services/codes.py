"""Completion codes: an HMAC of our session id bound to the platform assignment id.

Unguessable (keyed with SECRET_KEY), checkable without a database lookup given the session id and the
assignment id, and different for every session, so a shared or reused code is detectable.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from django.conf import settings

CODE_LENGTH = 10


def _key() -> bytes:
    return hashlib.sha256(("clicklab.completion.code:" + settings.SECRET_KEY).encode()).digest()


def completion_code_make(*, session_id: int, assignment_id: str = "") -> str:
    """Session code: ``<session id>-<10 base32 characters>`` (e.g. ``123-K4QZ7M2XAB``)."""
    mac = hmac.new(_key(), f"{session_id}:{assignment_id}".encode(), hashlib.sha256).digest()
    return f"{session_id}-{base64.b32encode(mac).decode()[:CODE_LENGTH]}"


def completion_code_check(*, code: str, assignment_id: str = "") -> int | None:
    """The session id the code was made for, if it is genuine for ``assignment_id``; else None."""
    code = (code or "").strip().upper()
    session_part, _, _mac = code.partition("-")
    if not session_part.isdigit():
        return None
    session_id = int(session_part)
    expected = completion_code_make(session_id=session_id, assignment_id=assignment_id)
    return session_id if hmac.compare_digest(expected, code) else None
