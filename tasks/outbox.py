"""The outbox relay (see ``collector.services.outbox``): a beat task, and a thread in every worker so
pending task intents are sent even where beat is not running."""

from __future__ import annotations

import logging
import threading

from celery.signals import worker_ready, worker_shutdown

from tasks import names
from tasks.base import clicklab_task

logger = logging.getLogger(__name__)
_stop = threading.Event()


@clicklab_task(names.OUTBOX_RELAY_TASK_INTENTS)
def relay_task_intents() -> dict:
    """Beat task: send pending task intents; returns {"sent", "failed", "pending"}."""
    from collector.services.outbox import task_intents_relay

    return task_intents_relay()


@worker_ready.connect
def _start_relay_thread(**_kwargs) -> None:
    from django.conf import settings

    if not settings.OUTBOX_RELAY_IN_WORKER:
        return
    from collector.services.outbox import relay_forever

    _stop.clear()
    threading.Thread(target=relay_forever, kwargs={"stop": _stop}, name="outbox-relay", daemon=True).start()
    logger.info("outbox relay thread started (every %ss)", settings.OUTBOX_RELAY_EVERY_S)


@worker_shutdown.connect
def _stop_relay_thread(**_kwargs) -> None:
    _stop.set()
