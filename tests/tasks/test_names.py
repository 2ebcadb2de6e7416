"""tasks/names.py: every task name the code writes is one the Celery app has registered (issue 19).

A misspelt name would otherwise only show in production, as a message no worker takes (a beat entry, a
route, an outbox intent); these checks fail at once, naming the culprit.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

import pytest

from benchmark.engine import CELERY_TASK_NAME
from config.celery import app as celery_app
from tasks import names

NAMES = {constant: value for constant, value in vars(names).items() if constant.isupper()}


@pytest.fixture(scope="module")
def registered() -> dict:
    """The app's tasks by name, once every task module is imported (as a worker does at start)."""
    from config.celery import app

    app.loader.import_default_modules()
    return {name: task for name, task in app.tasks.items() if not name.startswith("celery.")}


def test_every_name_is_a_registered_task(registered):
    assert len(NAMES) >= 13
    unregistered = sorted(
        f"{constant} = {value!r}" for constant, value in NAMES.items() if value not in registered
    )
    assert not unregistered, f"tasks/names.py names tasks no module registers: {unregistered}"


def test_every_registered_task_has_a_name_and_is_named_after_its_function(registered):
    assert set(registered) == set(NAMES.values()), (
        "every task is registered under a constant of tasks/names.py"
    )
    for name, task in registered.items():
        function = f"{type(task).__module__}.{type(task).__name__}"
        assert name == function, f"task {name!r} runs {function}: name it after the function it runs"


def test_names_are_one_per_task():
    assert len(set(NAMES.values())) == len(NAMES), f"two constants name the same task: {NAMES}"


def test_every_beat_entry_and_route_names_a_registered_task(registered):
    beat = celery_app.conf["beat_schedule"]
    assert beat
    unknown = {entry: spec["task"] for entry, spec in beat.items() if spec["task"] not in registered}
    assert not unknown, f"beat entries name unregistered tasks: {unknown}"
    routes = celery_app.conf["task_routes"]
    assert routes
    # a route may be a glob ("tasks.x.*"); it must then match at least one task
    unmatched = [route for route in routes if not any(fnmatchcase(name, route) for name in registered)]
    assert not unmatched, f"task routes match no registered task: {unmatched}"


def test_the_benchmark_library_sends_the_registered_name():
    # benchmark/ may not import the web app, so it keeps its own copy of the string
    assert CELERY_TASK_NAME == names.BENCHMARK_EVALUATE_INSTANCE
