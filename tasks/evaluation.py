"""Celery task of the evaluation server: score a large submission and prepare the next interaction."""

from __future__ import annotations

from tasks import names
from tasks.base import clicklab_task


@clicklab_task(names.EVALUATION_PROCESS_RUN)
def process_run(run_id: str) -> None:
    """Thin adapter over :func:`evaluation.services.process_run` (idempotent: a redelivery does nothing)."""
    from evaluation.services import process_run as process

    process(run_id, asynchronous=True)
