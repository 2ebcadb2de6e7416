"""The RClicks clicks CSV: reading it, grouping its rows into click tasks, and their error masks.

A row of ``clicks.csv`` is one valid click of one crowd worker (columns in :data:`CLICKS_COLUMNS`,
``../shared/spec/rclicks-protocol.md`` §1.1). A *task* is one ``full_stem``: one (image, object,
previous mask, click type) combination, with all its clicks (every device).

Deliberate differences from the reference ``Clicks`` loader:

* Tasks are matched to dataset samples by the explicit ``(dataset, image_stem, object_stem)``
  columns, never by cutting ``full_stem`` at ``_ritm``/``_sam``/... (protocol §8 item 8).
* Clicks are always rescaled from the shown frame ``(w, h)`` to the size of the loaded image, for
  every dataset (protocol §8 item 9), and kept as floats (no truncation).
* The ignore band (GrabCut/Berkeley value 128) is excluded from the error regions, as it is from IoU.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

from benchmark.datasets import Dataset, Sample, SampleKey, limited_size
from benchmark.stems import CLICK_TYPES, DEVICES

logger = logging.getLogger(__name__)

CLICKS_COLUMNS = (
    "dataset",
    "image_stem",
    "object_stem",
    "model_type",
    "click_type",
    "full_stem",
    "device",
    "x",
    "y",
    "w",
    "h",
)
_INT_COLUMNS = ("x", "y", "w", "h")


class ClicksFileError(ValueError):
    """The clicks CSV or a previous-round mask is unusable (the message names the file and the fix)."""


def read_clicks_csv(path: str | Path, *, device: str | None = None) -> pd.DataFrame:
    """Read an RClicks ``clicks.csv`` (ours or the public release).

    Args:
      path: the CSV file. Columns are found by name; extra columns are kept.
      device: ``"pc"``, ``"mobile"`` or None (all rows).

    Returns:
      A DataFrame with the :data:`CLICKS_COLUMNS` (plus any extra ones). String columns stay
      strings (``object_stem``/``model_type`` are ``""`` where unset, never NaN); ``x``, ``y``,
      ``w``, ``h`` are int64 pixels in the shown frame of size (w, h).

    Raises:
      ClicksFileError: missing file or column, non-integer coordinates, unknown click type/device.
      ValueError: ``device`` is not one of ``pc``, ``mobile`` or None.
    """
    path = Path(path)
    if device is not None and device not in DEVICES:
        raise ValueError(f"device={device!r} is not supported: use 'pc', 'mobile' or None for all rows.")
    if not path.is_file():
        raise ClicksFileError(f"Clicks CSV {path} does not exist: pass the path of an RClicks clicks.csv.")
    frame = pd.read_csv(path, keep_default_na=False, dtype=str)
    missing = [column for column in CLICKS_COLUMNS if column not in frame.columns]
    if missing:
        raise ClicksFileError(
            f"Clicks CSV {path} lacks the column(s) {missing}; an RClicks clicks CSV has the columns "
            f"{list(CLICKS_COLUMNS)} (header row required)."
        )
    for column in _INT_COLUMNS:
        converted = pd.to_numeric(frame[column], errors="coerce")
        bad = converted.isna() | (converted != converted.round())
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise ClicksFileError(
                f"Clicks CSV {path}, data row {row + 1}: column {column!r} holds {frame[column].iloc[row]!r}, "
                "expected an integer pixel coordinate/size."
            )
        frame[column] = converted.astype(np.int64)
    bad_types = sorted(set(frame["click_type"]) - set(CLICK_TYPES))
    if bad_types:
        raise ClicksFileError(
            f"Clicks CSV {path}: unknown click_type value(s) {bad_types}; expected one of {list(CLICK_TYPES)}."
        )
    bad_devices = sorted(set(frame["device"]) - set(DEVICES))
    if bad_devices:
        raise ClicksFileError(
            f"Clicks CSV {path}: unknown device value(s) {bad_devices}; expected one of {list(DEVICES)}."
        )
    bad_size = (frame["w"] <= 0) | (frame["h"] <= 0)
    if bad_size.any():
        row = int(np.flatnonzero(bad_size.to_numpy())[0])
        raise ClicksFileError(f"Clicks CSV {path}, data row {row + 1}: w and h must be positive frame sizes.")
    if device is not None:
        frame = frame[frame["device"] == device].reset_index(drop=True)
    return frame


@dataclass
class ClickTask:
    """All real clicks of one ``full_stem``.

    ``clicks_xy``: float64 (n, 2) of (x, y) = (column, row) pixels in the *loaded* image, rescaled
    from the shown frame (w, h) as ``x * W / w`` after clipping x to [0, w - 1] (same for y).
    ``devices``: (n,) str array of ``"pc"``/``"mobile"``, aligned with ``clicks_xy``.
    """

    key: SampleKey
    full_stem: str
    model_type: str
    click_type: str
    clicks_xy: np.ndarray
    devices: np.ndarray


def _exif_swaps_axes(image: Image.Image) -> bool:
    # EXIF orientations 5..8 rotate by 90 degrees; decoders that honour EXIF swap width and height.
    try:
        return image.getexif().get(0x0112, 1) in (5, 6, 7, 8)
    except Exception:  # a broken EXIF block: decoders ignore it as well
        return False


def loaded_image_size(sample: Sample) -> tuple[int, int]:
    """(H, W) of ``sample.load_image()``, from the file header when that is safe.

    The header size is limited to ``sample.max_side`` with the loader's own rule; a file whose EXIF
    orientation rotates it by 90 degrees is decoded instead, so the size is exactly the loader's.
    """
    with Image.open(sample.image_path) as image:
        width, height = image.size
        rotated = _exif_swaps_axes(image)
    if rotated:
        height, width = sample.load_image().shape[:2]
        return int(height), int(width)
    width, height = limited_size(width, height, sample.max_side)
    return int(height), int(width)


def group_tasks(df: pd.DataFrame, dataset: Dataset, *, prev_masks_dir: Path | None = None) -> list[ClickTask]:
    """Group the rows of one dataset into click tasks, in the order of first appearance.

    Rows are selected by ``df.dataset == dataset.name`` and matched to samples by the explicit
    ``(dataset, image_stem, object_stem)`` key. Tasks whose sample is not in the dataset folder
    are dropped with a warning that names them (the reference drops them silently).

    Args:
      df: rows from :func:`read_clicks_csv`.
      dataset: the opened dataset; gives the loaded image size for the rescaling.
      prev_masks_dir: when given, every ``fn``/``fp`` task must have ``<full_stem>.png`` there.

    Raises:
      ClicksFileError: one ``full_stem`` carries several (image, object, model, click type) values,
        or a previous mask is missing.
    """
    rows = df[df["dataset"] == dataset.name]
    samples = {sample.key: sample for sample in dataset.samples}
    sizes: dict[Path, tuple[int, int]] = {}
    tasks: list[ClickTask] = []
    dropped: list[str] = []
    identity = ["image_stem", "object_stem", "model_type", "click_type"]
    for full_stem, group in rows.groupby("full_stem", sort=False):
        distinct = group[identity].drop_duplicates()
        if len(distinct) > 1:
            raise ClicksFileError(
                f"Clicks CSV rows of dataset {dataset.name!r} with full_stem {full_stem!r} disagree on "
                f"{identity}: {distinct.to_dict('records')}; one full_stem must name one task."
            )
        image_stem, object_stem, model_type, click_type = distinct.iloc[0].tolist()
        key = SampleKey(dataset=dataset.name, image_stem=image_stem, object_stem=object_stem)
        sample = samples.get(key)
        if sample is None and object_stem.isdigit():
            # An id-encoded mask with a single object: the dataset keys it with object_stem "".
            single = samples.get(SampleKey(dataset=dataset.name, image_stem=image_stem, object_stem=""))
            if single is not None and single.object_id == int(object_stem):
                sample, key = single, single.key
        if sample is None:
            dropped.append(full_stem)
            continue
        if click_type != "first" and prev_masks_dir is not None:
            mask_path = Path(prev_masks_dir) / f"{full_stem}.png"
            if not mask_path.is_file():
                raise ClicksFileError(
                    f"Previous-round mask {mask_path} is missing for {click_type} task {full_stem!r}: "
                    "put the RClicks prev masks (<full_stem>.png) in that folder or pass the right one."
                )
        if sample.image_path not in sizes:
            sizes[sample.image_path] = loaded_image_size(sample)
        height, width = sizes[sample.image_path]
        frame_w = group["w"].to_numpy(np.float64)
        frame_h = group["h"].to_numpy(np.float64)
        x = np.clip(group["x"].to_numpy(np.float64), 0, frame_w - 1) * (width / frame_w)
        y = np.clip(group["y"].to_numpy(np.float64), 0, frame_h - 1) * (height / frame_h)
        tasks.append(
            ClickTask(
                key=key,
                full_stem=str(full_stem),
                model_type=model_type,
                click_type=click_type,
                clicks_xy=np.stack([x, y], axis=1),
                devices=group["device"].to_numpy(dtype=str),
            )
        )
    if dropped:
        logger.warning(
            "Dropped %d click task(s) of dataset %r whose (image_stem, object_stem) is not in %s, e.g. %s",
            len(dropped),
            dataset.name,
            dataset.root,
            dropped[:5],
        )
    return tasks


def load_prev_mask(path: Path, *, shape: tuple[int, int]) -> np.ndarray:
    """Read a previous-round mask ``<full_stem>.png`` (8-bit 0/255, grey or colour) as bool (H, W)."""
    if not path.is_file():
        raise ClicksFileError(
            f"Previous-round mask {path} does not exist: pass the folder holding the <full_stem>.png masks."
        )
    array = np.asarray(Image.open(path))
    if array.ndim == 3:
        array = array[..., 0]  # the reference reads the first channel of a colour file
    if array.shape != tuple(shape):
        raise ClicksFileError(
            f"Previous-round mask {path} is {array.shape[1]}x{array.shape[0]} (WxH) but the loaded image is "
            f"{shape[1]}x{shape[0]}: masks must be saved at the loader's image size."
        )
    return array > 127


def error_mask(task: ClickTask, sample: Sample, prev_masks_dir: Path | None) -> np.ndarray:
    """Error region E of a task, bool (H, W): first: M; fn: M & ~P; fp: ~M & P; ignore band excluded.

    M = GT object mask of ``sample``; P = the previous-round mask ``<prev_masks_dir>/<full_stem>.png``.
    """
    obj, ignore = sample.load_masks()
    if task.click_type == "first":
        return obj & ~ignore
    if prev_masks_dir is None:
        raise ClicksFileError(
            f"Task {task.full_stem!r} is a {task.click_type} task: pass prev_masks_dir, the folder holding "
            "its previous-round mask <full_stem>.png."
        )
    prev = load_prev_mask(Path(prev_masks_dir) / f"{task.full_stem}.png", shape=obj.shape)
    if task.click_type == "fn":
        return obj & ~prev & ~ignore
    if task.click_type == "fp":
        return ~obj & prev & ~ignore
    raise ClicksFileError(
        f"Task {task.full_stem!r} has click_type {task.click_type!r}; expected one of {CLICK_TYPES}."
    )
