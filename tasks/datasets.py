"""The dataset import the researcher area asks for (sent through the outbox, on the default queue)."""

from __future__ import annotations

from tasks import names
from tasks.base import clicklab_task


@clicklab_task(names.DATASETS_IMPORT_DATASET)
def import_dataset(import_id: int) -> dict:
    """Run the import ``import_id`` via ``collector.services.dataset_imports.dataset_import_run``.

    Idempotent: a finished import is left as it is; one a stopped worker left running runs again from the
    start (the import itself is all-or-nothing, and importing the same files again changes nothing). Not
    retried by itself: a failure is recorded on the row with its reason, for the researcher to act on.
    Returns {"import_id", "state", "dataset_id"}.
    """
    # Imported here: this module is imported while the Celery app loads, before Django's apps are ready.
    from collector.services.dataset_imports import dataset_import_run

    job = dataset_import_run(import_id=import_id)
    return {
        "import_id": import_id,
        "state": job.state if job is not None else "gone",
        "dataset_id": job.dataset_id if job is not None else None,
    }
