"""Sending Celery tasks through the transactional outbox (model: ``collector.models.TaskIntent``).

``task_intent_add`` is the one way services start background work: it writes the intent in the caller's
transaction and, once that commits, tries to publish it at once (fast path, one quick attempt that never
raises: a broker outage costs the request a few milliseconds, never a 500). Whatever the fast path could
not send, the relay (:func:`task_intents_relay`) sends later, oldest first, retrying on every pass until
the broker takes it. The relay runs in three places so it works with beat or without it: the beat task
``tasks.outbox.relay_task_intents``, a thread in every Celery worker (``CLICKLAB_OUTBOX_RELAY_IN_WORKER``)
and ``manage.py outbox_relay`` (the production runner starts it). All of them pass every
``settings.OUTBOX_RELAY_EVERY_S`` seconds, so a task whose send failed goes out within that interval once
the broker is back.

Delivery is at least once: the relay and the fast path may both send an intent when the fast path is
slower than ``settings.OUTBOX_RELAY_GRACE_S``. Every task sent this way is idempotent (validation is
guarded by ``validated_at``, the build by the study lock, rendering skips done targets, sync records each
decision before applying it).
"""

from __future__ import annotations

import functools
import logging
import threading
from datetime import timedelta

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.db.models import F
from django.utils import timezone

from collector.models import TaskIntent
from collector.services.prepared import column, prepared_cursor
from config.celery import app as celery_app

logger = logging.getLogger(__name__)

#: The fast path's one attempt (plus one reconnect for a pooled connection a broker restart closed).
_FAST_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.1, "interval_max": 0.1}
#: The relay's attempt per intent; a failure ends the pass (the broker is down for all of them).
_RELAY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1}
_BATCH = 200


def _publish(name: str, args: list, policy: dict) -> None:
    celery_app.send_task(name, args=list(args), retry=True, retry_policy=policy)


def _error_text(exc: BaseException) -> str:
    # kombu/redis errors name host and port only; the broker URL (which may hold a password) is never logged.
    return f"{type(exc).__name__}: {exc}"[:1000]


@functools.cache
def broker_warm() -> None:
    """Once per process: import what the first send of a process would import: the broker's transport module (creating the
    transport object; it connects on first use, not here) and Celery's message machinery. The web worker
    calls it at boot (``config.wsgi.warm_process``), where these imports otherwise fell on the first finish
    (4 % of the web workers' time in a profile of the load suite, mid-burst)."""
    with celery_app.connection_for_write() as broker:
        broker.transport  # noqa: B018  (the attribute creates the transport)
    celery_app.amqp.producer_pool  # noqa: B018
    import celery.events.dispatcher  # noqa: F401  (a task's send imports it)


def task_intent_add(*, name: str, args: list) -> TaskIntent:
    """Record that task ``name`` must run with ``args`` (JSON: ids), in the current transaction; publish it
    right after the commit. Never raises for broker trouble."""
    intent = TaskIntent.objects.create(task_name=name, args=list(args))
    task_intent_send_after_commit(intent_id=intent.pk, name=name, args=args)
    return intent


def task_intent_send_after_commit(*, intent_id: int, name: str, args: list) -> None:
    """The second half of ``task_intent_add``, for an intent a statement of the caller's inserted (see
    ``task_intent_insert_sql``): publish it once the current transaction commits (at once in autocommit)."""
    args = list(args)
    transaction.on_commit(lambda: task_intent_send_now(intent_id=intent_id, name=name, args=args))


def task_intent_insert_sql(*, source: str) -> str:
    """PostgreSQL: an ``INSERT ... SELECT ... FROM source RETURNING id`` of one intent per row of ``source``
    (a CTE of the caller's statement), with the parameters of ``task_intent_insert_params``: the row
    ``task_intent_add`` would create, inside a statement that changes the state the task is for."""
    meta = TaskIntent._meta
    names = ("task_name", "args", "created_at", "sent_at", "attempts", "last_error")
    return (
        f"INSERT INTO {connection.ops.quote_name(meta.db_table)} ({', '.join(column(meta, n) for n in names)}) "
        f"SELECT %(i_name)s, %(i_args)s, %(i_now)s, NULL, 0, '' FROM {source} RETURNING {column(meta, 'id')}"
    )


def task_intent_insert_params(*, name: str, args: list, now) -> dict:
    return {
        "i_name": name,
        "i_args": TaskIntent._meta.get_field("args").get_db_prep_save(list(args), connection),
        "i_now": now,
    }


