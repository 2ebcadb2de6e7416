"""What a session's browser and platform tell us about its client: the device class it runs on (one of ``DEVICES``),
the browser's measurements (``client_info``, bounded so a client cannot grow the session row) and the client
report that merges later measurements into the session (``session_client_report``). ``session_start``
records the same fields when a batch starts."""

from __future__ import annotations

import json

from django.utils import timezone

from collector.models import DEVICES, Session

MAX_CLIENT_INFO_BYTES = 8000


def client_info_bounded(info: dict) -> dict:
    """``info`` itself once it is a JSON object of at most MAX_CLIENT_INFO_BYTES (serialised); ValueError
    otherwise. A start records it and a client report merges into it: both go through this bound."""
    if not isinstance(info, dict):
        raise ValueError("client_info must be a JSON object.")
    if len(json.dumps(info, default=str)) > MAX_CLIENT_INFO_BYTES:
        raise ValueError(f"client_info is larger than {MAX_CLIENT_INFO_BYTES} bytes; send fewer fields.")
    return info


def session_client_report(
    *, session: Session, client_info: dict, detected_device: str = "", user_agent: str = ""
) -> Session:
    """Merge what the browser measured (viewport, DPR, refresh rate, pointer, client hints, webdriver)
    into ``session.client_info``; ``detected_device`` is the browser's own device class."""
    merged = {**session.client_info, **client_info_bounded(client_info)}
    session.client_info = client_info_bounded(merged)
    session.last_seen_at = timezone.now()  # a report is a sign of life (collector.services.reservations)
    fields = ["client_info", "last_seen_at"]
    if detected_device in DEVICES:
        session.detected_device = detected_device
        fields.append("detected_device")
    if user_agent and not session.user_agent:
        session.user_agent = user_agent[:2000]
        fields.append("user_agent")
    session.save(update_fields=fields)
    return session
