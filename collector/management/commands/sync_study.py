"""``manage.py sync_study <study id>``: review submitted work now (what the beat job does every minute)."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from collector.models import PlatformCampaign, Study
from collector.platforms import PlatformError
from collector.services.launch import study_platform_status, study_sync


class Command(BaseCommand):
    help = (
        "Fetch submitted assignments, accept or reject them from our validation, pay bonuses; print status."
    )

    def add_arguments(self, parser):
        parser.add_argument("study_id", type=int)

    def handle(self, *args, study_id: int, **options):
        if not PlatformCampaign.objects.filter(study_id=study_id).exists():
            raise CommandError(
                f"study {study_id} was not launched on a platform; run launch_study {study_id} first."
            )
        try:
            report = study_sync(study_id=study_id)
        except PlatformError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write("sync: " + json.dumps(report))
        study = Study.objects.get(pk=study_id)
        self.stdout.write("status:\n" + json.dumps(study_platform_status(study=study), indent=2))
