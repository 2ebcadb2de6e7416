"""Signed annotator tokens: each one names exactly one session and nothing else.

Tokens are ``django.core.signing`` values (HMAC-SHA256 with SECRET_KEY and a purpose salt), carried in
URLs and request bodies rather than cookies, so framed platforms (MTurk) work without third-party cookies.
"""

from __future__ import annotations

import functools
import time

from django.conf import settings
from django.core import signing
from django.utils.translation import gettext as _

_SESSION_SALT = "clicklab.annotator.session.v1"
_STUDY_LINK_SALT = "clicklab.study.link.v1"


class TokenInvalid(Exception):
    """The token is malformed, forged, for another purpose, or expired; the message is for the worker."""


def session_token_make(*, session_id: int) -> str:
    return signing.dumps({"s": session_id}, salt=_SESSION_SALT, compress=False)


def session_token_read(*, token: str, max_age_s: int | None = None) -> int:
    """Session id named by ``token``; raises TokenInvalid.

    A batch's dozen requests carry the same token: the signature of a token seen before is not checked again
    (``_session_token_signed``, per process, keyed by the token and the keys it was checked with); its age
    always is."""
    age = settings.ANNOTATOR_TOKEN_MAX_AGE_S if max_age_s is None else max_age_s
    session_id, signed_at = _session_token_signed(
        token, settings.SECRET_KEY, tuple(settings.SECRET_KEY_FALLBACKS)
    )
    if age is not None and time.time() - signed_at > age:
        raise TokenInvalid(_("this task link has expired; open the task again from the platform."))
    return session_id


@functools.lru_cache(maxsize=8192)
def _session_token_signed(token: str, secret_key: str, fallbacks: tuple) -> tuple[int, int]:
    """(session id, signing time in epoch seconds) of a session token whose signature holds under
    ``secret_key`` or one of ``fallbacks`` (the settings', passed so that changing them never reuses a check
    made with others); raises TokenInvalid, which is not cached. A profile of the load suite put the check
    (HMAC, base64, JSON) at 4 % of the web workers' time."""
    invalid = _("this task link is not valid; open the task again from the platform.")
    try:
        payload = signing.loads(token, salt=_SESSION_SALT, max_age=None)
        signed_at = signing.b62_decode(token.rsplit(":", 2)[1])
    except (signing.BadSignature, IndexError, ValueError):
        raise TokenInvalid(invalid) from None
    if not isinstance(payload, dict) or not isinstance(payload.get("s"), int):
        raise TokenInvalid(invalid)
    return payload["s"], signed_at


def study_link_token_make(*, study_id: int, device: str = "") -> str:
    """A reusable entry link for a study (standalone platform): each visit mints its own worker."""
    return signing.dumps({"study": study_id, "device": device}, salt=_STUDY_LINK_SALT, compress=False)


#: How long a simulated annotators' entry link (``bot_link_token_make``) is good for.
BOT_LINK_MAX_AGE_S = 24 * 3600


def bot_link_token_make(*, study_id: int, device: str, run: str) -> str:
    """The entry link of one run of simulated annotators (``collector.services.bots``): a study link that
    also names the run, so the entry starts ``Session.is_bot`` batches, on a draft too. Made only by the
    researcher's bot run (the study page's button, ``manage.py study_bots``); good for a day."""
    return signing.dumps(
        {"study": study_id, "device": device, "bot": run}, salt=_STUDY_LINK_SALT, compress=False
    )


def study_link_token_read(*, token: str) -> dict:
    """The payload of a study link: ``study``, ``device`` ("" any) and, for a bot run's link, ``bot``."""
    try:
        payload = signing.loads(token, salt=_STUDY_LINK_SALT)
    except signing.BadSignature:
        raise TokenInvalid(_("this study link is not valid; ask the researcher for a new link.")) from None
    if not isinstance(payload, dict) or not isinstance(payload.get("study"), int):
        raise TokenInvalid(_("this study link is not valid; ask the researcher for a new link."))
    if "bot" in payload:
        try:
            signing.loads(token, salt=_STUDY_LINK_SALT, max_age=BOT_LINK_MAX_AGE_S)
        except signing.SignatureExpired:
            raise TokenInvalid(
                "this simulated annotators' link is older than a day; run the bots again."
            ) from None
    return payload
