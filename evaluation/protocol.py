"""The protocol of a published benchmark: what a run on it (from the server or published from a local ``benchmark
run``) must share with every other run on its leaderboard.

The operator fixes, per benchmark: the clickers (baseline and/or group), ``max_clicks``, ``max_time_s`` (the
method's time per sample), the ``seed`` of the groups' random streams, the group clicker's ``click_model`` and
``group_bounds``; every click is run (``stop_at_target`` false). A value a client sends that differs from one of
these is refused with a 400 ``protocol_mismatch`` that names each differing value with the benchmark's; a value
left out is the benchmark's. The rest (the method's ``threshold``, ``target_ious``, ``shuffle``, the name) is the
participant's own.
"""

from __future__ import annotations

import math
from typing import Any

from .models import PublishedBenchmark

FIXED = ("max_clicks", "max_time_s", "seed", "stop_at_target")
GROUP_FIXED = ("click_model", "group_bounds")


class ProtocolMismatch(ValueError):
    """Values that differ from a benchmark's protocol; ``conflicts`` are "name=value (the benchmark's: x)"."""

    def __init__(self, benchmark: PublishedBenchmark, conflicts: list[str], hint: str) -> None:
        self.conflicts = conflicts
        super().__init__(
            f"benchmark {benchmark.slug!r} fixes its protocol, and {'this value differs' if len(conflicts) == 1 else 'these values differ'} "
            f"from it: {'; '.join(conflicts)}. {hint}"
        )


def _same(name: str, sent: Any, fixed: Any) -> bool:
    if name == "group_bounds":
        try:
            return [[float(v) for v in pair] for pair in sent] == [[float(v) for v in pair] for pair in fixed]
        except (TypeError, ValueError):
            return False
    if name == "click_model":
        return isinstance(sent, str) and sent.lower() == str(fixed).lower()
    if sent is None or fixed is None or isinstance(sent, bool) or isinstance(fixed, bool):
        return sent == fixed
    if isinstance(sent, int | float) and isinstance(fixed, int | float):
        return math.isclose(float(sent), float(fixed), rel_tol=0, abs_tol=1e-12)
    return sent == fixed


def _conflict(name: str, sent: Any, fixed: Any) -> str:
    return f"{name}={sent!r} (the benchmark's: {fixed!r})"


def run_config(benchmark: PublishedBenchmark, data: dict) -> dict:
    """The create request ``data`` of a server run on ``benchmark`` with the protocol filled in; raises
    :class:`ProtocolMismatch` naming every value sent that differs from it."""
    fixed = benchmark.protocol()
    conflicts = []
    dataset = data.get("dataset")
    if dataset is not None and dataset != benchmark.dataset.name:
        conflicts.append(_conflict("dataset", dataset, benchmark.dataset.name))
    clicker = data.get("clicker", fixed["clickers"][0])
    if clicker not in fixed["clickers"]:
        conflicts.append(f"clicker={clicker!r} (the benchmark's clickers: {fixed['clickers']})")
    merged = {**data, "dataset": benchmark.dataset.name, "clicker": clicker}
    names = FIXED + (GROUP_FIXED if clicker == "group" else ())
    for name in names:
        if name in data and not _same(name, data[name], fixed[name]):
            conflicts.append(_conflict(name, data[name], fixed[name]))
        merged[name] = fixed[name]
    if conflicts:
        raise ProtocolMismatch(
            benchmark, conflicts, "Leave them out (the benchmark's apply) or send the benchmark's values."
        )
    return merged


def local_run_conflicts(benchmark: PublishedBenchmark, summary: dict) -> list[str]:
    """What keeps a local ``benchmark run`` (its ``summary.json``) off ``benchmark``'s leaderboard: each differing
    value, named with the benchmark's (empty: it follows the protocol)."""
    fixed = benchmark.protocol()
    config: dict = summary["config"] if isinstance(summary.get("config"), dict) else {}
    conflicts = []
    if summary.get("dataset") != benchmark.dataset.name:
        conflicts.append(_conflict("dataset", summary.get("dataset"), benchmark.dataset.name))
    for name in ("max_clicks", "seed"):
        if not _same(name, config.get(name), fixed[name]):
            conflicts.append(_conflict(f"--{name.replace('_', '-')}", config.get(name), fixed[name]))
    if fixed["max_time_s"] is not None:
        conflicts.append(f"max_time_s: the benchmark limits the method's time to {fixed['max_time_s']} s per sample, "
                         "which benchmark run does not; run the method against the server instead")  # fmt: skip
    if "baseline" in fixed["clickers"] and config.get("run_base") is False:
        conflicts.append("--no-base (the benchmark has the baseline clicker)")
    if "group" in fixed["clickers"]:
        bounds = config.get("group_bounds") or []
        if not _same("group_bounds", bounds, fixed["group_bounds"]):
            conflicts.append(_conflict("group bounds", bounds, fixed["group_bounds"]))
        if not _same("click_model", summary.get("click_model"), fixed["click_model"]):
            conflicts.append(_conflict("--click-model", summary.get("click_model"), fixed["click_model"]))
        if config.get("common_random_numbers"):
            conflicts.append("--common-random-numbers (the benchmark draws each group's stream apart)")
        if config.get("samples_per_group", 1) != 1:
            conflicts.append(_conflict("--samples-per-group", config.get("samples_per_group"), 1))
    return conflicts
