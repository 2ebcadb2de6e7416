"""``python manage.py export_rclicks --study ID [--study ID ...] --out DIR [--include-invalid]``."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from exports.rclicks import rclicks_export
from exports.selectors import ExportError


class Command(BaseCommand):
    help = (
        "Write the RClicks export of one or more studies: DIR/clicks.csv (the 11 RClicks columns), the "
        "previous-round masks DIR/SUBSEC_MASKS/.../<full_stem>.png, previews.csv for display-mode studies "
        "and manifest.json. Only valid clicks of counted sessions, unless --include-invalid."
    )

    def add_arguments(self, parser):
        parser.add_argument("--study", type=int, action="append", required=True, metavar="ID",
                            help="Study id; repeat to pool several studies.")  # fmt: skip
        parser.add_argument("--out", required=True, metavar="DIR", help="Output folder (created).")
        parser.add_argument(
            "--include-invalid",
            action="store_true",
            help="Every click of every session, with a 'valid' column (1/0) after the 11 standard ones.",
        )
        previews = parser.add_mutually_exclusive_group()
        previews.add_argument("--previews", dest="previews", action="store_const", const=True, default=None,
                              help="Always write previews.csv (display-mode name in the dataset column).")  # fmt: skip
        previews.add_argument("--no-previews", dest="previews", action="store_const", const=False,
                              help="Never write previews.csv (default: only when the studies use "
                                   "more than one display mode).")  # fmt: skip
        parser.add_argument(
            "--verify-masks",
            action="store_true",
            help="Decode every previous mask and rewrite any that is not purely 0/255 (slower; by default "
            "only the PNG header is checked: 8-bit grey at the image size).",
        )
        parser.add_argument("--no-progress", action="store_true", help="No progress bar on stderr.")

    def handle(self, *args, **options):
        try:
            result = rclicks_export(
                study_ids=options["study"],
                out_dir=options["out"],
                include_invalid=options["include_invalid"],
                previews=options["previews"],
                progress=not options["no_progress"],
                verify_mask_values=options["verify_masks"],
                on_message=lambda message: self.stderr.write(self.style.WARNING(message)),
            )
        except ExportError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            self.style.SUCCESS(
                f"{result.clicks_csv}: {result.rows} click row(s); {result.masks} previous-round mask(s)"
                + (f"; {result.previews_csv}: {result.preview_rows} row(s)" if result.previews_csv else "")
            )
        )
