"""Row locks held from another connection, to stop a transaction of the code under test at a known point."""

from __future__ import annotations

import threading

from django.db import connection, transaction


class RowLock:
    """Holds ``model``'s row ``pk`` locked (PostgreSQL: ``FOR NO KEY UPDATE``, which blocks every writer of
    the row; SQLite: the database write lock, as IMMEDIATE transactions take it at BEGIN) on a connection
    of its own until the ``with`` block ends; ``before_commit()``, if given, then runs in that transaction."""

    def __init__(self, model, pk: int, *, before_commit=None):
        self.model, self.pk, self.before_commit = model, pk, before_commit
        self.held = threading.Event()
        self.release = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        try:
            with transaction.atomic():
                self.model.objects.select_for_update(no_key=True).filter(pk=self.pk).first()
                self.held.set()
                self.release.wait(timeout=120)
                if self.before_commit is not None:
                    self.before_commit()
        finally:
            connection.close()

    def __enter__(self):
        self.thread.start()
        assert self.held.wait(timeout=30), f"could not lock {self.model.__name__} {self.pk}"
        return self

    def __exit__(self, *exc):
        self.release.set()
        self.thread.join(timeout=60)


def waiting_on_a_lock() -> bool:
    """Whether some connection to the test database waits on a lock (PostgreSQL); always True on SQLite,
    where a writer waits at BEGIN IMMEDIATE and nothing can be observed from outside."""
    if connection.vendor != "postgresql":
        return True
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0] > 0
