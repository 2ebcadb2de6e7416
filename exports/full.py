"""The full-fidelity export: every click with its session, trial, target and validity, one row per click.

Parquet (pyarrow) by default, JSON Lines where pyarrow is absent or when asked. Workers appear only as
their pseudonym (``Worker.pseudonym``); the platform's id never leaves the database. Rows are streamed
from a server-side cursor and written in record batches of :data:`BATCH_ROWS`, so memory is bounded by
one batch (about 1 KB per row), whatever the number of clicks.

Columns (``FULL_SCHEMA`` order; times in ms, positions in canonical image pixels, x = column):

- study_id, round, session_id, worker (pseudonym), device (pc/mobile, what the session counts as),
  platform_device, detected_device, user_agent
- viewport_width, viewport_height (CSS px), device_pixel_ratio, refresh_hz (trial's estimate, else
  the session's), client_info (the session's raw client report, JSON)
- session_status, session_validity, session_valid_clicks, session_quality_flags (JSON),
  session_rejection_reason, session_started_at, session_finished_at (UTC)
- session_control_inside (control clicks inside their object; null without control trials),
  session_control_passed (whether they met the study's rule), session_screens (JSON: what the worker was
  shown before the batch, ``collector.selectors.screens``: ``language`` as the player reported it (null when
  it did not), ``consent`` {shown, source "study" | "default", text, agreed_at}, ``instructions`` {source,
  text}, ``practice_trials``, ``control_trials``; the texts as the study holds them, in that language)
- trial_id, position, trial_role (``task``; ``practice``, ``control`` and ``filler`` trials (a round's tail
  batch filled up with images already done: they counted for the batch rule) are never data: they are not
  in clicks.csv, and their ``counted`` is false), phase_onsets_ms (JSON: presented rAF onsets, the first frame each phase was on
  screen), scheduled_onsets_ms (JSON: the onsets the player scheduled), load_wait_ms (the trial's wait for
  its pictures before phase A), blocked_clicks, trial_flags (JSON)
- target_id, dataset, image_stem, object_stem, click_type, model_type, model_id, model_variant,
  checkpoint_sha256 (the segmenter, variant and checkpoint file that made the target's previous mask;
  empty for round 1), full_stem, image_width, image_height
- click_id, x, y (float), x_px, y_px (the integer pixel of clicks.csv), shown_width, shown_height,
  pointer_type, reaction_ms, event_timestamp_ms, received_at, is_valid, distance_px, invalid_reason,
  counted (the click is a row of the default clicks.csv)

Beside the file, ``<name>.manifest.json`` (:func:`full_manifest`, ``exports.manifest``): the datasets (name,
layout, content hash), the studies and the rules their rounds were built with, the columns and the row
count. A Parquet file also carries it (without the row count, which Parquet keeps itself) in its key-value
metadata under ``clicklab_manifest``, so a downloaded file names its dataset too.
"""

from __future__ import annotations

import json
import logging
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from django.utils import timezone
from tqdm import tqdm

from collector.models import Session, Study, Trial
from collector.selectors.screens import study_screens
from exports.manifest import FORMAT_VERSION, PARQUET_KEY, export_sources
from exports.rclicks import pixel_index
from exports.selectors import (
    ExportError,
    ExportTarget,
    export_targets,
    full_click_count,
    full_click_rows,
    session_trial_counts,
    studies_for_export,
)

logger = logging.getLogger(__name__)

FORMATS = ("parquet", "jsonl")
BATCH_ROWS = 10_000

