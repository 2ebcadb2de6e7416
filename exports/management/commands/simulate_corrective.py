"""``python manage.py simulate_corrective --study ID [--out DIR]``: a researcher's dry run of a corrective
campaign with the seed-001 simulated annotator instead of people (issue 17)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from collector.services.corrective import CorrectiveRefused
from collector.services.corrective_simulation import corrective_simulate
from exports.corrective import corrective_export


class Command(BaseCommand):
    help = (
        "Work a published corrective study with seed 001's simulated annotators "
        "(benchmark.clickers.AnnotatorSimulator.seed_001) "
        "until no instance is left, then optionally write the same outputs as export_corrective."
    )

    def add_arguments(self, parser):
        parser.add_argument("--study", type=int, required=True, metavar="ID")
        parser.add_argument("--device", choices=("pc", "mobile"), default="pc")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--max-sessions", type=int, default=None)
        parser.add_argument(
            "--noise-px", type=float, default=3.0, help="Click noise sigma (px; seed 001: 3)."
        )
        parser.add_argument(
            "--min-region-px",
            type=int,
            default=100,
            help="Smallest error region clicked (px; seed 001: 10 x 10).",
        )
        parser.add_argument(
            "--mode",
            choices=("center", "uniform", "boundary"),
            default="center",
            help="Where in its error region a click goes: the centre (seed 001's simulations), uniform (its "
            "campaign's annotators) or the boundary.",
        )
        parser.add_argument("--celery", action="store_true", help="Model updates on the models queue.")
        parser.add_argument("--out", metavar="DIR", help="Write the campaign outputs here afterwards.")

    def handle(self, *args, **options):
        try:
            result = corrective_simulate(
                study_id=options["study"],
                device=options["device"],
                seed=options["seed"],
                max_sessions=options["max_sessions"],
                noise_sigma_px=options["noise_px"],
                min_region_px=options["min_region_px"],
                mode=options["mode"],
                inline=not options["celery"],
            )
        except CorrectiveRefused as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"{result.sessions} session(s), {result.items} instance(s), {result.updates} model update(s) in "
            f"{result.wall_seconds:.1f} s"
        )
        if options["out"]:
            export = corrective_export(study_id=options["study"], out_dir=options["out"])
            self.stdout.write(
                self.style.SUCCESS(f"{export.out_dir}: mIoU per round {export.report['miou_per_round']}")
            )
