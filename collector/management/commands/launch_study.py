"""``manage.py launch_study <study id> [--estimate-only]``: budget estimate, then launch on the platform."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from collector.models import Study
from collector.platforms import PlatformError
from collector.services.launch import (
    LaunchRefused,
    study_budget_estimate,
    study_launch,
    study_platform_status,
)
from collector.services.studies import StudyStateError


class Command(BaseCommand):
    help = "Estimate the cost of a study and launch it on its crowd platform (pools, tasks, open)."

    def add_arguments(self, parser):
        parser.add_argument("study_id", type=int)
        parser.add_argument(
            "--estimate-only", action="store_true", help="Print the budget estimate and stop."
        )

    def handle(self, *args, study_id: int, estimate_only: bool, **options):
        study = Study.objects.filter(pk=study_id).first()
        if study is None:
            raise CommandError(f"no study with id {study_id}; list them in the admin (Studies).")
        self.stdout.write("budget estimate:\n" + json.dumps(study_budget_estimate(study=study), indent=2))
        if estimate_only:
            return
        try:
            study_launch(study_id=study_id)
        except (PlatformError, LaunchRefused, StudyStateError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write("launched:\n" + json.dumps(study_platform_status(study=study), indent=2))