#: (column, kind) with kind one of int, float, str, bool, time, json.
FULL_COLUMNS: tuple[tuple[str, str], ...] = (
    ("study_id", "int"),
    ("round", "int"),
    ("session_id", "int"),
    ("worker", "str"),
    ("device", "str"),
    ("platform_device", "str"),
    ("detected_device", "str"),
    ("user_agent", "str"),
    ("viewport_width", "float"),
    ("viewport_height", "float"),
    ("device_pixel_ratio", "float"),
    ("refresh_hz", "float"),
    ("client_info", "json"),
    ("session_status", "str"),
    ("session_validity", "str"),
    ("session_valid_clicks", "int"),
    ("session_quality_flags", "json"),
    ("session_rejection_reason", "str"),
    ("session_started_at", "time"),
    ("session_finished_at", "time"),
    ("session_control_inside", "int"),
    ("session_control_passed", "bool"),
    ("session_screens", "json"),
    ("trial_id", "int"),
    ("position", "int"),
    ("trial_role", "str"),
    ("phase_onsets_ms", "json"),
    ("scheduled_onsets_ms", "json"),
    ("load_wait_ms", "float"),
    ("blocked_clicks", "int"),
    ("trial_flags", "json"),
    ("target_id", "int"),
    ("dataset", "str"),
    ("image_stem", "str"),
    ("object_stem", "str"),
    ("click_type", "str"),
    ("model_type", "str"),
    ("model_id", "str"),
    ("model_variant", "str"),
    ("checkpoint_sha256", "str"),
    ("full_stem", "str"),
    ("image_width", "int"),
    ("image_height", "int"),
    ("click_id", "int"),
    ("x", "float"),
    ("y", "float"),
    ("x_px", "int"),
    ("y_px", "int"),
    ("shown_width", "float"),
    ("shown_height", "float"),
    ("pointer_type", "str"),
    ("reaction_ms", "float"),
    ("event_timestamp_ms", "float"),
    ("received_at", "time"),
    ("is_valid", "bool"),
    ("distance_px", "float"),
    ("invalid_reason", "str"),
    ("counted", "bool"),
)
COLUMN_NAMES = tuple(name for name, _ in FULL_COLUMNS)

# Names the player may use for the same measurement in Session.client_info (first present wins).
_VIEWPORT_W = ("viewport_width", "viewportWidth", "innerWidth", "inner_width")
_VIEWPORT_H = ("viewport_height", "viewportHeight", "innerHeight", "inner_height")
_DPR = ("device_pixel_ratio", "devicePixelRatio", "dpr")
_REFRESH = ("refresh_hz", "refreshHz", "refresh_rate_hz", "refresh_rate")


@dataclass
class FullExport:
    path: Path
    format: str
    rows: int = 0
    messages: list[str] = field(default_factory=list)
    manifest_path: Path | None = None


def manifest_path_of(path: Path) -> Path:
    """``full.parquet`` -> ``full.manifest.json`` beside it."""
    return path.with_suffix(".manifest.json")


def full_manifest(*, studies: list[Study], targets: dict[int, ExportTarget], format: str) -> dict:
    """The manifest of a full export of ``studies`` (module docstring), without its row count."""
    return {
        "format": "full",
        "format_version": FORMAT_VERSION,
        "file_format": format,
        "created_at": timezone.now().isoformat(),
        "columns": list(COLUMN_NAMES),
        **export_sources(studies=studies, targets=targets),
    }


def pyarrow_available() -> bool:
    try:
        import pyarrow  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        return False
    return True


def default_format() -> str:
    """``parquet`` where pyarrow is installed, else ``jsonl``."""
    return "parquet" if pyarrow_available() else "jsonl"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _first(info: dict, names: tuple[str, ...]) -> float | None:
    for name in names:
        if name in info:
            return _number(info[name])
    return None


def client_measurements(info: Any) -> tuple[float | None, float | None, float | None, float | None]:
    """(viewport width, viewport height, devicePixelRatio, refresh Hz) from a session's client_info.

    Accepts flat keys (``viewport_width``, ``devicePixelRatio``, ...) or a nested ``viewport``
    (``{"width":, "height":}`` or ``[w, h]``); anything missing or non-numeric is None.
    """
    if not isinstance(info, dict):
        return None, None, None, None
    width, height = _first(info, _VIEWPORT_W), _first(info, _VIEWPORT_H)
    viewport = info.get("viewport")
    if isinstance(viewport, dict):
        width = width if width is not None else _number(viewport.get("width"))
        height = height if height is not None else _number(viewport.get("height"))
    elif isinstance(viewport, list | tuple) and len(viewport) == 2:
        width = width if width is not None else _number(viewport[0])
        height = height if height is not None else _number(viewport[1])
    return width, height, _first(info, _DPR), _first(info, _REFRESH)


