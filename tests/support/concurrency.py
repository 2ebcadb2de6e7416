"""Run one action from several threads at the same moment, each on its own database connection."""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.db import connection


def at_once(action: Callable[[], object], n: int) -> tuple[list, list[BaseException]]:
    """Start ``n`` threads that wait on one barrier, then each run ``action``; returns what the runs returned
    and the exceptions they raised (in the order they finished). Each thread closes its connection."""
    results: list = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def run() -> None:
        try:
            barrier.wait()
            results.append(action())
        except Exception as exc:  # collected for the test to assert on
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results, errors
