"""``manage.py close_study <study id>``: close the platform pools and the study; print what was spent."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from collector.models import PlatformCampaign, Study
from collector.platforms import PlatformError
from collector.services.launch import study_close_platform, study_platform_status
from collector.services.studies import study_close


class Command(BaseCommand):
    help = "Stop recruiting on the platform and close the study (submitted work is still reviewed by sync)."

    def add_arguments(self, parser):
        parser.add_argument("study_id", type=int)

    def handle(self, *args, study_id: int, **options):
        study = Study.objects.filter(pk=study_id).first()
        if study is None:
            raise CommandError(f"no study with id {study_id}.")
        try:
            if PlatformCampaign.objects.filter(study=study).exists():
                study_close_platform(study_id=study_id)
            else:
                study_close(study_id=study_id)
        except PlatformError as exc:
            raise CommandError(str(exc)) from None
        study.refresh_from_db()
        self.stdout.write("closed:\n" + json.dumps(study_platform_status(study=study), indent=2))
