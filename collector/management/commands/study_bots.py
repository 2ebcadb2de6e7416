"""``manage.py study_bots --study ID --bots N [--phone-share 0.5] [--leave-share 0.2] [--base-url URL]``:
a test run of a draft study with simulated annotators over HTTP (``collector.services.bots``)."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from collector.models import Study
from collector.services.bots import MAX_BOTS, BotRunRefused, bot_run


class Command(BaseCommand):
    help = (
        "Play N batches of a draft study as simulated annotators through the real player protocol over HTTP "
        "(PC and phone, some leaving mid-batch). Their data is flagged simulated: never in a quota or an "
        "export; the study page shows their verdicts and removes them in one click. The server must be "
        "running at --base-url (default PUBLIC_BASE_URL) with a Celery worker to validate the batches."
    )

    def add_arguments(self, parser):
        parser.add_argument("--study", type=int, required=True, help="the draft study's id")
        parser.add_argument("--bots", type=int, required=True, help=f"how many bots (1-{MAX_BOTS})")
        parser.add_argument("--phone-share", type=float, default=0.5, help="share of phone bots (0-1)")
        parser.add_argument("--leave-share", type=float, default=0.2, help="share leaving mid-batch (0-1)")
        parser.add_argument("--base-url", default=None, help="the server's address (default PUBLIC_BASE_URL)")
        parser.add_argument("--seed", type=int, default=None, help="seed of the devices, leavers and clicks")
        parser.add_argument("--concurrency", type=int, default=8, help="bots playing at the same time")
        parser.add_argument("--json", action="store_true", help="print every bot's outcome as JSON")

    def handle(self, *args, **options):
        study_id = options["study"]
        if not Study.objects.filter(pk=study_id).exists():
            raise CommandError(f"--study {study_id}: no such study.")
        try:
            report = bot_run(
                study_id=study_id,
                bots=options["bots"],
                phone_share=options["phone_share"],
                leave_share=options["leave_share"],
                base_url=options["base_url"],
                seed=options["seed"],
                concurrency=max(1, options["concurrency"]),
            )
        except BotRunRefused as exc:
            raise CommandError(str(exc)) from None
        summary = report.summary
        if options["json"]:
            self.stdout.write(json.dumps(report.as_dict(), indent=2))
        self.stdout.write(
            f"{summary['bots']} simulated annotators ({summary['pc']} pc, {summary['mobile']} phone): "
            f"{summary['finished']} finished, {summary['left']} left mid-batch, {summary['refused']} refused, "
            f"{summary['clicks']} clicks. Their verdicts follow on the study page once the worker validated them."
        )
        if summary["errors"]:
            raise CommandError(f"{len(summary['errors'])} bots failed; the first: {summary['errors'][0]}")
