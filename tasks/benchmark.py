"""Celery task for ``python -m benchmark run --celery``: evaluate one benchmark instance.

A thin adapter: the payload (built by :func:`benchmark.engine.run_celery`) names the method, the click
model, the engine config, the instance's files and the shared output folder; the result is the
instance's ``.npz`` there, which the sender polls. Predictor and click model are built once per worker
process and reused. Runs on the ``models`` queue (concurrency 1, ``acks_late``), so a lost worker's
instance is redelivered; a re-run of an instance overwrites its file atomically.
"""

from __future__ import annotations

from benchmark.engine import evaluate_instance_from_payload
from tasks import names
from tasks.base import clicklab_task


@clicklab_task(names.BENCHMARK_EVALUATE_INSTANCE)
def benchmark_evaluate_instance(payload: dict) -> dict:
    """Evaluate one instance; returns its key (dataset, image_stem, object_stem)."""
    return evaluate_instance_from_payload(payload)
