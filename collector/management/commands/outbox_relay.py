"""``manage.py outbox_relay``: send pending Celery task intents (the transactional outbox) until stopped.

``--once`` makes one pass and prints what it did. The production runner (``make prod``) starts this
beside the web server, the workers and beat; workers also run the relay in a thread, so it is a
belt-and-braces process, never a single point of failure.
"""

from __future__ import annotations

import signal
import threading

from django.core.management.base import BaseCommand

from collector.services.outbox import relay_forever, task_intents_relay


class Command(BaseCommand):
    help = "Send pending Celery task intents (transactional outbox) every OUTBOX_RELAY_EVERY_S seconds."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="One pass, then exit.")
        parser.add_argument("--every", type=float, default=None, help="Seconds between passes.")

    def handle(self, *args, once: bool = False, every: float | None = None, **options):
        if once:
            result = task_intents_relay()
            self.stdout.write(
                f"sent {result['sent']}, failed {result['failed']}, pending {result['pending']}"
            )
            return
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        self.stdout.write("outbox relay running; Ctrl-C stops it")
        relay_forever(stop=stop, every_s=every)
