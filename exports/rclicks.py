"""The RClicks export: ``clicks.csv``, ``previews.csv`` and the previous-round masks ``<full_stem>.png``.

Output folder (``../shared/spec/rclicks-protocol.md`` §1 and §8 "Implications")::

    <out>/clicks.csv                 the 11 columns in datasheet order, then ``model_name`` (+ ``valid``
                                     with include_invalid)
    <out>/previews.csv               round-1 clicks with the display-mode name in ``dataset`` (optional)
    <out>/SUBSEC_MASKS/all_benchmark_datasets/fn_fp/<full_stem>.png   GrabCut, Berkeley, DAVIS, COCO
    <out>/SUBSEC_MASKS/tetris_fn_fp/tetris_fn_fp_masks/<full_stem>.png TETRIS
    <out>/SUBSEC_MASKS/<dataset>/fn_fp/<full_stem>.png                 any other dataset
    <out>/manifest.json              the datasets (name, layout, content hash), the studies and the
                                     rules their rounds were built with (``exports.manifest``), counts,
                                     options and messages of this export, and per previous mask the
                                     segmenter, variant and checkpoint sha256 that made it and the
                                     ``min_error_area_px`` of its error regions (``prev_mask_provenance``)

``model_type`` keeps the RClicks vocabulary (``ritm``, ``sam``, ``simple``, ``mivos``: what RClicks' readers
expect); a previous mask made by another model (``embedded``, ``sam2``, ...) has an empty ``model_type`` and
its token in ``model_name``, the column after the 11 (RClicks' readers ignore unknown columns;
``benchmark.rclicks`` reads it back). ``full_stem`` and the mask file names keep our token.

Rows are written as they are read from a server-side cursor: memory does not grow with the click count
(only the per-target table, one entry per task, is held). ``x``/``y`` are the integer pixel index of the
stored float position (floor, clipped to [0, w-1] x [0, h-1]); ``w``/``h`` are the image's canonical
frame, the size the benchmark loader returns, so the reference loaders and ``benchmark.rclicks`` need no
rescaling for it.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import math
import os
import shutil
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from django.core.files.storage import default_storage
from django.utils import timezone
from PIL import Image as PILImage
from tqdm import tqdm

from benchmark.rclicks import (
    CLICKS_COLUMNS,
    CLICKS_FILE,
    MANIFEST_FILE,
    MASKS_ROOT,
    MODEL_NAME_COLUMN,
    prev_masks_subdir,
)
from benchmark.stems import FullStemError, full_stem_check, rclicks_model_type
from exports.manifest import FORMAT_VERSION, export_sources, target_model
from exports.selectors import (
    ExportError,
    ExportTarget,
    export_targets,
    rclicks_click_count,
    rclicks_click_rows,
    studies_for_export,
    study_session_counts,
)

logger = logging.getLogger(__name__)

VALID_COLUMN = "valid"
PREVIEWS_FILE = "previews.csv"


def prev_masks_dir(*, out_dir: Path, dataset: str) -> Path:
    """The folder of ``dataset``'s previous-round masks inside an export (the reference layout)."""
    return Path(out_dir) / prev_masks_subdir(dataset)


@dataclass
class RClicksExport:
    """What an export wrote. ``messages`` explain empty studies and other things a user should know."""

    out_dir: Path
    clicks_csv: Path
    previews_csv: Path | None
    rows: int = 0
    preview_rows: int = 0
    masks: int = 0
    #: ``<full_stem>.png`` -> who made that previous mask (segmenter, variant, checkpoint sha256).
    mask_provenance: dict[str, dict] = field(default_factory=dict)
    rows_by_study: dict[int, int] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)
    csv_seconds: float = 0.0
    masks_seconds: float = 0.0


def pixel_index(value: float, size: int) -> int:
    """Integer pixel index of a float coordinate: floor, then clip to [0, size - 1]."""
    index = math.floor(value)
    if index < 0:
        return 0
    if index >= size:
        return size - 1
    return index


def _check_targets(targets: dict[int, ExportTarget]) -> None:
    """Every full_stem follows the grammar (one previous mask per full_stem is checked on writing)."""
    for target in targets.values():
        try:
            full_stem_check(
                full_stem=target.full_stem,
                image_stem=target.image_stem,
                object_stem=target.object_stem,
                click_type=target.click_type,
                model_type=target.model_type,
                source_device=target.source_device,
                source_index=target.source_index,
                what=f"target {target.target_id} of study {target.study_id} (round {target.round_number})",
            )
        except FullStemError as exc:
            raise ExportError(str(exc)) from None


