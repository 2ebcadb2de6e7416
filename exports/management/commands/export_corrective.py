"""``python manage.py export_corrective --study ID --out DIR``: a corrective campaign's outputs (issue 17)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from exports.corrective import corrective_export
from exports.selectors import ExportError


class Command(BaseCommand):
    help = (
        "Write a corrective-click campaign's final masks (COCO JSON with pycocotools RLE + PNGs), its full click "
        "log (clicks.csv) and the seed-001 report (report.json, quality_vs_time.png) into DIR."
    )

    def add_arguments(self, parser):
        parser.add_argument("--study", type=int, required=True, metavar="ID", help="Corrective study id.")
        parser.add_argument("--out", required=True, metavar="DIR", help="Output folder (created).")

    def handle(self, *args, **options):
        try:
            result = corrective_export(study_id=options["study"], out_dir=options["out"])
        except ExportError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            self.style.SUCCESS(
                f"{result.out_dir}: {result.annotations} mask(s), {result.clicks} click(s); "
                f"final mIoU {result.report['final_miou']}"
            )
        )