def task_intent_send_now(*, intent_id: int, name: str, args: list) -> bool:
    """The fast path (after commit): one quick attempt; True when the broker took the message. A failure is
    logged and left to the relay."""
    try:
        _publish(name, args, _FAST_POLICY)
    except Exception as exc:  # broker down, refused, timed out: the relay retries
        logger.warning("task %s left in the outbox (broker unavailable): %s", name, _error_text(exc))
        try:
            TaskIntent.objects.filter(pk=intent_id).update(
                attempts=F("attempts") + 1, last_error=_error_text(exc)
            )
        except Exception:  # the database hiccup must not fail the request either; the row stays pending
            logger.exception("could not record the failed send of task intent %s", intent_id)
        return False
    try:
        with prepared_cursor() as cursor:
            cursor.execute(_mark_sent_sql(), [timezone.now(), intent_id])
    except Exception:  # sent but not marked: the relay sends it again, which is harmless (idempotent tasks)
        logger.exception("task intent %s sent but not marked sent", intent_id)
    return True


@functools.cache
def _mark_sent_sql() -> str:
    """The fast path's ``UPDATE ... SET sent_at`` (the ORM's update compiled once: this runs once per finished
    batch, in the request)."""
    meta = TaskIntent._meta
    sent_at, pk = column(meta, "sent_at"), column(meta, "id")
    return f"UPDATE {connection.ops.quote_name(meta.db_table)} SET {sent_at} = %s WHERE {pk} = %s AND {sent_at} IS NULL"


def task_intents_pending(*, older_than_s: float = 0.0) -> int:
    cutoff = timezone.now() - timedelta(seconds=older_than_s)
    return TaskIntent.objects.filter(sent_at__isnull=True, created_at__lte=cutoff).count()


def task_intents_relay(*, grace_s: float | None = None, limit: int = 10_000) -> dict:
    """Send pending intents older than ``grace_s`` (default ``settings.OUTBOX_RELAY_GRACE_S``: younger ones
    are the fast path's), oldest first, at most ``limit``. Rows are claimed with ``SKIP LOCKED`` so relays
    in several processes never send the same row in the same pass. Stops at the first failure (the broker is
    down; the next pass retries). Returns {"sent": n, "failed": n, "pending": n still pending}."""
    grace = settings.OUTBOX_RELAY_GRACE_S if grace_s is None else grace_s
    cutoff = timezone.now() - timedelta(seconds=grace)
    sent = failed = 0
    while sent < limit and not failed:
        with transaction.atomic():
            batch = list(
                TaskIntent.objects.select_for_update(skip_locked=True)
                .filter(sent_at__isnull=True, created_at__lte=cutoff)
                .order_by("created_at", "pk")[: min(_BATCH, limit - sent)]
            )
            done: list[int] = []
            for intent in batch:
                try:
                    _publish(intent.task_name, intent.args, _RELAY_POLICY)
                except Exception as exc:
                    failed += 1
                    TaskIntent.objects.filter(pk=intent.pk).update(
                        attempts=F("attempts") + 1, last_error=_error_text(exc)
                    )
                    logger.warning(
                        "outbox relay: broker unavailable, %s will be retried: %s",
                        intent.task_name,
                        _error_text(exc),
                    )
                    break
                done.append(intent.pk)
            if done:
                TaskIntent.objects.filter(pk__in=done).update(sent_at=timezone.now())
            sent += len(done)
        if len(batch) < _BATCH:
            break
    _prune_sent()
    pending = TaskIntent.objects.filter(sent_at__isnull=True).count()
    if sent:
        logger.info("outbox relay sent %s task(s); %s pending", sent, pending)
    return {"sent": sent, "failed": failed, "pending": pending}


def _prune_sent() -> None:
    keep = timedelta(seconds=settings.OUTBOX_KEEP_SENT_S)
    old = TaskIntent.objects.filter(sent_at__isnull=False, created_at__lt=timezone.now() - keep)
    TaskIntent.objects.filter(pk__in=list(old.values_list("pk", flat=True)[:_BATCH])).delete()


def relay_forever(*, stop: threading.Event, every_s: float | None = None) -> None:
    """Run :func:`task_intents_relay` every ``every_s`` seconds (default ``settings.OUTBOX_RELAY_EVERY_S``)
    until ``stop`` is set. A database outage is logged and retried on the next pass."""
    interval = settings.OUTBOX_RELAY_EVERY_S if every_s is None else every_s
    while not stop.is_set():
        try:
            close_old_connections()
            task_intents_relay()
        except Exception as exc:
            logger.warning("outbox relay pass failed, retrying in %ss: %s", interval, _error_text(exc))
            try:
                from django.db import connection

                connection.close()
            except Exception:
                pass
        stop.wait(interval)
