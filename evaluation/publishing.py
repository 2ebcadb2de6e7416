"""The leaderboards' writes: published benchmarks (with their protocol), participants' display names, and local
``benchmark run`` results published to the server (``python -m benchmark publish``, the leaderboard's upload).

A local run is shown as "local, unverified": nothing of it was computed here. What it says about itself is
checked for shape (names, hashes, finite numbers, sizes) and, for a run published to a benchmark, against the
benchmark's protocol and its dataset's content hash; its figures are the publisher's.
"""

from __future__ import annotations

import hashlib
import json
import math
import re

from django.db import IntegrityError, transaction
from django.utils.text import slugify

from collector.models import Dataset
from collector.selectors.datasets import dataset_content_hash_stored

from .models import EvaluationKey, LocalRun, Participant, PublishedBenchmark
from .protocol import local_run_conflicts
from .services import REMOTE_CLICK_MODELS, EvalError

MAX_SUMMARY_BYTES = 1_000_000
_HEX = re.compile(r"^[0-9a-f]{16,64}$")
CLICKERS = ("baseline", "group")


# --------------------------------------------------------------------------------------------------
# participants


def display_name(user) -> str:
    """How ``user`` appears on the leaderboards: their chosen display name, else their username."""
    try:
        return user.participant.display_name
    except Participant.DoesNotExist:
        return user.get_username()


def participant_rename(*, user, display_name: str) -> Participant:
    name = " ".join(str(display_name).split())
    if not 1 <= len(name) <= 60 or not name.isprintable():
        raise EvalError(400, "invalid_display_name",
                        f"display name {name[:80]!r} must be 1 to 60 printable characters.")  # fmt: skip
    participant, _ = Participant.objects.update_or_create(user=user, defaults={"display_name": name})
    return participant


# --------------------------------------------------------------------------------------------------
# published benchmarks


def _number(name: str, raw, kind, low, high, *, allow_none=False):
    if raw in (None, "") and allow_none:
        return None
    try:
        value = kind(raw)
    except (TypeError, ValueError):
        raise EvalError(
            400, "invalid_protocol", f"{name}={raw!r} must be a number in [{low}, {high}]."
        ) from None
    if not (math.isfinite(value) and low <= value <= high):
        raise EvalError(400, "invalid_protocol", f"{name}={raw!r} must be a number in [{low}, {high}].")
    return value


def benchmark_publish(
    *,
    user,
    dataset: Dataset | None,
    title: str,
    clickers=CLICKERS,
    max_clicks=20,
    max_time_s=None,
    seed=42,
    click_model="dt",
    groups=10,
) -> PublishedBenchmark:
    """A new published benchmark on ``dataset`` with the protocol given (``groups`` clicking groups of equal
    mass); every value is checked, a 400 ``invalid_protocol`` names the first at fault."""
    title = str(title).strip()[:200]
    if dataset is None or not title:
        raise EvalError(
            400, "invalid_protocol", "Publishing needs a dataset and a title; choose both and try again."
        )
    clickers = [c for c in CLICKERS if c in set(clickers)]
    if not clickers:
        raise EvalError(400, "invalid_protocol", f"choose at least one clicker of {CLICKERS}.")
    if str(click_model).lower() not in REMOTE_CLICK_MODELS:
        raise EvalError(
            400, "invalid_protocol", f"click_model={click_model!r}: use one of {REMOTE_CLICK_MODELS}."
        )
    count = int(_number("groups", groups, int, 1, 20))
    protocol = {
        "clickers": clickers, "max_clicks": int(_number("max_clicks", max_clicks, int, 1, 100)),
        "max_time_s": _number("max_time_s", max_time_s, float, 1e-3, 24 * 3600, allow_none=True),
        "seed": int(_number("seed", seed, int, 0, 2**63 - 1)), "click_model": str(click_model).lower(),
        "group_bounds": [[k / count, (k + 1) / count] for k in range(count)],
    }  # fmt: skip
    base = slugify(title)[:60] or "benchmark"
    slug, n = base, 1
    while PublishedBenchmark.objects.filter(slug=slug).exists():
        n += 1
        slug = f"{base}-{n}"
    return PublishedBenchmark.objects.create(slug=slug, title=title, dataset=dataset, owner=user, **protocol)


# --------------------------------------------------------------------------------------------------
# local runs


def server_dataset_hash(dataset: Dataset) -> str:
    """The dataset's content hash as ``benchmark run`` computes it from its folder (``dataset_hash`` of a
    summary.json), from what the import stored (``collector.selectors.datasets``: one definition for both)."""
    return dataset_content_hash_stored(dataset=dataset)


def _finite(value, where: str) -> None:
    pending = [(value, where)]
    while pending:
        item, at = pending.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise EvalError(400, "invalid_local_run", f"{at} is {item}; send null for an undefined figure.")
        if isinstance(item, dict):
            pending.extend((v, f"{at}.{k}") for k, v in item.items())
        elif isinstance(item, list):
            pending.extend((v, f"{at}[{i}]") for i, v in enumerate(item))


