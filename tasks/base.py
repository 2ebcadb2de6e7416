"""``clicklab_task``: ``shared_task`` with the options every Clicklab task shares, so a task states only
its name and what differs (its retry policy, ``bind``)."""

from __future__ import annotations

from celery import shared_task

#: Every task is an idempotent adapter over a service, so a message is acknowledged only after the task
#: ran (``acks_late``) and is delivered again when its worker dies mid-task (``reject_on_worker_lost``):
#: work is done at least once and never lost. No caller reads a result, so none is stored. The same values
#: as config.celery.celery_options' ``task_acks_late``, ``task_reject_on_worker_lost`` and ``task_ignore_result``,
#: stated on the task as well so it keeps them in an app configured otherwise.
TASK_DEFAULTS = {"acks_late": True, "reject_on_worker_lost": True, "ignore_result": True}


def clicklab_task(name: str, **options):
    """Decorator: register a task under ``name`` (a constant of :mod:`tasks.names`) with
    :data:`TASK_DEFAULTS`; ``options`` (any ``shared_task`` option) add to or override them."""
    return shared_task(name=name, **{**TASK_DEFAULTS, **options})
