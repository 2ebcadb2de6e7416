"""Annotator links of a standalone-link study, per device, with QR codes to open them on a phone.

A link is ``{PUBLIC_BASE_URL}/s/<signed study-link token>/`` (``collector.services.tokens``): the token
names the study and, for the per-device links, the device class the batch is recorded as. The QR codes
are SVG made on the server (``segno``), so the page needs no script and no third party to show them.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

import segno
from django.conf import settings
from django.urls import reverse
from django.utils.safestring import mark_safe

from collector.models import Study
from collector.services.tokens import study_link_token_make

#: (device in the token, label). "" lets the entry page detect the device class.
LINK_DEVICES = (("", "Any device (detected)"), ("pc", "PC (mouse)"), ("mobile", "Phone (touch)"))


def study_link_url(*, study: Study, device: str = "") -> str:
    token = study_link_token_make(study_id=study.pk, device=device)
    return settings.PUBLIC_BASE_URL + reverse("annotation_ui:study_link", kwargs={"token": token})


#: Width the link card gives a QR code, in CSS pixels.
QR_MAX_PX = 228


def qr_svg(*, text: str, label: str) -> str:
    """An inline SVG QR code of ``text`` (error correction at least M, 2-module quiet zone).

    Modules are a whole number of CSS pixels (as large as fit in :data:`QR_MAX_PX`) and the SVG is shown at
    its own size with crisp edges: a code scaled by a fraction of a pixel blurs its module edges, which
    camera decoders (and OpenCV's) then miss.
    """
    code = segno.make(text, error="m")
    modules = code.symbol_size(scale=1, border=2)[0]
    scale = max(3, QR_MAX_PX // modules)
    svg = code.svg_inline(
        scale=scale, border=2, dark="#000", light="#fff", svgclass="qr", lineclass="qr-line"
    )
    svg = svg.replace("<svg ", '<svg shape-rendering="crispEdges" ', 1)
    # Safe to mark: the SVG holds path data only (the URL is encoded as modules, not text) and our own label.
    return mark_safe(svg.replace("<svg ", f'<svg role="img" aria-label="QR code: {label}" ', 1))


def public_base_is_loopback() -> bool:
    """True when links name this machine only (127.0.0.1, localhost): a phone cannot open them."""
    host = urlsplit(settings.PUBLIC_BASE_URL).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def study_annotator_links(*, study: Study) -> list[dict]:
    """``[{"device", "label", "url", "qr_svg"}]`` for any device, PC and phone."""
    links = []
    for device, label in LINK_DEVICES:
        url = study_link_url(study=study, device=device)
        links.append(
            {"device": device or "any", "label": label, "url": url, "qr_svg": qr_svg(text=url, label=label)}
        )
    return links
