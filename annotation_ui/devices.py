"""Device class (pc / mobile) of a request, from User-Agent Client Hints and the User-Agent string.

The browser refines this later with ``pointer: coarse`` and ``navigator.userAgentData`` (reported by the
player into ``Session.client_info``/``detected_device``); a mismatch with what the platform said is a
quality signal, not a reason to refuse the worker.
"""

from __future__ import annotations

import re

_MOBILE_UA = re.compile(r"Mobi|Android|iPhone|iPod|iPad|Windows Phone|webOS|BlackBerry|Opera Mini", re.I)


def device_from_headers(headers) -> str:
    """ "mobile" or "pc" from ``Sec-CH-UA-Mobile`` (when sent) or the User-Agent."""
    hint = headers.get("Sec-CH-UA-Mobile", "")
    if hint == "?1":
        return "mobile"
    if hint == "?0":
        return "pc"
    return "mobile" if _MOBILE_UA.search(headers.get("User-Agent", "")) else "pc"
