"""The Celery app. Tasks live in ``tasks/``; queues ``default`` and ``models`` (see settings.CELERY)."""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import setup_logging

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("clicklab")


def _configure() -> None:
    from django.conf import settings

    app.conf.update(settings.CELERY)


_configure()
# Lazy (no force): the worker imports ``tasks`` once Django is set up; tasks/__init__ imports every module.
app.autodiscover_tasks(["tasks"], related_name=None)


@setup_logging.connect
def _django_logging(**kwargs) -> None:
    """Workers log through settings.LOGGING (the same format and redaction filter) instead of Celery's own."""
    from logging.config import dictConfig

    from django.conf import settings

    dictConfig(settings.LOGGING)
