"""python manage.py demo [--host H] [--port P] — set up the demo study and run the web server and a Celery worker.

Builds the demo dataset (scikit-image photos, masks drawn by collector.demo), imports it, creates a
researcher login and a published demo study, then runs ``runserver`` and a real ``celery worker`` (with
beat) on the configured broker, and prints the annotator links once the server answers. Ctrl-C stops both.

``--host`` is 127.0.0.1 unless asked otherwise. ``--host 0.0.0.0`` serves every network interface so a
phone on the same network can open the links: the links then name this machine's LAN address, and the
command warns that the app is reachable by anyone on that network (ground-truth masks stay private: they
never reach annotators and the researcher area needs the login). A port already in use is an error
(exit status 1) that names the port and what to do, before anything is set up.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand, CommandError

from collector.demo import DEMO_DATASET_NAME, DEMO_MASKS_VERSION, build_demo_dataset
from collector.models import Study
from collector.services.datasets import dataset_import
from collector.services.studies import study_create, study_publish
from collector.services.tokens import study_link_token_make
from config import ports
from config.environment import read

DEMO_STUDY_NAME = "Demo study (Object CutOut)"
DEMO_USER = "researcher"
ALL_INTERFACES = ("0.0.0.0", "::")
LOOPBACK = ("127.0.0.1", "localhost", "::1")
SERVER_START_TIMEOUT_S = 120.0


def port_in_use(*, host: str, port: int) -> bool:
    """True when ``host:port`` cannot be bound now (the way runserver binds it: SO_REUSEADDR set)."""
    try:
        return ports.port_in_use(host=host, port=port)
    except OSError as exc:
        raise CommandError(f"cannot serve on {host}:{port}: {exc.strerror}. Check HOST={host}.") from None


def lan_address() -> str:
    """This machine's address on its local network (the interface of the default route), else 127.0.0.1.

    Connecting a UDP socket sends nothing; it only asks the kernel which local address it would use."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))
            return probe.getsockname()[0]
        except OSError:
            return "127.0.0.1"