def session_screens(*, study: Study, client_info: Any, round_number: int, trials: dict[str, int]) -> dict:
    """The ``session_screens`` value: what a session's worker was shown before the batch (the texts the study
    holds, in the language the player reported; the site's default language when it reported none)."""
    info = client_info if isinstance(client_info, dict) else {}
    reported = info.get("screens_language") if isinstance(info.get("screens_language"), str) else None
    screens = study_screens(
        study=study,
        language=reported,
        trial_count=trials.get("task", 0) + trials.get("control", 0),
        practice_count=trials.get("practice", 0),
        correction=round_number > 1,
    )
    return {
        "language": reported,
        "consent": {**screens["consent"], "agreed_at": info.get("consent_agreed_at")},
        "instructions": {
            "source": screens["instructions"]["source"],
            "text": screens["instructions"]["text"],
        },
        "practice_trials": trials.get("practice", 0),
        "control_trials": trials.get("control", 0),
    }


def _rows(*, study_ids: list[int], targets: dict[int, ExportTarget], progress: bool, total: int):
    """Yield one dict per click, in :data:`COLUMN_NAMES` order. Memory: the targets, the studies and each
    session's trial counts (one small dict per session), besides the row being written."""
    studies = {study.pk: study for study in Study.objects.filter(pk__in=study_ids)}
    trial_counts = session_trial_counts(study_ids=study_ids)
    counted_validity = Session.Validity.COUNTED
    screens_of: tuple[int, dict] | None = None  # (session id, its screens): rows come session by session
    with tqdm(total=total, unit="click", desc="full export", file=sys.stderr, disable=not progress) as bar:
        for index, row in enumerate(full_click_rows(study_ids=study_ids), start=1):
            (click_id, study_id, round_number, session_id, pseudonym, device, platform_device, detected_device,
             user_agent, client_info, status, validity, valid_clicks, quality_flags, rejection_reason,
             started_at, finished_at, control_inside, control_passed, trial_id, position, role, phase_onsets,
             scheduled_onsets, load_wait, blocked, trial_flags, trial_refresh,
             target_id, x, y, shown_w, shown_h, pointer, reaction, event_ts, received_at, is_valid, distance,
             invalid_reason) = row  # fmt: skip
            target = targets[target_id]
            if screens_of is None or screens_of[0] != session_id:
                screens_of = (
                    session_id,
                    session_screens(
                        study=studies[study_id],
                        client_info=client_info,
                        round_number=round_number,
                        trials=trial_counts.get(session_id, {}),
                    ),
                )
            viewport_w, viewport_h, dpr, session_refresh = client_measurements(client_info)
            finite = math.isfinite(x) and math.isfinite(y)
            yield {
                "study_id": study_id,
                "round": round_number,
                "session_id": session_id,
                "worker": pseudonym,
                "device": device,
                "platform_device": platform_device,
                "detected_device": detected_device,
                "user_agent": user_agent,
                "viewport_width": viewport_w,
                "viewport_height": viewport_h,
                "device_pixel_ratio": dpr,
                "refresh_hz": trial_refresh if trial_refresh is not None else session_refresh,
                "client_info": client_info,
                "session_status": status,
                "session_validity": validity,
                "session_valid_clicks": valid_clicks,
                "session_quality_flags": quality_flags,
                "session_rejection_reason": rejection_reason,
                "session_started_at": started_at,
                "session_finished_at": finished_at,
                "session_control_inside": control_inside,
                "session_control_passed": control_passed,
                "session_screens": screens_of[1],
                "trial_id": trial_id,
                "position": position,
                "trial_role": role,
                "phase_onsets_ms": phase_onsets,
                "scheduled_onsets_ms": scheduled_onsets,
                "load_wait_ms": load_wait,
                "blocked_clicks": blocked,
                "trial_flags": trial_flags,
                "target_id": target_id,
                "dataset": target.dataset,
                "image_stem": target.image_stem,
                "object_stem": target.object_stem,
                "click_type": target.click_type,
                "model_type": target.model_type,
                "model_id": target.model_id,
                "model_variant": target.model_variant,
                "checkpoint_sha256": target.checkpoint_sha256,
                "full_stem": target.full_stem,
                "image_width": target.width,
                "image_height": target.height,
                "click_id": click_id,
                "x": x,
                "y": y,
                "x_px": pixel_index(x, target.width) if finite else None,
                "y_px": pixel_index(y, target.height) if finite else None,
                "shown_width": shown_w,
                "shown_height": shown_h,
                "pointer_type": pointer,
                "reaction_ms": reaction,
                "event_timestamp_ms": event_ts,
                "received_at": received_at,
                "is_valid": is_valid,
                "distance_px": distance,
                "invalid_reason": invalid_reason,
                "counted": bool(is_valid) and validity == counted_validity and role == Trial.Role.TASK,
            }
            if index % 4096 == 0:
                bar.update(4096)
        bar.update(total - bar.n if total >= bar.n else 0)


