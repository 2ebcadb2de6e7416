"""python manage.py demo — set up the demo study and run the web server and a Celery worker.

Builds the demo dataset (scikit-image photos, masks drawn by collector.demo), imports it, creates a
researcher login and a published demo study, prints the annotator link, then runs ``runserver`` and a real
``celery worker`` (with beat) on the configured broker. Ctrl-C stops both.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand

from collector.demo import DEMO_DATASET_NAME, build_demo_dataset
from collector.models import Dataset, Study
from collector.services.datasets import dataset_import
from collector.services.studies import study_create, study_publish
from collector.services.tokens import study_link_token_make

DEMO_STUDY_NAME = "Demo study (Object CutOut)"
DEMO_USER = "researcher"


class Command(BaseCommand):
    help = "Set up the demo study and serve the app with a Celery worker on 127.0.0.1 (Ctrl-C stops both)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--setup-only", action="store_true", help="Prepare data and print links; do not serve."
        )
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, *args, setup_only: bool, port: int, **options):
        study, password = self.setup()
        base = f"http://127.0.0.1:{port}"
        token = study_link_token_make(study_id=study.pk)
        self.stdout.write("")
        self.stdout.write(self.style.SUCCESS("Clicklab demo is ready."))
        self.stdout.write(f"  Annotator link (open it in a browser, PC or phone): {base}/s/{token}/")
        self.stdout.write(f"  Researcher area: {base}/researcher/   admin: {base}/admin/")
        self.stdout.write(
            f"  Researcher login: {DEMO_USER} / {password}   (kept in {self.credentials_path()})"
        )
        if setup_only:
            return
        self.serve(port)

    def credentials_path(self) -> Path:
        return Path(settings.VAR_DIR) / "demo" / "credentials.txt"

    def setup(self) -> tuple[Study, str]:
        folder = Path(settings.VAR_DIR) / "demo" / "dataset"
        if not (folder / "descriptions.csv").exists():
            self.stdout.write("Drawing the demo dataset (scikit-image photos, masks computed here)...")
            build_demo_dataset(folder)
        result = dataset_import(path=folder, layout="folder", name=DEMO_DATASET_NAME)
        self.stdout.write(
            f"Dataset {result.dataset.name!r}: {result.instances} instances"
            + (" (already imported)" if result.unchanged else " imported")
        )
        password = self.ensure_researcher()
        study = Study.objects.filter(
            name=DEMO_STUDY_NAME, dataset=Dataset.objects.get(name=DEMO_DATASET_NAME)
        ).first()
        if study is None:
            study = study_create(
                name=DEMO_STUDY_NAME,
                dataset=result.dataset,
                owner=User.objects.get(username=DEMO_USER),
                batch_size=5,  # the demo has 5 photos; a batch never shows an image twice
                min_valid_per_session=4,
                quota_pc=3,
                quota_mobile=3,
            )
        if study.state == Study.State.DRAFT:
            study = study_publish(study_id=study.pk)
        return study, password

    def ensure_researcher(self) -> str:
        path = self.credentials_path()
        user = User.objects.filter(username=DEMO_USER).first()
        if user is not None and path.exists():
            return path.read_text().strip()
        password = os.environ.get("DEMO_PASSWORD") or secrets.token_urlsafe(9)
        if user is None:
            user = User.objects.create_user(DEMO_USER, password=password)
        else:
            user.set_password(password)
        user.is_staff = True
        user.is_superuser = True
        user.save()
        user.groups.add(Group.objects.get_or_create(name="researchers")[0])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(password + "\n")
        path.chmod(0o600)
        return password

    def serve(self, port: int) -> None:
        python = sys.executable
        manage = str(Path(settings.BASE_DIR) / "manage.py")
        web = subprocess.Popen(
            [python, manage, "runserver", f"127.0.0.1:{port}", "--noreload"], start_new_session=True
        )
        worker = subprocess.Popen(
            [python, "-m", "celery", "-A", "config", "worker", "-B", "-Q", "default,models", "-c", "1",
             "--without-mingle", "--without-gossip", "-l", "INFO",
             "-s", str(Path(settings.VAR_DIR) / "celerybeat-schedule")],
            cwd=settings.BASE_DIR, start_new_session=True,
        )  # fmt: skip
        children = (web, worker)
        stopping = False

        def stop(*_):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        self.stdout.write(
            f"Serving on http://127.0.0.1:{port}/ with a Celery worker (pids {web.pid}, {worker.pid}). Ctrl-C stops both."
        )
        try:
            while not stopping and all(child.poll() is None for child in children):
                time.sleep(0.3)
        finally:
            for child in children:
                if child.poll() is None:
                    os.killpg(child.pid, signal.SIGTERM)
            for child in children:
                try:
                    child.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(child.pid, signal.SIGKILL)
            self.stdout.write("Stopped the web server and the worker.")
