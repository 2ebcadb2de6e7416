"""python manage.py import_dataset PATH --layout LAYOUT [--name NAME]"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from benchmark.datasets import LAYOUTS
from collector.services.datasets import ImportFailed, dataset_import


class Command(BaseCommand):
    help = (
        "Import a segmentation dataset folder (images + instance masks). Atomic; re-running changes nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("path", help="Dataset folder.")
        parser.add_argument("--layout", required=True, choices=LAYOUTS, help="How the folder is organised.")
        parser.add_argument("--name", default=None, help="Dataset name (default: the layout's RClicks name).")
        parser.add_argument("--no-progress", action="store_true", help="Do not draw a progress bar.")

    def handle(self, *args, path, layout, name, no_progress, **options):
        bar = None

        def progress(done: int, total: int, what: str) -> None:
            nonlocal bar
            if no_progress:
                return
            if bar is None:
                bar = tqdm(total=total, unit="instance", desc="checking", file=self.stderr._out)
            bar.n = done
            bar.set_postfix_str(what[-40:], refresh=True)

        try:
            result = dataset_import(path=path, layout=layout, name=name, progress=progress)
        except ImportFailed as exc:
            raise CommandError(f"import failed, nothing was imported: {exc}") from None
        finally:
            if bar is not None:
                bar.close()
        for message in result.messages:
            self.stdout.write(message)
        if result.created:
            self.stdout.write(
                self.style.SUCCESS(
                    f"imported dataset {result.dataset.name!r} (id {result.dataset.pk}): {result.images} images, "
                    f"{result.instances} instances, {result.ignore_bands} with an ignore band"
                )
            )
