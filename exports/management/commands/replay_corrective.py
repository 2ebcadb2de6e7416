"""``python manage.py replay_corrective --study ID --clicks clicks.csv [--out DIR]``: give a corrective study the
clicks of a campaign's log (issue 34): with the same dataset, settings and segmenter it makes the same masks, byte
for byte; with another segmenter it shows what that model makes of the same clicks."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from collector.services.corrective import CorrectiveRefused
from collector.services.corrective_simulation import corrective_replay
from exports.corrective import corrective_export
from exports.selectors import ExportError


class Command(BaseCommand):
    help = (
        "Work a published corrective study with the clicks of a campaign's clicks.csv (export_corrective), as "
        "logged, then optionally write the same outputs as export_corrective."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--study", type=int, required=True, metavar="ID", help="Published corrective study."
        )
        parser.add_argument("--clicks", required=True, metavar="CSV", help="clicks.csv of export_corrective.")
        parser.add_argument("--device", choices=("pc", "mobile"), default="pc")
        parser.add_argument("--celery", action="store_true", help="Model updates on the models queue.")
        parser.add_argument("--out", metavar="DIR", help="Write the campaign outputs here afterwards.")

    def handle(self, *args, **options):
        try:
            result = corrective_replay(
                study_id=options["study"],
                clicks_csv=options["clicks"],
                device=options["device"],
                inline=not options["celery"],
            )
        except (CorrectiveRefused, FileNotFoundError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"{result.sessions} session(s), {result.items} instance(s), {result.replayed_clicks} logged click(s), "
            f"{result.updates} model update(s) in {result.wall_seconds:.1f} s"
        )
        if options["out"]:
            try:
                export = corrective_export(study_id=options["study"], out_dir=options["out"])
            except ExportError as exc:
                raise CommandError(str(exc)) from None
            self.stdout.write(
                self.style.SUCCESS(f"{export.out_dir}: mIoU per round {export.report['miou_per_round']}")
            )
