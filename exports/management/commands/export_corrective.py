"""``python manage.py export_corrective --study ID --out DIR [--top-percent N]``: a corrective campaign's outputs
(issue 17); with ``--top-percent`` only the best N % of the masks by the quality model Mr (issue 34)."""

from __future__ import annotations

import json

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
        parser.add_argument(
            "--top-percent",
            type=float,
            metavar="N",
            help="Keep only the best N %% of the masks by the quality model Mr (0 < N <= 100); writes quality.json "
            "(how Mr was trained, how well it ranks, whether to trust it).",
        )

    def handle(self, *args, **options):
        try:
            result = corrective_export(
                study_id=options["study"], out_dir=options["out"], top_percent=options["top_percent"]
            )
        except ExportError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            self.style.SUCCESS(
                f"{result.out_dir}: {result.annotations} mask(s), {result.clicks} click(s); "
                f"final mIoU {result.report['final_miou']}"
            )
        )
        if options["top_percent"] is not None:
            quality = json.loads((result.out_dir / "quality.json").read_text())
            self.stdout.write(
                f"kept the top {options['top_percent']:g} %: {quality['kept']} of {quality['of']} by Mr "
                f"(cross-validated Spearman {quality['cross_validation']['spearman_mean']}). {quality['verdict']}"
            )
