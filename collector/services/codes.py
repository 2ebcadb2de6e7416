"""Completion codes: Django's signature of our session id bound to the platform assignment id.

Unguessable (``django.core.signing.Signer``: HMAC-SHA256 with SECRET_KEY and a purpose salt), checkable
without a database lookup given the session id and the assignment id, and different for every session, so a
shared or reused code is detectable. A code made under a key now in SECRET_KEY_FALLBACKS still checks (a key
rotation does not void the codes of running studies); once the key is dropped it is refused.

Codes shown before issue 35 were an HMAC keyed with a hash of SECRET_KEY (``_LegacyCodeSigner``); a worker may
hand one in days after it was shown, so they are checked too, under the same keys, until every study that was
running at the upgrade has closed (then ``_LegacyCodeSigner`` can go).
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from django.core import signing

CODE_LENGTH = 10
_SALT = "clicklab.completion.code.v2"


class _CodeSigner(signing.Signer):
    """Django's Signer (the key, then the fallback keys) with the signature written as ``CODE_LENGTH``
    upper-case base32 characters: short enough to type, and case does not matter."""

    def signature(self, value, key=None):
        full = signing.b64_decode(super().signature(value, key).encode())
        return base64.b32encode(full).decode()[:CODE_LENGTH]


class _LegacyCodeSigner(signing.Signer):
    """The codes made before issue 35: HMAC-SHA256 keyed with sha256("clicklab.completion.code:" + key)."""

    def signature(self, value, key=None):
        key_bytes = hashlib.sha256(("clicklab.completion.code:" + str(key or self.key)).encode()).digest()
        mac = hmac.new(key_bytes, str(value).encode(), hashlib.sha256).digest()
        return base64.b32encode(mac).decode()[:CODE_LENGTH]


def completion_code_make(*, session_id: int, assignment_id: str = "") -> str:
    """Session code: ``<session id>-<10 base32 characters>`` (e.g. ``123-K4QZ7M2XAB``)."""
    mac = _CodeSigner(salt=_SALT).signature(f"{session_id}:{assignment_id}")
    return f"{session_id}-{mac}"


def completion_code_check(*, code: str, assignment_id: str = "") -> int | None:
    """The session id the code was made for, if it is genuine for ``assignment_id`` under SECRET_KEY or one of
    SECRET_KEY_FALLBACKS; else None."""
    code = (code or "").strip().upper()
    session_part, _, mac = code.partition("-")
    if not session_part.isdigit() or len(mac) != CODE_LENGTH:
        return None
    session_id = int(session_part)
    signed = f"{session_id}:{assignment_id}:{mac}"
    for signer in (_CodeSigner(salt=_SALT), _LegacyCodeSigner()):
        try:
            signer.unsign(signed)
        except signing.BadSignature:
            continue
        return session_id
    return None