def empty_study_message(
    *, study_id: int, study_name: str, include_invalid: bool, min_valid: int, batch: int
) -> str:
    """Why a study contributed no row, in words a researcher can act on."""
    counts = study_session_counts(study_id=study_id)
    head = f"study {study_id} ({study_name!r}): no clicks exported"
    if counts.started == 0:
        return f"{head}: it has no sessions yet (publish it and let workers take batches)."
    if include_invalid:
        return f"{head}: {counts.started} session(s) exist but none has a click."
    if counts.finished == 0:
        return (
            f"{head}: no session finished ({counts.in_progress} still running, {counts.expired} expired); only "
            "clicks of finished, counted sessions are exported."
        )
    parts = []
    if counts.rejected:
        reason = counts.top_rejection_reason or f"fewer than {min_valid} of {batch} valid"
        parts.append(f"{counts.rejected} rejected, most often: {reason}")
    if counts.pending:
        parts.append(f"{counts.pending} still awaiting validation")
    if counts.counted:
        parts.append(f"{counts.counted} counted but without a valid click")
    detail = "; ".join(parts) if parts else f"fewer than {min_valid} of {batch} valid"
    return (
        f"{head}: {counts.finished} session(s) finished, none counted ({detail}). Pass --include-invalid to "
        "export every click with a validity column."
    )


def rclicks_export(
    *,
    study_ids: list[int],
    out_dir: str | Path,
    include_invalid: bool = False,
    previews: bool | None = None,
    progress: bool = False,
    verify_mask_values: bool = False,
    on_message: Callable[[str], None] | None = None,
) -> RClicksExport:
    """Write the RClicks export of ``study_ids`` into ``out_dir`` (created; existing files replaced).

    Args:
      study_ids: studies whose clicks are pooled (their targets must agree on every shared full_stem).
      out_dir: output folder.
      include_invalid: every click of every session, with a ``valid`` column (1 = the row the default
        export holds: a valid click of a counted session; 0 otherwise) after the 11 standard ones.
      previews: write ``previews.csv`` (round-1 clicks, display-mode name in ``dataset``). None = only
        when the studies use more than one display mode (the display-mode ablation).
      progress: a tqdm bar on stderr.
      verify_mask_values: decode every previous mask and re-encode any that is not purely 0/255 (by
        default only the PNG header is checked: format, 8-bit grey, image size).
      on_message: called with each message as it arises (they are also returned).

    Memory: O(number of targets) for the task table; O(1) per click row.

    Raises:
      ExportError: unknown study, full_stem off the grammar, a missing/wrong-sized previous mask, or two
        studies with different masks under one full_stem.
    """
    studies = studies_for_export(study_ids=study_ids)
    ids = [s.pk for s in studies]
    modes = sorted({s.display_mode for s in studies})
    write_previews = previews if previews is not None else len(modes) > 1
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _remove_previous_export(out)
    targets = export_targets(study_ids=ids)
    _check_targets(targets)

    result = RClicksExport(
        out_dir=out,
        clicks_csv=out / CLICKS_FILE,
        previews_csv=out / PREVIEWS_FILE if write_previews else None,
    )
    result.rows_by_study = {pk: 0 for pk in ids}
    say = on_message or (lambda message: None)
    header = [*CLICKS_COLUMNS, MODEL_NAME_COLUMN, *([VALID_COLUMN] if include_invalid else [])]
    # Per target: the six key columns, the frame size and the model name, built once instead of per click.
    prefixes = {
        pk: (
            (
                t.dataset,
                t.image_stem,
                t.object_stem,
                rclicks_model_type(t.model_type),
                t.click_type,
                t.full_stem,
            ),
            t.width,
            t.height,
            t.model_type,
        )
        for pk, t in targets.items()
    }
    used_error_targets: set[int] = set()
    started = time.perf_counter()
    total = rclicks_click_count(study_ids=ids, include_invalid=include_invalid)
    with ExitStack() as stack:
        clicks_writer = csv.writer(
            stack.enter_context(open(result.clicks_csv, "w", newline="", encoding="utf-8")),
            lineterminator="\n",
        )
        clicks_writer.writerow(header)
        previews_writer = None
        if result.previews_csv is not None:
            previews_writer = csv.writer(
                stack.enter_context(open(result.previews_csv, "w", newline="", encoding="utf-8")),
                lineterminator="\n",
            )
            previews_writer.writerow(header)
        bar = stack.enter_context(
            tqdm(total=total, unit="click", desc="clicks.csv", file=sys.stderr, disable=not progress)
        )
        rows_by_target: dict[int, int] = {}
        rows = preview_rows = 0
        floor = math.floor
        for click_id, target_id, device, x, y, counted in rclicks_click_rows(
            study_ids=ids, include_invalid=include_invalid
        ):
            key, width, height, model_name = prefixes[target_id]
            try:
                x_px, y_px = floor(x), floor(y)
            except (ValueError, OverflowError):
                raise ExportError(
                    f"click {click_id} (target {target_id}) has a non-finite position ({x}, {y}); fix or "
                    "delete it in the admin, then export again."
                ) from None
            # pixel_index inlined: this loop runs once per click
            x_px = 0 if x_px < 0 else (width - 1 if x_px >= width else x_px)
            y_px = 0 if y_px < 0 else (height - 1 if y_px >= height else y_px)
            row = [*key, device, x_px, y_px, width, height, model_name]
            if include_invalid:
                row.append(1 if counted else 0)
            clicks_writer.writerow(row)
            rows_by_target[target_id] = rows_by_target.get(target_id, 0) + 1
            if previews_writer is not None and key[4] == "first":
                row[0] = targets[target_id].display_mode
                previews_writer.writerow(row)
                preview_rows += 1
            rows += 1
            if rows % 4096 == 0:
                bar.update(4096)
        bar.update(rows % 4096)
    result.rows, result.preview_rows = rows, preview_rows
    for target_id, count in rows_by_target.items():
        target = targets[target_id]
        result.rows_by_study[target.study_id] += count
        if target.click_type != "first":
            used_error_targets.add(target_id)

    result.csv_seconds = time.perf_counter() - started
    started = time.perf_counter()
    error_targets = [targets[pk] for pk in sorted(used_error_targets)]
    result.masks = _write_prev_masks(
        targets=error_targets,
        out_dir=out,
        progress=progress,
        verify_values=verify_mask_values,
    )
    result.mask_provenance = _mask_provenance(error_targets)
    result.masks_seconds = time.perf_counter() - started
    for study in studies:
        if result.rows_by_study[study.pk] == 0:
            message = empty_study_message(
                study_id=study.pk,
                study_name=study.name,
                include_invalid=include_invalid,
                min_valid=study.min_valid_per_session,
                batch=study.batch_size,
            )
            result.messages.append(message)
            say(message)
    _write_manifest(result=result, studies=studies, targets=targets, include_invalid=include_invalid)
    logger.info(
        "rclicks export written",
        extra={"study_ids": ids, "rows": result.rows, "masks": result.masks, "out_dir": str(out)},
    )
    return result