def _arrow_schema():
    import pyarrow as pa

    kinds = {
        "int": pa.int64(),
        "float": pa.float64(),
        "str": pa.string(),
        "bool": pa.bool_(),
        "time": pa.timestamp("us", tz="UTC"),
        "json": pa.string(),
    }
    return pa.schema([pa.field(name, kinds[kind]) for name, kind in FULL_COLUMNS])


_JSON_COLUMNS = tuple(name for name, kind in FULL_COLUMNS if kind == "json")


def _write_parquet(rows, path: Path, manifest: dict) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = _arrow_schema().with_metadata({PARQUET_KEY: json.dumps(manifest, ensure_ascii=False).encode()})
    count = 0
    columns: dict[str, list] = {name: [] for name in COLUMN_NAMES}

    def flush(writer) -> None:
        for name in _JSON_COLUMNS:
            columns[name] = [json.dumps(value, sort_keys=True) for value in columns[name]]
        writer.write_batch(pa.RecordBatch.from_pydict(columns, schema=schema))
        for values in columns.values():
            values.clear()

    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        for row in rows:
            for name in COLUMN_NAMES:
                columns[name].append(row[name])
            count += 1
            if count % BATCH_ROWS == 0:
                flush(writer)
        if count % BATCH_ROWS or count == 0:
            flush(writer)
    return count


def _json_default(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot write {type(value).__name__} to JSON Lines")


def _write_jsonl(rows, path: Path) -> int:
    count = 0
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, default=_json_default, ensure_ascii=False))
            handle.write("\n")
            count += 1
    return count


def full_manifest_for(*, study_ids: list[int], format: str) -> dict:
    """The manifest a full export of ``study_ids`` in ``format`` writes beside its file, with its row count
    (the download ``full.manifest.json``: the JSON Lines file cannot carry it)."""
    studies = studies_for_export(study_ids=study_ids)
    ids = [s.pk for s in studies]
    manifest = full_manifest(studies=studies, targets=export_targets(study_ids=ids), format=format)
    manifest["rows"] = full_click_count(study_ids=ids)
    return manifest


def full_export(
    *,
    study_ids: list[int],
    out_path: str | Path,
    format: str | None = None,
    progress: bool = False,
    on_message: Callable[[str], None] | None = None,
) -> FullExport:
    """Write every click of ``study_ids`` to ``out_path`` as Parquet or JSON Lines.

    Args:
      format: "parquet", "jsonl", or None: from the file suffix (.parquet/.jsonl), else Parquet where
        pyarrow is installed and JSON Lines where it is not.

    Raises:
      ExportError: unknown study, unknown format, or Parquet asked for without pyarrow.
    """
    path = Path(out_path)
    if format is None:
        suffix = path.suffix.lower().lstrip(".")
        format = suffix if suffix in FORMATS else default_format()
    if format not in FORMATS:
        raise ExportError(f"export format {format!r} is not supported: use one of {list(FORMATS)}.")
    if format == "parquet" and not pyarrow_available():
        raise ExportError(
            "Parquet needs pyarrow, which is not installed here: install it or ask for --format jsonl."
        )
    studies = studies_for_export(study_ids=study_ids)
    ids = [s.pk for s in studies]
    path.parent.mkdir(parents=True, exist_ok=True)
    total = full_click_count(study_ids=ids)
    targets = export_targets(study_ids=ids)
    manifest = full_manifest(studies=studies, targets=targets, format=format)
    rows = _rows(study_ids=ids, targets=targets, progress=progress, total=total)
    written = _write_parquet(rows, path, manifest) if format == "parquet" else _write_jsonl(rows, path)
    result = FullExport(path=path, format=format, rows=written, manifest_path=manifest_path_of(path))
    if written == 0:
        message = (
            f"studies {', '.join(map(str, ids))}: no clicks recorded yet; the file holds the columns only."
        )
        result.messages.append(message)
        if on_message:
            on_message(message)
    manifest.update(file=path.name, rows=written, messages=result.messages)
    manifest_path_of(path).write_text(
        json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    logger.info("full export written", extra={"study_ids": ids, "rows": written, "path": str(path)})
    return result