class Command(BaseCommand):
    help = (
        "Set up the demo study and serve the app with a Celery worker (default 127.0.0.1:8000; "
        "--host 0.0.0.0 to open it on a phone on the same network). Ctrl-C stops both."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--setup-only", action="store_true", help="Prepare data and print links; do not serve."
        )
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--host",
            default="127.0.0.1",
            help="Address to serve on: 127.0.0.1 (this machine only, default) or 0.0.0.0 (every interface).",
        )

    def handle(self, *args, setup_only: bool, port: int, host: str, **options):
        if not 0 < port < 65536:
            raise CommandError(f"PORT={port} is not a TCP port; use a number from 1024 to 65535, e.g. 8001.")
        if not setup_only and port_in_use(host=host, port=port):
            raise CommandError(
                f"port {port} on {host} is already in use (another server, or an earlier `make demo` still "
                f"running). Stop that program, or choose another port: make demo PORT={port + 1}"
            )
        public_host = lan_address() if host in ALL_INTERFACES else host
        base = read("PUBLIC_BASE_URL", "").rstrip("/") or f"http://{public_host}:{port}"
        if host in ALL_INTERFACES:
            self.stderr.write(
                self.style.WARNING(
                    f"HOST={host}: the app is reachable from every machine that can reach {public_host}:{port} "
                    "(your local network), not just this one. Ground-truth masks stay private (annotators only "
                    "get the stimuli, the researcher area needs the login), but anyone on the network can open "
                    "the annotator links. Stop it with Ctrl-C when you are done."
                )
            )
        study, password = self.setup()
        if setup_only:
            self.print_links(study, password, base)
            return
        self.serve(host=host, port=port, base=base, public_host=public_host, study=study, password=password)

    def print_links(self, study: Study, password: str, base: str) -> None:
        self.stdout.write("")
        self.stdout.write(self.style.SUCCESS("Clicklab demo is ready."))
        self.stdout.write(
            f"  Annotator link (open it in a browser, PC or phone): {base}/s/{study_link_token_make(study_id=study.pk)}/"
        )
        for device, words in (("pc", "PC only"), ("mobile", "phone only")):
            token = study_link_token_make(study_id=study.pk, device=device)
            self.stdout.write(f"  Annotator link, {words}: {base}/s/{token}/")
        self.stdout.write(
            f"  Researcher area: {base}/researcher/   (links and QR codes: {base}/researcher/studies/{study.pk}/)"
        )
        self.stdout.write(
            f"  Researcher login: {DEMO_USER} / {password}   (kept in {self.credentials_path()})"
        )

    def credentials_path(self) -> Path:
        return Path(settings.VAR_DIR) / "demo" / "credentials.txt"

    def setup(self) -> tuple[Study, str]:
        folder = Path(settings.VAR_DIR) / "demo" / f"dataset-v{DEMO_MASKS_VERSION}"
        if not (folder / "descriptions.csv").exists():
            self.stdout.write("Drawing the demo dataset (scikit-image photos, masks computed here)...")
            build_demo_dataset(folder)
        result = dataset_import(path=folder, layout="folder", name=DEMO_DATASET_NAME)
        self.stdout.write(
            f"Dataset {result.dataset.name!r}: {result.instances} instances"
            + (" (already imported)" if result.unchanged else " imported")
        )
        password = self.ensure_researcher()
        study = Study.objects.filter(name=DEMO_STUDY_NAME, dataset=result.dataset).first()
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
        password = read("DEMO_PASSWORD") or secrets.token_urlsafe(9)
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

    def child_environment(self, *, host: str, public_host: str, base: str) -> dict[str, str]:
        """The web server's environment: links it makes name ``base``; it answers to the hosts people use."""
        env = os.environ.copy()
        env.setdefault("PUBLIC_BASE_URL", base)
        hosts = [h for h in env.get("ALLOWED_HOSTS", "").split(",") if h.strip()]
        hosts += ["127.0.0.1", "localhost", public_host] + ([] if host in ALL_INTERFACES else [host])
        env["ALLOWED_HOSTS"] = ",".join(dict.fromkeys(h.strip() for h in hosts))
        return env

    def wait_until_serving(self, web: subprocess.Popen, *, host: str, port: int) -> None:
        """Return once the web server answers HTTP on ``host:port``; CommandError if it exits first."""
        probe = "127.0.0.1" if host in ALL_INTERFACES else (f"[{host}]" if ":" in host else host)
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if web.poll() is not None:
                raise CommandError(
                    f"the web server exited with status {web.returncode} before serving on port {port} "
                    "(see its message above); if the port was taken meanwhile, run make demo PORT=<another port>."
                )
            try:
                urllib.request.urlopen(f"http://{probe}:{port}/", timeout=2)
                return
            except urllib.error.HTTPError:
                return  # it answered, with whatever status
            except OSError:
                time.sleep(0.3)
        raise CommandError(
            f"the web server did not answer on port {port} within {SERVER_START_TIMEOUT_S:.0f} s."
        )

    def serve(
        self, *, host: str, port: int, base: str, public_host: str, study: Study, password: str
    ) -> None:
        python = sys.executable
        manage = str(Path(settings.BASE_DIR) / "manage.py")
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        web = subprocess.Popen(
            [python, manage, "runserver", address, "--noreload"],
            start_new_session=True,
            env=self.child_environment(host=host, public_host=public_host, base=base),
        )
        worker = subprocess.Popen(
            [python, "-m", "celery", "-A", "config", "worker", "-B", "-Q", "default,models", "-c", "1",
             "--without-mingle", "--without-gossip", "-l", "INFO",
             "-s", str(Path(settings.VAR_DIR) / "celerybeat-schedule")],
            cwd=settings.BASE_DIR, start_new_session=True,
            # the same PUBLIC_BASE_URL: the simulated annotators it runs play against the server's own links
            env=self.child_environment(host=host, public_host=public_host, base=base),
        )  # fmt: skip
        children = (web, worker)
        stopping = False

        def stop(*_):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        failure = None
        try:
            self.wait_until_serving(web, host=host, port=port)
            self.print_links(study, password, base)
            reach = (
                "every network interface"
                if host in ALL_INTERFACES
                else "this machine only (loopback); `make demo HOST=0.0.0.0` opens it to your network"
                if host in LOOPBACK
                else f"the interface of {host}"
            )
            self.stdout.write(
                f"Serving on {host}:{port}, reachable from {reach}, with a Celery worker "
                f"(pids {web.pid}, {worker.pid}). Ctrl-C stops both."
            )
            while not stopping and all(child.poll() is None for child in children):
                time.sleep(0.3)
            if not stopping:
                dead = "web server" if web.poll() is not None else "Celery worker"
                code = (web if dead == "web server" else worker).returncode
                failure = f"the {dead} exited with status {code} (see its message above); the demo stopped."
        except CommandError as exc:
            failure = str(exc)
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
        if failure:
            raise CommandError(failure)
