"""What a web process imports and builds at boot for the annotator API, rather than in the request that first
needs it (``config.wsgi.warm_process`` calls :func:`annotator_api_warm` by its dotted name)."""

from __future__ import annotations

from contextlib import suppress

from collector.platforms.base import get_adapter
from collector.services.outbox import broker_warm

from . import serializers
from .api import InputRefused, validated


def annotator_api_warm() -> None:
    """The platform adapters (the finish step's payload; toloka-kit's client among them), the broker's transport
    and Celery's message machinery (the outbox's send after a finish): about 0.2 s that fell on a worker's first
    finish, mid-burst. Also the click's and the presentation's validators: DRF builds a serializer's fields
    (and the regular expressions of its validators) on first use. Connects nowhere."""
    get_adapter("link")  # registers every built-in adapter
    broker_warm()
    for contract in (serializers.ClickIn, serializers.PresentedIn, serializers.FinishIn):
        with suppress(InputRefused):  # an empty click is refused: only the building counts here
            validated(contract, {})
