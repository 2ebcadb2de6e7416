"""The Celery app. Tasks live in ``tasks/``; queues ``default`` and ``models`` (see settings.CELERY)."""

from __future__ import annotations

import os
import pkgutil

from celery import Celery
from celery.signals import setup_logging, task_prerun

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("clicklab")


def _configure() -> None:
    from django.conf import settings

    app.conf.update(settings.CELERY)


_configure()


def _task_modules() -> list[str]:
    """Every module of the ``tasks`` package (a new one needs no registration)."""
    import tasks

    return [f"tasks.{module.name}" for module in pkgutil.iter_modules(tasks.__path__)]


# Lazy (no force): the worker imports the task modules once Django is set up.
app.autodiscover_tasks(_task_modules, related_name=None)


@setup_logging.connect
def _django_logging(**kwargs) -> None:
    """Workers log through settings.LOGGING (the same format and redaction filter) instead of Celery's own."""
    from logging.config import dictConfig

    from django.conf import settings

    dictConfig(settings.LOGGING)


#: Celery's Django fix-up closes every database connection before and after each task unless this is set (to
#: the number of tasks between closes; it counts the prerun and the postrun). Closing cost each validation a
#: new PostgreSQL connection, about a tenth of its time in the load suite, and the prepared statements with
#: it. A connection is now kept as a web request keeps it (CONN_MAX_AGE, the health check), by
#: ``_database_hygiene``, and the fix-up closes it only after this many tasks.
DB_REUSE_MAX = 500
app.conf.update(CELERY_DB_REUSE_MAX=DB_REUSE_MAX)


@task_prerun.connect
def _database_hygiene(task=None, **kwargs) -> None:
    """Before each task, what Django does before each request: drop a connection that had an error, is older
    than CONN_MAX_AGE or not in autocommit, and check the kept one's health on its first use (a PostgreSQL
    restart between two tasks then costs a reconnect, not a failed task). Not for eager tasks: they run in
    the caller's process, maybe inside its transaction."""
    if task is not None and getattr(task.request, "is_eager", False):
        return
    from django.db import connections

    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close_if_unusable_or_obsolete()
