"""Celery task for ``python -m benchmark run --celery``: evaluate one benchmark instance.

A thin adapter: the payload (built by :func:`benchmark.engine.run_celery`) names the method, the click
model, the engine config, the instance's files and the shared output folder; the result is the
instance's ``.npz`` there, which the sender polls. Predictor and click model are built once per worker
process and reused. Runs on the ``models`` queue (concurrency 1, ``acks_late``), so a lost worker's
instance is redelivered; a re-run of an instance overwrites its file atomically.
"""

from __future__ import annotations

from celery import shared_task

from benchmark.engine import CELERY_TASK_NAME, evaluate_instance_from_payload


@shared_task(name=CELERY_TASK_NAME, acks_late=True)
def benchmark_evaluate_instance(payload: dict) -> dict:
    """Evaluate one instance; returns its key (dataset, image_stem, object_stem)."""
    return evaluate_instance_from_payload(payload)