def _mask_provenance(targets: list[ExportTarget]) -> dict[str, dict]:
    """``<full_stem>.png`` -> who made the previous mask and the ``min_error_area_px`` of its error regions."""
    provenance: dict[str, dict] = {}
    owners: dict[str, ExportTarget] = {}
    for target in targets:
        name = f"{target.full_stem}.png"
        entry = {**target_model(target), "min_error_area_px": target.min_error_area_px}
        if name in provenance and provenance[name]["min_error_area_px"] != target.min_error_area_px:
            other = owners[name]
            raise ExportError(
                f"{name}: studies {other.study_id} and {target.study_id} share this task, but built its error "
                f"regions with min_error_area_px {other.min_error_area_px} and {target.min_error_area_px}, so "
                "their workers were shown different regions. Export these studies separately."
            )
        provenance.setdefault(name, entry)
        owners.setdefault(name, target)
    return provenance


def _remove_previous_export(out: Path) -> None:
    """Delete what an earlier export wrote here, so no stale mask or previews file survives."""
    for name in (CLICKS_FILE, PREVIEWS_FILE, MANIFEST_FILE):
        (out / name).unlink(missing_ok=True)
    if (out / MASKS_ROOT).is_dir():
        shutil.rmtree(out / MASKS_ROOT)


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_grey8_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) when ``data`` is a non-interlaced 8-bit greyscale PNG, else None.

    Reads only the IHDR chunk (signature, then length 13, "IHDR", width, height, bit depth, colour
    type, compression, filter, interlace), which is all an export needs to accept a stored mask."""
    if len(data) < 33 or data[:8] != _PNG_SIGNATURE or data[12:16] != b"IHDR":
        return None
    bit_depth, colour_type, interlace = data[24], data[25], data[28]
    if bit_depth != 8 or colour_type != 0 or interlace != 0:
        return None
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def _read_stored(name: str) -> bytes:
    try:
        path = default_storage.path(name)
    except NotImplementedError:  # a remote storage backend: go through its File API
        with default_storage.open(name, "rb") as handle:
            return handle.read()
    with open(path, "rb") as handle:
        return handle.read()


def _mask_png(*, target: ExportTarget, verify_values: bool) -> bytes:
    """The target's previous mask as an 8-bit 0/255 PNG at the image size.

    The stored bytes are kept when the file is an 8-bit grey PNG of the right size (and, with
    ``verify_values``, holds only 0 and 255); anything else (another format or mode, 0/1 values) is
    re-encoded as 0/255 grey PNG. The round build writes 0/255 masks, and decoding every pixel to prove
    it costs about 1 ms per 480x360 mask (most of an export's time), so it is done only when asked."""
    name = target.previous_mask_file
    what = f"target {target.target_id} ({target.full_stem!r}) of study {target.study_id}"
    if not name:
        raise ExportError(
            f"{what} is a {target.click_type} task without a previous mask file; the next-round build stores it "
            "in Target.previous_mask_file. Rebuild the round or delete the target."
        )
    try:
        data = _read_stored(name)
    except FileNotFoundError:
        raise ExportError(
            f"{what}: previous mask file {name!r} is missing from the media storage; restore it or rebuild the "
            "round."
        ) from None
    size = png_grey8_size(data)
    if size is not None and not verify_values:
        if size != (target.width, target.height):
            raise _size_error(what, name, size, target)
        return data
    try:
        with PILImage.open(io.BytesIO(data)) as image:
            if image.size != (target.width, target.height):
                raise _size_error(what, name, image.size, target)
            if size is not None and sum(image.histogram()[1:255]) == 0:
                return data
            array = np.asarray(image)
    except ExportError:
        raise
    except Exception as exc:  # PIL raises many types for a broken file
        raise ExportError(f"{what}: previous mask file {name!r} is not a readable image ({exc}).") from None
    if array.ndim == 3:
        array = array[..., 0]  # the reference reads the first channel of a colour mask
    binary = np.where(array > (127 if array.max() > 1 else 0), 255, 0).astype(np.uint8)
    buffer = io.BytesIO()
    PILImage.fromarray(binary, mode="L").save(buffer, format="PNG")
    return buffer.getvalue()


def _size_error(what: str, name: str, size: tuple[int, int], target: ExportTarget) -> ExportError:
    return ExportError(
        f"{what}: previous mask file {name!r} is {size[0]}x{size[1]} but the image is "
        f"{target.width}x{target.height}; masks must be at the image's canonical size."
    )


def _write_prev_masks(
    *, targets: list[ExportTarget], out_dir: Path, progress: bool, verify_values: bool
) -> int:
    written: dict[str, tuple[bytes, int]] = {}  # path -> (sha256 of the PNG, the target that wrote it)
    folders: dict[str, str] = {}
    for target in tqdm(targets, unit="mask", desc="prev masks", file=sys.stderr, disable=not progress):
        folder = folders.get(target.dataset)
        if folder is None:
            folder = str(prev_masks_dir(out_dir=out_dir, dataset=target.dataset))
            os.makedirs(folder, exist_ok=True)
            folders[target.dataset] = folder
        path = os.path.join(folder, f"{target.full_stem}.png")
        data = _mask_png(target=target, verify_values=verify_values)
        digest = hashlib.sha256(data).digest()
        if path in written:
            if written[path][0] != digest:
                raise ExportError(
                    f"{os.path.basename(path)}: targets {written[path][1]} and {target.target_id} share this file "
                    f"name in {folder} but their previous masks differ (RClicks keeps one mask folder for GrabCut, "
                    "Berkeley, DAVIS and COCO). Export these studies separately."
                )
            continue
        with open(path, "wb") as handle:
            handle.write(data)
        written[path] = (digest, target.target_id)
    return len(written)


def _write_manifest(
    *, result: RClicksExport, studies, targets: dict[int, ExportTarget], include_invalid: bool
) -> None:
    sources = export_sources(studies=studies, targets=targets)
    for entry in sources["studies"]:
        entry["rows"] = result.rows_by_study[entry["id"]]
    manifest = {
        "format": "rclicks",
        "format_version": FORMAT_VERSION,
        "created_at": timezone.now().isoformat(),
        "include_invalid": include_invalid,
        "columns": [*CLICKS_COLUMNS, MODEL_NAME_COLUMN, *([VALID_COLUMN] if include_invalid else [])],
        "rows": result.rows,
        "preview_rows": result.preview_rows if result.previews_csv else None,
        "datasets": sources["datasets"],
        "prev_masks_dirs": {d["name"]: prev_masks_subdir(d["name"]) for d in sources["datasets"]},
        "prev_masks": result.masks,
        "prev_mask_provenance": result.mask_provenance,
        "studies": sources["studies"],
        "messages": result.messages,
    }
    (result.out_dir / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
