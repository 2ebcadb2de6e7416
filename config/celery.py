"""The Celery app. Tasks live in ``tasks/``; queues ``default`` and ``models`` (see settings.CELERY)."""

from __future__ import annotations

import os
import pkgutil

from celery import Celery
from celery.signals import setup_logging

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
