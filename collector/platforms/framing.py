"""Framing policy: only pages of framed platforms (MTurk) may be shown inside another site's frame.

Every page keeps ``X-Frame-Options: DENY`` (Django's clickjacking middleware) except:

- responses a view marked with :func:`allow_platform_framing` (the MTurk entry, preview and exit pages);
- the player page ``/a/<session token>/`` and the platform exit page of a session whose study runs on a
  framed platform.

Those get ``frame-ancestors 'self' <settings.MTURK_FRAME_ANCESTORS>`` in the site's Content-Security-Policy
(config/settings.py CONTENT_SECURITY_POLICY, written by django-csp) instead of ``'none'``.
Nothing in those pages may depend on cookies (Safari drops third-party cookies in frames): the session
token travels in the URL and in request bodies.
"""

from __future__ import annotations

import re

from django.conf import settings

_SESSION_PAGE = re.compile(r"^/(?:a|platform-exit)/(?P<token>[^/]+)/$")


def allow_platform_framing(response):
    """Let the framed platforms' hosts (and only them) frame ``response``."""
    response.xframe_options_exempt = True
    if response.has_header("X-Frame-Options"):
        del response["X-Frame-Options"]
    # django-csp (the outer CSPMiddleware) writes the site's policy with this directive replaced
    replace = dict(getattr(response, "_csp_replace", None) or {})
    replace["frame-ancestors"] = ["'self'", *settings.MTURK_FRAME_ANCESTORS]
    response._csp_replace = replace
    return response


def _session_is_framed(token: str) -> bool:
    from collector.models import Session
    from collector.services.tokens import TokenInvalid, session_token_read

    from .base import get_adapter

    try:
        session_id = session_token_read(token=token)
    except TokenInvalid:
        return False
    platform = Session.objects.filter(pk=session_id).values_list("study__platform", flat=True).first()
    if not platform:
        return False
    try:
        return get_adapter(platform).framed
    except ValueError:
        return False


class FramedPlatformMiddleware:
    """Applies :func:`allow_platform_framing` where the module docstring says; must come after
    XFrameOptionsMiddleware in MIDDLEWARE (so it sees the response first and marks it exempt)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if getattr(response, "platform_frameable", False):
            return allow_platform_framing(response)
        match = _SESSION_PAGE.match(request.path_info)
        if match and request.method in ("GET", "HEAD") and _session_is_framed(match.group("token")):
            return allow_platform_framing(response)
        return response
