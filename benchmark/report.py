"""Summaries of engine results: per-(method, dataset) statistics and the Table-4-style report.

From the per-instance arrays of :mod:`benchmark.engine` (see :class:`~benchmark.engine.InstanceResult`):

* per instance and group, NoC/AuC are averaged over the group's samples before any statistic;
* NoF per group is the number of instances failing, averaged over samples;
* "Base IoU@1" is the baseline's first-click IoU; "User"/"Sample IoU@1" use the real and the sampled
  first clicks (instances without real clicks are left out of those two only).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from benchmark import statistics as stats
from benchmark.engine import InstanceResult
from benchmark.metrics import iou_auc, miou_curve, noc, quality_time_curve

REPORT_THRESHOLDS = (0.85, 0.90)


def _noc_array(ious: np.ndarray, threshold: float, max_clicks: int, quirk: bool) -> np.ndarray:
    """NoC over the last axis of an IoU array (NaN padding never reaches a threshold)."""
    flat = ious.reshape(-1, ious.shape[-1])
    values = [
        noc(np.nan_to_num(row, nan=-1.0), threshold, max_clicks=max_clicks, ritm_float_quirk=quirk)
        for row in flat
    ]
    return np.asarray(values, dtype=np.float64).reshape(ious.shape[:-1])


def _auc_array(ious: np.ndarray) -> np.ndarray:
    flat = ious.reshape(-1, ious.shape[-1])
    return np.asarray([iou_auc(row[~np.isnan(row)]) for row in flat]).reshape(ious.shape[:-1])


# C901: one branch per family of Table-4 columns (NoC, NoF, IoU-AuC, first click, speed), read top to
# bottom like the table; splitting would scatter the column names the docstring lists.
def summarize(  # noqa: C901
    results: Sequence[InstanceResult],
    *,
    ritm_float_quirk: bool = False,
    thresholds: Sequence[float] = REPORT_THRESHOLDS,
) -> dict:
    """Statistics of one (method, dataset): a flat dict of Table-4 columns plus curves.

    Keys: ``method``, ``dataset``, ``instances``; for each threshold t (``85``, ``90``):
    ``base_noc{t}``, ``sample_noc{t}``, ``sample_noc{t}_std``, ``delta_sb_noc{t}``, ``delta_gr_noc{t}``,
    ``delta_hh_noc{t}`` (paired), ``delta_hh_merged_noc{t}`` (when halves were run), ``base_nof{t}``,
    ``sample_nof{t}``, ``sample_nof{t}_std``; IoU-AuC: ``base_auc``, ``sample_auc``, ``sample_auc_std``,
    ``delta_sb_auc``, ``delta_gr_auc``, ``delta_hh_auc``, ``sample_nsr_auc``; first click:
    ``base_iou1``, ``user_iou1``, ``user_iou1_std``, ``user_nsr``, ``sample_iou1``, ``sample_iou1_std``,
    ``sample_nsr``; speed: ``seconds_per_click``, ``encode_seconds_per_image``; curves (lists):
    ``curve_base``, ``curve_groups`` (G lists).
    """
    if not results:
        raise ValueError("summarize needs at least one instance result.")
    first = results[0]
    row: dict = {"method": first.method, "dataset": first.key.dataset, "instances": len(results)}
    with_base = [r for r in results if r.base_iou.size]
    with_groups = [r for r in results if r.group_iou.size]
    max_clicks = max(r.base_iou.shape[-1] if r.base_iou.size else r.group_iou.shape[-1] for r in results)
    if with_base and with_groups and len(with_base) != len(with_groups):
        raise ValueError("Some instances lack Base or group results; re-run them with the same settings.")
    base_ious = np.stack([r.base_iou for r in with_base]) if with_base else None
    group_ious = np.stack([r.group_iou for r in with_groups]) if with_groups else None  # (I, G, S, C)
    for threshold in thresholds:
        tag = f"{round(threshold * 100):d}"
        base_noc = (
            _noc_array(base_ious, threshold, max_clicks, ritm_float_quirk) if base_ious is not None else None
        )
        if base_noc is not None:
            row[f"base_noc{tag}"] = float(base_noc.mean())
            row[f"base_nof{tag}"] = int(np.count_nonzero(base_noc >= max_clicks))
        if group_ious is None:
            continue
        per_sample = _noc_array(group_ious, threshold, max_clicks, ritm_float_quirk)  # (I, G, S)
        group_noc = per_sample.mean(axis=2)
        row[f"sample_noc{tag}"] = stats.sample_mean(group_noc)
        row[f"sample_noc{tag}_std"] = stats.sample_std(group_noc)
        row[f"delta_gr_noc{tag}"] = stats.delta_gr_relative(group_noc)
        if group_noc.shape[1] % 2 == 0:
            row[f"delta_hh_noc{tag}"] = stats.delta_hh_paired_relative(group_noc)
        nof_per_group = np.count_nonzero(per_sample >= max_clicks, axis=0).mean(axis=1)  # (G,)
        nof = stats.nof_statistics(nof_per_group, row.get(f"base_nof{tag}", 0))
        row[f"sample_nof{tag}"], row[f"sample_nof{tag}_std"] = nof["sample"], nof["std"]
        if base_noc is not None:
            row[f"delta_sb_noc{tag}"] = stats.delta_sb_relative(group_noc, base_noc)
            row[f"delta_sb_nof{tag}"] = nof["delta_sb"]
        row[f"delta_gr_nof{tag}"] = nof["delta_gr"]
        if all(r.half_iou.size for r in with_groups):
            halves = np.stack([r.half_iou for r in with_groups])  # (I, 2, S, C)
            half_noc = _noc_array(halves, threshold, max_clicks, ritm_float_quirk).mean(axis=2)
            row[f"delta_hh_merged_noc{tag}"] = stats.delta_hh_merged_relative(half_noc[:, 0], half_noc[:, 1])
    if base_ious is not None:
        base_auc = _auc_array(base_ious)
        row["base_auc"] = float(base_auc.mean())
        row["base_iou1"] = float(base_ious[:, 0].mean())
        row["curve_base"] = miou_curve(list(base_ious)).tolist()
    if group_ious is not None:
        group_auc = _auc_array(group_ious).mean(axis=2)  # (I, G)
        row["sample_auc"] = stats.sample_mean(group_auc)
        row["sample_auc_std"] = stats.sample_std(group_auc)
        row["delta_gr_auc"] = stats.delta_gr_absolute(group_auc)
        if group_auc.shape[1] % 2 == 0:
            row["delta_hh_auc"] = stats.delta_hh_paired_absolute(group_auc)
        if base_ious is not None:
            row["delta_sb_auc"] = stats.delta_sb_absolute(group_auc, base_auc)
        row["sample_nsr_auc"] = stats.sample_nsr(group_auc)
        row["curve_groups"] = [
            np.nanmean(group_ious[:, g], axis=(0, 1)).tolist() for g in range(group_ious.shape[1])
        ]
    if any(r.user_iou.size for r in results):
        user = stats.first_click_statistics([r.user_iou for r in results])
        row.update(user_iou1=user["mean"], user_iou1_std=user["std"], user_nsr=user["nsr"])
        row["user_instances"] = user["instances"]
    if any(r.sample_iou.size for r in results):
        sampled = stats.first_click_statistics([r.sample_iou for r in results])
        row.update(sample_iou1=sampled["mean"], sample_iou1_std=sampled["std"], sample_nsr=sampled["nsr"])
    _time_curves(row, base_ious, group_ious, with_base, with_groups)
    seconds = [r.base_seconds[~np.isnan(r.base_seconds)] for r in results if r.base_seconds.size]
    seconds += [r.group_seconds[~np.isnan(r.group_seconds)] for r in results if r.group_seconds.size]
    if seconds:
        row["seconds_per_click"] = float(np.concatenate(seconds).mean())
    row["encode_seconds_per_image"] = float(
        np.mean([r.encode_seconds for r in results if r.encode_seconds > 0] or [0])
    )
    return row


def _time_curves(row: dict, base_ious, group_ious, with_base, with_groups) -> None:
    """``time_curve_base``/``time_auc_base`` and ``time_curve_sample``/``time_auc_sample`` (every group's
    trajectories pooled): mIoU against the method's time (:func:`benchmark.metrics.quality_time_curve`). A
    trajectory's first click also carries its image's encode time, the mean over the images encoded (an image
    shared by instances is encoded once), as a session's loop encodes after its first ``get_clicks``. Wall
    times: they go to ``timing.json``, not ``summary.json``."""
    encoded = [r.encode_seconds for r in (with_base or with_groups) if r.encode_seconds > 0]
    encode = float(np.mean(encoded)) if encoded else 0.0
    if base_ious is not None and all(r.base_seconds.size for r in with_base):
        seconds = np.stack([r.base_seconds for r in with_base]).astype(np.float64)
        seconds[:, 0] = np.nan_to_num(seconds[:, 0]) + encode
        curve = quality_time_curve(base_ious, seconds)
        row["time_curve_base"] = {"seconds": curve["seconds"], "miou": curve["miou"]}
        row["time_auc_base"] = curve["auc"]
    if group_ious is not None and all(r.group_seconds.size for r in with_groups):
        clicks = group_ious.shape[-1]
        seconds = np.stack([r.group_seconds for r in with_groups]).astype(np.float64).reshape(-1, clicks)
        seconds[:, 0] = np.nan_to_num(seconds[:, 0]) + encode
        curve = quality_time_curve(group_ious.reshape(-1, clicks), seconds)
        row["time_curve_sample"] = {"seconds": curve["seconds"], "miou": curve["miou"]}
        row["time_auc_sample"] = curve["auc"]


def iou_series(frame: pd.DataFrame, max_clicks: int) -> list[tuple[str, str, np.ndarray]]:
    """(sample_id, group, IoU after clicks 1..max_clicks) per trajectory of a ClickSession report.

    In first-seen order; the last accepted IoU is carried forward over clicks the trajectory did not
    reach (stopped early or timed out; 0 before any), as the session summary's curves do.
    """
    series = []
    for (sample, group), rows in frame.groupby(["sample_id", "group"], sort=False):
        values = np.zeros(max_clicks)
        last = 0.0
        by_click = dict(zip(rows["click_index"], rows["iou"]))
        for index in range(1, max_clicks + 1):
            current = by_click.get(index, np.nan)
            if not np.isnan(current):
                last = current
            values[index - 1] = last
        series.append((str(sample), str(group), values))
    return series


def seconds_series(frame: pd.DataFrame, max_clicks: int) -> list[np.ndarray]:
    """Per trajectory of a ClickSession report (in :func:`iou_series`'s order), the method's time each click
    1..max_clicks took: a round's ``timing_s`` on its first click, 0 on its other clicks, NaN beyond the last
    round (timed-out rounds count: the method spent that time)."""
    if frame.empty:
        return []
    first_of_round = (
        frame.groupby(["sample_id", "group", "round"], sort=False)["click_index"].transform("min")
        == frame["click_index"]
    )
    per_click = np.where(first_of_round, frame["timing_s"].astype(float), 0.0)
    series = []
    for _, rows in frame.assign(_seconds=per_click).groupby(["sample_id", "group"], sort=False):
        values = np.full(max_clicks, np.nan)
        for index, seconds in zip(rows["click_index"], rows["_seconds"]):
            if 1 <= index <= max_clicks:
                values[int(index) - 1] = seconds
        series.append(values)
    return series


def _group_order(name: str) -> tuple:
    digits = name.lstrip("G")
    return (0, int(digits), name) if name.startswith("G") and digits.isdigit() else (1, 0, name)


def session_values(
    frame: pd.DataFrame, *, max_clicks: int, thresholds: Sequence[float] = REPORT_THRESHOLDS
) -> dict:
    """Per-instance, per-group NoC and IoU-AuC of a ClickSession report (baseline or group clicker).

    Returns plain lists (JSON-ready): ``sample_ids`` (sorted), ``groups`` (G1, G2, ... G10 in number
    order; ``["base"]`` for the baseline), ``noc`` = {"85": (I, G), "90": (I, G)}, ``auc`` (I, G) and
    ``max_clicks``. A trajectory missing from the report is NaN. NoC and AuC are computed on the carried-
    forward series with :func:`benchmark.metrics.noc` / ``iou_auc``, as the session summary computes them.
    """
    series = iou_series(frame, max_clicks)
    samples = sorted({sample for sample, _, _ in series})
    groups = sorted({group for _, group, _ in series}, key=_group_order)
    row_of = {sample: i for i, sample in enumerate(samples)}
    column_of = {group: j for j, group in enumerate(groups)}
    tags = [f"{round(t * 100):d}" for t in thresholds]
    nocs = {tag: np.full((len(samples), len(groups)), np.nan) for tag in tags}
    aucs = np.full((len(samples), len(groups)), np.nan)
    for sample, group, values in series:
        i, j = row_of[sample], column_of[group]
        for tag, threshold in zip(tags, thresholds):
            nocs[tag][i, j] = noc(values, threshold, max_clicks=max_clicks)
        aucs[i, j] = iou_auc(values)
    return {
        "sample_ids": samples,
        "groups": groups,
        "noc": {tag: values.tolist() for tag, values in nocs.items()},
        "auc": aucs.tolist(),
        "max_clicks": int(max_clicks),
    }


def session_statistics(groups: dict, base: dict | None = None) -> dict:
    """Table-4 columns of a clicking-group session from :func:`session_values` (the same keys as
    :func:`summarize`): for each threshold t, ``sample_noc{t}``, ``sample_noc{t}_std``,
    ``delta_gr_noc{t}``, ``delta_hh_noc{t}`` (paired; even group counts only), ``sample_nof{t}``,
    ``sample_nof{t}_std``, ``delta_gr_nof{t}``; ``sample_auc``, ``sample_auc_std``, ``delta_gr_auc``,
    ``delta_hh_auc``, ``sample_nsr_auc``. With ``base`` (the baseline session's values on the same
    instances) also ``base_noc{t}``, ``base_nof{t}``, ``delta_sb_noc{t}``, ``delta_sb_nof{t}``,
    ``base_auc`` and ``delta_sb_auc``.

    Raises ValueError when ``base`` covers other instances or another ``max_clicks``.
    """
    max_clicks = int(groups["max_clicks"])
    row: dict = {"instances": len(groups["sample_ids"]), "groups": len(groups["groups"])}
    if base is not None:
        if list(base["sample_ids"]) != list(groups["sample_ids"]):
            missing = sorted(set(groups["sample_ids"]) ^ set(base["sample_ids"]))[:5]
            raise ValueError(
                f"the baseline and the group session cover different instances (e.g. {missing})."
            )
        if int(base["max_clicks"]) != max_clicks:
            raise ValueError(
                f"the baseline session has max_clicks={base['max_clicks']}, the group session {max_clicks}."
            )
    for tag, values in groups["noc"].items():
        group_noc = np.asarray(values, dtype=np.float64)  # (I, G)
        row[f"sample_noc{tag}"] = stats.sample_mean(group_noc)
        row[f"sample_noc{tag}_std"] = stats.sample_std(group_noc)
        row[f"delta_gr_noc{tag}"] = stats.delta_gr_relative(group_noc)
        if group_noc.shape[1] % 2 == 0:
            row[f"delta_hh_noc{tag}"] = stats.delta_hh_paired_relative(group_noc)
        base_noc = None
        if base is not None and tag in base["noc"]:
            base_noc = np.asarray(base["noc"][tag], dtype=np.float64)[:, 0]
            row[f"base_noc{tag}"] = float(base_noc.mean())
            row[f"base_nof{tag}"] = int(np.count_nonzero(base_noc >= max_clicks))
        nof_per_group = np.count_nonzero(group_noc >= max_clicks, axis=0).astype(np.float64)  # (G,)
        nof = stats.nof_statistics(nof_per_group, row.get(f"base_nof{tag}", 0))
        row[f"sample_nof{tag}"], row[f"sample_nof{tag}_std"] = nof["sample"], nof["std"]
        row[f"delta_gr_nof{tag}"] = nof["delta_gr"]
        if base_noc is not None:
            row[f"delta_sb_noc{tag}"] = stats.delta_sb_relative(group_noc, base_noc)
            row[f"delta_sb_nof{tag}"] = nof["delta_sb"]
    group_auc = np.asarray(groups["auc"], dtype=np.float64)
    row["sample_auc"] = stats.sample_mean(group_auc)
    row["sample_auc_std"] = stats.sample_std(group_auc)
    row["delta_gr_auc"] = stats.delta_gr_absolute(group_auc)
    if group_auc.shape[1] % 2 == 0:
        row["delta_hh_auc"] = stats.delta_hh_paired_absolute(group_auc)
    row["sample_nsr_auc"] = stats.sample_nsr(group_auc)
    if base is not None:
        base_auc = np.asarray(base["auc"], dtype=np.float64)[:, 0]
        row["base_auc"] = float(base_auc.mean())
        row["delta_sb_auc"] = stats.delta_sb_absolute(group_auc, base_auc)
    return row


TABLE_COLUMNS = (
    ("method", "Method"),
    ("dataset", "Dataset"),
    ("instances", "Instances"),
    ("base_noc90", "Base NoC@90"),
    ("sample_noc90", "Sample NoC@90"),
    ("sample_noc90_std", "± (STD)"),
    ("delta_sb_noc90", "ΔSB NoC (%)"),
    ("delta_gr_noc90", "ΔGR NoC (%)"),
    ("delta_hh_noc90", "ΔHH NoC (%, paired)"),
    ("delta_hh_merged_noc90", "ΔHH NoC (%, merged)"),
    ("base_nof90", "Base NoF@90"),
    ("sample_nof90", "Sample NoF@90"),
    ("base_noc85", "Base NoC@85"),
    ("sample_noc85", "Sample NoC@85"),
    ("base_auc", "Base IoU-AuC"),
    ("sample_auc", "Sample IoU-AuC"),
    ("delta_gr_auc", "ΔGR IoU-AuC"),
    ("sample_nsr_auc", "Sample NSR IoU@20"),
    ("base_iou1", "Base IoU@1"),
    ("user_iou1", "User IoU@1"),
    ("user_iou1_std", "User STD IoU@1"),
    ("user_nsr", "User NSR IoU@1"),
    ("sample_iou1", "Sample IoU@1"),
    ("sample_nsr", "Sample NSR IoU@1"),
    ("dataset_path", "Dataset path"),
    ("dataset_hash", "Dataset hash"),
    ("checkpoint_sha256", "Checkpoint sha256"),
)

NO_CHECKPOINT = "-"
"""The report's checkpoint cell for a model that loads no weights file (e.g. the embedded GrabCut segmenter)."""

TIMING_KEYS = (
    "seconds_per_click",
    "encode_seconds_per_image",
    "time_curve_base",
    "time_auc_base",
    "time_curve_sample",
    "time_auc_sample",
)
"""Wall-time fields of a summary: kept out of ``summary.json`` and ``report.*`` (which are then
byte-identical between runs of the same config) and written to ``timing.json`` / ``timing.csv``."""

TIMING_COLUMNS = (
    ("method", "Method"),
    ("dataset", "Dataset"),
    ("seconds_per_click", "s/click"),
    ("encode_seconds_per_image", "encode s/image"),
    ("time_auc_base", "Base mIoU-time AuC"),
    ("time_auc_sample", "Sample mIoU-time AuC"),
)


def table(rows: Sequence[dict]) -> pd.DataFrame:
    """The Table-4-style frame: one row per (method, dataset), the columns of :data:`TABLE_COLUMNS`."""
    frame = pd.DataFrame([{key: _cell(row, key) for key, _ in TABLE_COLUMNS} for row in rows])
    return frame.sort_values(["method", "dataset"]).reset_index(drop=True)


def _cell(row: dict, key: str):
    """The report cell of ``key`` from a summary (NaN when the summary lacks it).

    ``checkpoint_sha256`` is a list in the summary (the hashes of the run's instance files, one per run
    folder since another checkpoint's files are recomputed): its hashes joined by spaces, with
    :data:`NO_CHECKPOINT` for a weight-free model's empty hash. Summaries written before the hash was
    recorded have no such list: their cell stays empty (unknown, not "no checkpoint").
    """
    value = row.get(key, np.nan)
    if key == "checkpoint_sha256" and isinstance(value, list):
        return " ".join(sha256 or NO_CHECKPOINT for sha256 in value) if value else np.nan
    return value


def to_markdown(frame: pd.DataFrame) -> str:
    """A GitHub Markdown table with human column titles (floats with 3 decimals, '–' when missing)."""
    titles = dict(TABLE_COLUMNS)
    header = [titles.get(column, column) for column in frame.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for _, row in frame.iterrows():
        cells = []
        for value in row:
            if isinstance(value, float | np.floating):
                cells.append("–" if np.isnan(value) else f"{value:.3f}")
            else:
                cells.append(str(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def split_timing(summary: dict) -> tuple[dict, dict]:
    """(summary without wall times, {method, dataset, wall-time fields})."""
    timing = {key: summary[key] for key in TIMING_KEYS if key in summary}
    timing.update(method=summary.get("method"), dataset=summary.get("dataset"))
    return {key: value for key, value in summary.items() if key not in TIMING_KEYS}, timing


def write_timing(rows: Sequence[dict], out_dir: Path) -> Path:
    """``timing.csv``: seconds per click and per encoded image of every (method, dataset)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame([{key: row.get(key, np.nan) for key, _ in TIMING_COLUMNS} for row in rows])
    path = out_dir / "timing.csv"
    frame.rename(columns=dict(TIMING_COLUMNS)).to_csv(path, index=False)
    return path


def write_report(rows: Sequence[dict], out_dir: Path) -> tuple[Path, Path]:
    """Write ``report.csv`` and ``report.md`` into ``out_dir``; return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    frame = table(rows)
    csv_path, md_path = out_dir / "report.csv", out_dir / "report.md"
    frame.rename(columns=dict(TABLE_COLUMNS)).to_csv(csv_path, index=False)
    md_path.write_text(to_markdown(frame), encoding="utf-8")
    return csv_path, md_path
