"""Shared setup of the player benchmarks (not a benchmark itself): a throw-away database, the GrabCut
images imported through the real service, a published study with rendered stimuli, a live server and a
headless Chromium. Used by ``bench_player_timing.py`` and ``bench_player_loading.py``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import override_settings, setup_test_environment  # noqa: E402

GRABCUT_ROOT = (
    Path(os.environ.get("CLICKLAB_SHARED_DATASETS", PROJECT_ROOT.parent / "shared" / "datasets")) / "GrabCut"
)
CHROMIUM_PATH = os.environ.get("CLICKLAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--disable-quic",
]


@contextlib.contextmanager
def bench_environment(name: str):
    """A fresh database (``bench_<db>`` on PostgreSQL, ``<name>.sqlite3`` under CLICKLAB_VAR_DIR on the
    embedded default, tables from the models), a temporary media root, and settings for plain http."""
    if not (GRABCUT_ROOT / "data_GT").is_dir():
        raise SystemExit(
            f"GrabCut not found at {GRABCUT_ROOT}: set CLICKLAB_SHARED_DATASETS to the folder holding GrabCut/."
        )
    if not Path(CHROMIUM_PATH).exists():
        raise SystemExit(
            f"Chromium not found at {CHROMIUM_PATH}: apt-get install chromium, or set CLICKLAB_CHROMIUM."
        )
    setup_test_environment()
    test_settings = connection.settings_dict.setdefault("TEST", {})
    test_settings["MIGRATE"] = False
    if connection.vendor == "sqlite":
        test_settings["NAME"] = str(Path(settings.VAR_DIR) / f"{name}.sqlite3")
    else:
        test_settings["NAME"] = f"bench_{name}_{connection.settings_dict['NAME']}"
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        with (
            tempfile.TemporaryDirectory() as media,
            override_settings(
                MEDIA_ROOT=Path(media),
                SECURE_SSL_REDIRECT=False,
                ALLOWED_HOSTS=["127.0.0.1", "localhost"],
                STORAGES={
                    **settings.STORAGES,
                    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
                },
            ),
        ):
            yield Path(media)
    finally:
        connection.close()
        connection.creation.destroy_test_db(old_name, verbosity=0)


def grabcut_study(**fields):
    """GrabCut imported through ``dataset_import``, a published study, stimuli rendered (as the Celery
    task does after publishing)."""
    from collector.models import Study
    from collector.services.datasets import dataset_import
    from collector.services.stimuli import round_stimuli_render
    from collector.services.studies import study_create, study_publish

    dataset = dataset_import(path=GRABCUT_ROOT, layout="grabcut").dataset
    study = study_create(name="bench", dataset=dataset, **fields)
    study_publish(study_id=study.pk)
    study = Study.objects.get(pk=study.pk)
    round_stimuli_render(round_id=study.rounds.get(number=1).pk)
    return study


@contextlib.contextmanager
def live_server(*, production_static: bool = False):
    """Django behind a threaded WSGI server on 127.0.0.1 (static files included); yields its URL.

    ``production_static``: serve static files as production does — ``collectstatic`` into a temporary
    root with the manifest storage that writes compressed copies, served by WhiteNoise's middleware
    (hashed names, gzip when the browser accepts it, DEBUG off). Otherwise Django's development static
    handler serves them from the source folder, uncompressed, as ``make demo`` does."""
    from django.contrib.staticfiles.handlers import StaticFilesHandler
    from django.core.management import call_command
    from django.test.testcases import LiveServerThread

    with contextlib.ExitStack() as stack:
        static_handler = StaticFilesHandler
        if production_static:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            stack.enter_context(
                override_settings(
                    DEBUG=False,
                    STATIC_ROOT=root,
                    WHITENOISE_AUTOREFRESH=False,
                    WHITENOISE_USE_FINDERS=False,
                    STORAGES={
                        **settings.STORAGES,
                        "staticfiles": {"BACKEND": "config.static_storage.ModuleAwareStaticFilesStorage"},
                    },
                )
            )
            call_command("collectstatic", interactive=False, verbosity=0)

            def static_handler(application):  # WhiteNoise (a middleware) serves /static/
                return application

        thread = LiveServerThread("127.0.0.1", static_handler=static_handler, connections_override={})
        thread.daemon = True
        thread.start()
        thread.is_ready.wait()
        if thread.error:
            raise thread.error
        try:
            yield f"http://127.0.0.1:{thread.port}"
        finally:
            thread.terminate()


@contextlib.contextmanager
def chromium():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM_PATH, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


def percentile(values, q: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=float), q))
