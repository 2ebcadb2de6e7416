"""The Celery app. Tasks live in ``tasks/``; queues ``default`` and ``models`` (see settings.CELERY)."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("clicklab")


def _configure() -> None:
    from django.conf import settings

    app.conf.update(settings.CELERY)


_configure()
# Lazy (no force): the worker imports ``tasks`` once Django is set up; tasks/__init__ imports every module.
app.autodiscover_tasks(["tasks"], related_name=None)
