"""Fixtures shared by the whole suite.

The only gated tests are those reading ``../shared/datasets`` (marker ``dataset``): they run whenever
the data is there, and when ``CI`` is set its absence is a failure, never a skip.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import pytest

from tests.support.upstream_packages import installed_package  # noqa: F401  (a fixture)

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SHARED_DATASETS = Path(
    os.environ.get("CLICKLAB_SHARED_DATASETS", PROJECT_ROOT.parent / "shared" / "datasets")
)
GRABCUT_ROOT = SHARED_DATASETS / "GrabCut"

_MISSING_GRABCUT = (
    f"GrabCut dataset not found at {GRABCUT_ROOT}: these tests read the 21 GrabCut images of the shared "
    "folder. Put the project clone beside 'shared/' (so ../shared/datasets/GrabCut exists) or set "
    "CLICKLAB_SHARED_DATASETS to the folder holding GrabCut/."
)


def _grabcut_present() -> bool:
    return (GRABCUT_ROOT / "data_GT").is_dir() and (GRABCUT_ROOT / "boundary_GT").is_dir()


def pytest_collection_modifyitems(config, items):
    # Every test that drives Chromium (directly or through a fixture) carries the `browser` mark, so the
    # embedded-default run of `make test` can keep only the `embedded_smoke` ones (see the Makefile).
    for item in items:
        if "chromium" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.browser)
    if _grabcut_present() or os.environ.get("CI"):
        return
    gate = pytest.mark.skipif(True, reason=_MISSING_GRABCUT)
    for item in items:
        if item.get_closest_marker("dataset"):
            item.add_marker(gate)


@pytest.fixture(scope="session")
def grabcut_root() -> Path:
    """Path of ../shared/datasets/GrabCut; fails with instructions when it is missing."""
    if not _grabcut_present():
        pytest.fail(_MISSING_GRABCUT)
    return GRABCUT_ROOT


GRABCUT_STEMS = ("106024", "227092", "teddy")  # the three smallest GrabCut images


@pytest.fixture(scope="session")
def grabcut3(grabcut_root, tmp_path_factory) -> Path:
    """A GrabCut folder (same layout) holding three images and their masks."""
    folder = tmp_path_factory.mktemp("grabcut3") / "GrabCut"
    for sub in ("data_GT", "boundary_GT"):
        (folder / sub).mkdir(parents=True)
        for path in (grabcut_root / sub).iterdir():
            if path.stem in GRABCUT_STEMS:
                shutil.copy2(path, folder / sub / path.name)
    return folder


# --------------------------------------------------------------------------------------------------
# Test settings differ from the environment's only here


@pytest.fixture(scope="session", autouse=True)
def plain_http_pages(request):
    """Serve pages over plain http with unhashed static names, whatever DEBUG says.

    With DATABASE_URL set the settings are production ones (DEBUG off): an HTTPS redirect, secure cookies
    and a static-files manifest that only ``collectstatic`` makes. Tests talk plain http to the test client
    and to live servers, so those three are switched off; everything else stays as production has it.
    Session-wide, before any live server starts (its middleware reads these settings once).
    """
    if not request.config.pluginmanager.hasplugin("django"):  # library tests run with -p no:django too
        yield None
        return
    from django.conf import settings
    from django.test import override_settings

    # override_settings (not plain assignment) sends setting_changed, which drops cached storages
    override = override_settings(
        SECURE_SSL_REDIRECT=False,
        SESSION_COOKIE_SECURE=False,
        CSRF_COOKIE_SECURE=False,
        STORAGES={
            **settings.STORAGES,
            "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
        },
    )
    override.enable()
    yield settings
    override.disable()


# --------------------------------------------------------------------------------------------------
# Celery: a real worker process


_SHARED_WORKERS: list = []


@pytest.fixture
def celery_worker(_shared_celery_worker):
    """A real Celery worker process on the test database, shared by the session's tests; restarted when a
    test's MEDIA_ROOT differs from the one it was started with, so it reads the files this test wrote.

    Tests using it need ``@pytest.mark.django_db(transaction=True)``: the worker only sees committed rows.
    """
    _shared_celery_worker.follow_media_root()
    return _shared_celery_worker


@pytest.fixture(scope="session")
def _shared_celery_worker(django_db_setup, django_db_blocker):
    from tests.support.celery_worker import CeleryWorkerProcess, purge_queues

    with django_db_blocker.unblock():
        purge_queues()
        worker = CeleryWorkerProcess()
        worker.start()
    _SHARED_WORKERS.append(worker)
    yield worker
    _SHARED_WORKERS.remove(worker)
    worker.stop()


@contextlib.contextmanager
def _shared_workers_paused():
    """The shared worker steps aside meanwhile (stopped), and comes back afterwards."""
    paused = [worker for worker in _SHARED_WORKERS if worker.running]
    for worker in paused:
        worker.stop()
    try:
        yield
    finally:
        for worker in paused:
            worker.start()


@pytest.fixture
def exclusive_broker():
    """For tests that run (and kill) workers of their own: the shared worker steps aside meanwhile, so no
    other consumer takes their messages; it comes back afterwards."""
    with _shared_workers_paused():
        yield


@pytest.fixture(scope="module")
def exclusive_broker_for_module():
    """``exclusive_broker`` for a whole module whose tests publish tasks no worker may run: the shared worker
    would run them against rows the test's teardown is flushing (a deadlock in CI's TRUNCATE)."""
    with _shared_workers_paused():
        yield


# --------------------------------------------------------------------------------------------------
# Chromium


CHROMIUM_PATH = os.environ.get("CLICKLAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def chromium_missing_message() -> str:
    return (
        f"Chromium not found at {CHROMIUM_PATH}: install it with `apt-get update && apt-get install -y "
        "chromium` (make test does this), or set CLICKLAB_CHROMIUM to its path."
    )


@pytest.fixture(scope="session")
def chromium():
    """A real headless Chromium driven by Playwright (Debian's package, not a downloaded build)."""
    if not Path(CHROMIUM_PATH).exists():
        pytest.fail(chromium_missing_message())
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM_PATH, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


# --------------------------------------------------------------------------------------------------
# PLATFORMS: the local fake Toloka API (tests/fakes/toloka_api.py), served over HTTP on 127.0.0.1

FAKE_TOLOKA_TOKEN = "AQAAAAfakeTolokaToken0123456789xyz"


@pytest.fixture
def fake_toloka(settings):
    """A fresh fake Toloka API on a free port; settings point the real toloka-kit client at it
    (TOLOKA_API_URL, TOLOKA_TOKEN, one retry, short timeouts)."""
    from tests.fakes.toloka_api import serve

    with serve(token=FAKE_TOLOKA_TOKEN) as server:
        settings.TOLOKA_API_URL = server.url
        settings.TOLOKA_TOKEN = FAKE_TOLOKA_TOKEN
        settings.TOLOKA_RETRIES = 1
        settings.TOLOKA_TIMEOUT_S = 1.0
        settings.TOLOKA_ENTRY_TIMEOUT_S = 1.0
        yield server
