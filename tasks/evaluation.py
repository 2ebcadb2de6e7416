"""Celery task of the evaluation server: score a large submission and prepare the next interaction."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="tasks.evaluation.process_run", acks_late=True)
def process_run(run_id: str) -> None:
    """Thin adapter over :func:`evaluation.services.process_run` (idempotent: a redelivery does nothing)."""
    from evaluation.services import process_run as process

    process(run_id, asynchronous=True)