def _checked_summary(summary) -> dict:
    if not isinstance(summary, dict):
        raise EvalError(400, "invalid_local_run", "summary must be the JSON object of a run's summary.json.")
    if len(json.dumps(summary)) > MAX_SUMMARY_BYTES:
        raise EvalError(400, "invalid_local_run", f"summary is larger than {MAX_SUMMARY_BYTES} bytes.")
    for name in ("method", "dataset"):
        if not isinstance(summary.get(name), str) or not 1 <= len(summary[name]) <= 100:
            raise EvalError(400, "invalid_local_run",
                            f"summary.{name} must be a name of 1 to 100 characters (is summary.json from benchmark run?).")  # fmt: skip
    if not isinstance(summary.get("dataset_hash"), str) or not _HEX.match(summary["dataset_hash"]):
        raise EvalError(
            400, "invalid_local_run", "summary.dataset_hash must be the run's dataset content hash (hex)."
        )
    config = summary.get("config")
    if (
        not isinstance(config, dict)
        or not isinstance(config.get("max_clicks"), int)
        or not isinstance(config.get("seed"), int)
    ):
        raise EvalError(400, "invalid_local_run", "summary.config must hold the run's max_clicks and seed.")
    if not isinstance(summary.get("instances"), int) or summary["instances"] < 1:
        raise EvalError(
            400, "invalid_local_run", "summary.instances must be the number of instances run (>= 1)."
        )
    hashes = summary.get("checkpoint_sha256", [])
    if not isinstance(hashes, list) or not all(
        isinstance(h, str) and (h == "" or _HEX.match(h)) for h in hashes
    ):
        raise EvalError(
            400, "invalid_local_run", "summary.checkpoint_sha256 must be a list of sha256 hex digests."
        )
    _finite(summary, "summary")
    return summary


def local_run_publish(
    *, user, key: EvaluationKey | None, summary, timing=None, benchmark_slug=None
) -> tuple[LocalRun, bool]:
    """Publish a local run (its ``summary.json``, optionally its ``timing.json``), to ``benchmark_slug``'s board or
    to the publisher's own; (run, created). Publishing the same summary again returns the first (its timing
    refreshed). Refused with a 400 naming what differs when it does not follow the benchmark's protocol."""
    summary = _checked_summary(summary)
    if timing is not None:
        if not isinstance(timing, dict) or len(json.dumps(timing)) > MAX_SUMMARY_BYTES:
            raise EvalError(
                400, "invalid_local_run", "timing must be the JSON object of the run's timing.json."
            )
        _finite(timing, "timing")
    benchmark = None
    if benchmark_slug not in (None, ""):
        benchmark = (
            PublishedBenchmark.objects.select_related("dataset").filter(slug=str(benchmark_slug)).first()
        )
        if benchmark is None:
            raise EvalError(400, "unknown_benchmark", f"benchmark={benchmark_slug!r} is not published here.")
        conflicts = local_run_conflicts(benchmark, summary)
        served = server_dataset_hash(benchmark.dataset)
        if served != summary["dataset_hash"]:
            conflicts.append(f"dataset content {summary['dataset_hash']} (the benchmark's dataset: {served})")
        if conflicts:
            raise EvalError(400, "protocol_mismatch",
                            f"benchmark {benchmark.slug!r} fixes its protocol, and this run differs from it: "
                            f"{'; '.join(conflicts)}. Run benchmark run again with the benchmark's values "
                            "(see its page), or publish without --benchmark.")  # fmt: skip
    canonical = json.dumps(
        {"summary": summary, "benchmark": benchmark.slug if benchmark else None}, sort_keys=True
    )
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    provenance = {
        "dataset_hash": summary["dataset_hash"],
        "checkpoint_sha256": summary.get("checkpoint_sha256", []),
        "model_ids": summary.get("model_ids", []),
        "seed": summary["config"]["seed"],
        "code_version": summary.get("code_version") or "unknown (summary.json made before it was recorded)",
        "config": summary["config"],
        "click_model": summary.get("click_model"),
    }
    with transaction.atomic():
        existing = LocalRun.objects.select_for_update().filter(owner=user, content_sha256=digest).first()
        if existing is not None:
            if timing is not None:
                existing.timing = timing
                existing.save(update_fields=["timing"])
            return existing, False
        try:
            with transaction.atomic():
                run = LocalRun.objects.create(
                    owner=user, key=key, benchmark=benchmark, method=summary["method"],
                    dataset_name=summary["dataset"], dataset_hash=summary["dataset_hash"], summary=summary,
                    timing=timing, provenance=provenance, content_sha256=digest,
                )  # fmt: skip
        except IntegrityError:  # the same summary published at the same moment
            return LocalRun.objects.get(owner=user, content_sha256=digest), False
    return run, True
