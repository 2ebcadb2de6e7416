"""Fixtures shared by the whole suite.

The only gated tests are those reading ``../shared/datasets`` (marker ``dataset``): they run whenever
the data is there, and when ``CI`` is set its absence is a failure, never a skip.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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


# --------------------------------------------------------------------------------------------------
# Celery: a real worker process


@pytest.fixture(scope="session")
def celery_worker(django_db_setup, django_db_blocker):
    """A real Celery worker process on the test database, shared by the session's tests.

    Tests using it need ``@pytest.mark.django_db(transaction=True)``: the worker only sees committed rows.
    """
    from tests.support.celery_worker import CeleryWorkerProcess, purge_queues

    with django_db_blocker.unblock():
        purge_queues()
        worker = CeleryWorkerProcess()
        worker.start()
    yield worker
    worker.stop()


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


@pytest.fixture(scope="session")
def chromium():
    """A real headless Chromium driven by Playwright (Debian's package, not a downloaded build)."""
    if not Path(CHROMIUM_PATH).exists():
        pytest.fail(
            f"Chromium not found at {CHROMIUM_PATH}: install it with `apt-get update && apt-get install -y "
            "chromium` (make test does this), or set CLICKLAB_CHROMIUM to its path."
        )
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM_PATH, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()
