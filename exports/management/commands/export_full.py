"""``python manage.py export_full --study ID [--study ID ...] --out FILE [--format parquet|jsonl]``."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from exports.full import FORMATS, full_export
from exports.selectors import ExportError


class Command(BaseCommand):
    help = (
        "Write every click of the studies with session, pseudonymous worker, device, pointer, viewport, "
        "devicePixelRatio, refresh rate, phase onsets, reaction time, validity and reasons. Parquet, or "
        "JSON Lines where pyarrow is absent (or with --format jsonl / a .jsonl file name)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--study", type=int, action="append", required=True, metavar="ID",
                            help="Study id; repeat for several.")  # fmt: skip
        parser.add_argument("--out", required=True, metavar="FILE", help="Output file (.parquet or .jsonl).")
        parser.add_argument("--format", choices=FORMATS, default=None, help="Default: from the file suffix.")
        parser.add_argument("--no-progress", action="store_true", help="No progress bar on stderr.")

    def handle(self, *args, **options):
        try:
            result = full_export(
                study_ids=options["study"],
                out_path=options["out"],
                format=options["format"],
                progress=not options["no_progress"],
                on_message=lambda message: self.stderr.write(self.style.WARNING(message)),
            )
        except ExportError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(self.style.SUCCESS(f"{result.path}: {result.rows} click(s) as {result.format}"))
