"""Reads of the evaluation server: the RClicks robustness statistics (ΔSB, ΔGR, ΔHH) of finished runs."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from benchmark.report import session_statistics, session_values
from benchmark.session import REPORT_COLUMNS

from .models import EvaluationRun
from .services import report_rows


def run_values(run: EvaluationRun) -> dict | None:
    """Per-instance, per-group NoC@85/90 and IoU-AuC of a finished baseline or group run, else None.

    Stored when the run finishes; runs finished before that was stored are computed from their rows.
    """
    if run.state != EvaluationRun.State.FINISHED or run.clicker not in ("baseline", "group"):
        return None
    if run.instance_values is not None:
        return run.instance_values
    rows = report_rows(run)
    if not rows:
        return None
    return session_values(pd.DataFrame(rows, columns=list(REPORT_COLUMNS)), max_clicks=run.max_clicks)


def baseline_run_for(group_run: EvaluationRun, runs: Iterable[EvaluationRun]) -> EvaluationRun | None:
    """The latest finished baseline run among ``runs`` that ΔSB can compare ``group_run`` with: same owner,
    dataset, method, ``max_clicks`` and threshold."""
    candidates = [
        run
        for run in runs
        if run.clicker == "baseline"
        and run.state == EvaluationRun.State.FINISHED
        and run.owner_id == group_run.owner_id
        and run.dataset_id == group_run.dataset_id
        and run.method == group_run.method
        and run.max_clicks == group_run.max_clicks
        and run.threshold == group_run.threshold
    ]
    return max(candidates, key=lambda run: run.finished_at, default=None)


def group_run_statistics(group_run: EvaluationRun, base_run: EvaluationRun | None) -> dict:
    """Table-4 statistics of a group run (:func:`benchmark.report.session_statistics`), with ΔSB when
    ``base_run`` covers the same instances; ``note`` says why ΔSB is missing otherwise."""
    values = run_values(group_run)
    if values is None:
        return {"note": "no per-instance values (the run has no rows)"}
    base = run_values(base_run) if base_run is not None else None
    if base_run is None or base is None:
        return {**session_statistics(values), "note": "ΔSB needs a finished baseline run of the same method, "
                "max_clicks and threshold"}  # fmt: skip
    try:
        return {**session_statistics(values, base), "base_run": str(base_run.pk)}
    except ValueError as exc:
        return {**session_statistics(values), "note": f"ΔSB: {exc}"}
