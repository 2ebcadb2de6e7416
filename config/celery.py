"""The Celery app and its options. Tasks live in ``tasks/``; queues ``default`` and ``models``.

The options (broker, queues, routes, the beat schedule) are made by ``celery_options`` from the Django settings
the environment sets (``CELERY_BROKER_URL``, ``BROKER_DIR``, ``BROKER_VISIBILITY_TIMEOUT_S``, the intervals);
``app.conf`` holds them by Celery's own (lower-case) names.
"""

from __future__ import annotations

import os
import pkgutil
from pathlib import Path
from typing import Any

from celery import Celery
from celery.signals import setup_logging, task_prerun
from kombu import Queue

from tasks import names as task_names

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("clicklab")


def _broker_options(*, broker_url: str, broker_dir: Path, visibility_timeout_s: int, poll_s: float) -> dict:
    if broker_url.startswith(("redis://", "rediss://")):
        return {
            "broker_url": broker_url,
            "broker_transport_options": {
                "visibility_timeout": visibility_timeout_s,
                # kombu looks for such messages every interval x throttle seconds, 10 x 10 by default: a
                # validation whose worker was SIGKILLed came back up to 100 s after its timeout (seen in
                # bench_load_faults). One cheap sorted-set range read every 10 s (or half the timeout, when
                # shorter) instead.
                "unacked_restore_interval": max(1, min(10, visibility_timeout_s // 2)),
                "unacked_restore_throttle": 1,
                # Each sweep holds a lock in Redis for milliseconds; a worker SIGKILLed inside a sweep, or a
                # Redis stop between its lock and unlock, leaves the lock to expire: after 300 s by default,
                # and no message was redelivered until then (a validation missed bench_load_faults'
                # deadline). As long as one sweep interval instead; two sweeps that overlap restore a message
                # once (a transaction).
                "unacked_mutex_expire": max(1, min(10, visibility_timeout_s // 2)),
            },
        }
    if broker_url:
        return {"broker_url": broker_url}
    # kombu's file-system transport: messages are files under var/broker, so a real worker process runs with
    # no broker server.
    for sub in ("queue", "processed", "control"):
        (broker_dir / sub).mkdir(parents=True, exist_ok=True)
    return {
        "broker_url": "filesystem://",
        "broker_transport_options": {
            "data_folder_in": str(broker_dir / "queue"),
            "data_folder_out": str(broker_dir / "queue"),
            "processed_folder": str(broker_dir / "processed"),
            "control_folder": str(broker_dir / "control"),
            "store_processed": False,
            # kombu polls the folder (default once a second): 0.2 s keeps a click's validation, a stimulus
            # render or a benchmark task from waiting a second for pickup, for a directory listing 5x/s.
            "polling_interval": poll_s,
        },
    }


def celery_options(settings: Any) -> dict[str, Any]:
    """Celery's settings, by its own names, from the Django ``settings``."""
    return {
        **_broker_options(
            broker_url=settings.CELERY_BROKER_URL,
            broker_dir=Path(settings.BROKER_DIR),
            visibility_timeout_s=settings.BROKER_VISIBILITY_TIMEOUT_S,
            poll_s=settings.BROKER_POLL_S,
        ),
        "task_default_queue": "default",
        "task_queues": (Queue("default", routing_key="default"), Queue("models", routing_key="models")),
        # Model work, and the beat jobs that send it again, on the `models` queue; everything else on `default`.
        "task_routes": {
            name: {"queue": "models"}
            for name in (
                task_names.SEGMENTATION_BUILD_NEXT_ROUND,
                task_names.SEGMENTATION_REQUEUE_PENDING_BUILDS,
                task_names.BENCHMARK_EVALUATE_INSTANCE,
                task_names.CORRECTIVE_UPDATE_ITEM,  # corrective campaigns' mask updates
                task_names.CORRECTIVE_REQUEUE_PENDING_UPDATES,
            )
        },
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_ignore_result": True,
        "task_serializer": "json",
        "accept_content": ["json"],
        "timezone": "UTC",
        "broker_connection_retry_on_startup": True,
        "task_always_eager": False,
        # Periodic jobs (run by `celery beat`; `make prod` starts it), every interval a setting.
        "beat_schedule": {
            "platforms-sync": {
                "task": task_names.PLATFORMS_SYNC_OPEN_CAMPAIGNS,
                "schedule": settings.PLATFORM_SYNC_INTERVAL_S,
            },
            "expire-sessions": {
                "task": task_names.SESSIONS_EXPIRE_SESSIONS,
                "schedule": settings.EXPIRE_SESSIONS_EVERY_S,
            },
            "release-stale-sessions": {
                "task": task_names.SESSIONS_RELEASE_STALE,
                "schedule": settings.RELEASE_STALE_EVERY_S,
            },
            "requeue-pending-validations": {
                "task": task_names.VALIDATION_REQUEUE_PENDING_VALIDATIONS,
                "schedule": settings.REQUEUE_VALIDATIONS_EVERY_S,
            },
            "requeue-pending-builds": {
                "task": task_names.SEGMENTATION_REQUEUE_PENDING_BUILDS,
                "schedule": settings.REQUEUE_BUILDS_EVERY_S,
            },
            "requeue-pending-corrective-updates": {
                "task": task_names.CORRECTIVE_REQUEUE_PENDING_UPDATES,
                "schedule": settings.REQUEUE_CORRECTIVE_EVERY_S,
            },
            "outbox-relay": {
                "task": task_names.OUTBOX_RELAY_TASK_INTENTS,
                "schedule": settings.OUTBOX_RELAY_EVERY_S,
            },
        },
    }


def _configure() -> None:
    from django.conf import settings

    app.conf.update(celery_options(settings))


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
