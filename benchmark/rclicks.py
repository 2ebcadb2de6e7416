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
* An error region is rebuilt with the rule the round was built with (:func:`task_error_regions`, also the
  web app's next-round build): components under ``min_error_area_px`` dropped. With the export's manifest
  (:func:`read_export`) the rebuilt masks are exactly the ones workers were shown.
* A Clicklab export's ``model_type`` holds only RClicks' own tokens; the model that made a previous mask
  is in the extra ``model_name`` column (:data:`MODEL_NAME_COLUMN`), which :func:`group_tasks` reads
  into ``ClickTask.model_type`` when present.
"""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
import pandas as pd
from PIL import Image

from benchmark.archives import ArchiveLimits, archive_root, extract_archive
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
#: Extra column of a Clicklab export after the 11: our token of the model that made the previous mask
#: (``embedded``, ``sam2``, ``ritm``, ...; empty for ``first``). RClicks' readers ignore it.
MODEL_NAME_COLUMN = "model_name"
#: Where the RClicks code looks for the previous masks of each dataset (``rclicks/paths.py``), under
#: :data:`MASKS_ROOT` of an export; any other dataset: ``<dataset>/fn_fp``.
MASKS_ROOT = "SUBSEC_MASKS"
REFERENCE_MASK_DIRS = {
    "GrabCut": "all_benchmark_datasets/fn_fp",
    "Berkeley": "all_benchmark_datasets/fn_fp",
    "DAVIS": "all_benchmark_datasets/fn_fp",
    "COCO": "all_benchmark_datasets/fn_fp",
    "TETRIS": "tetris_fn_fp/tetris_fn_fp_masks",
}
MANIFEST_FILE = "manifest.json"
CLICKS_FILE = "clicks.csv"


def prev_masks_subdir(dataset: str) -> str:
    """The folder of ``dataset``'s previous-round masks, relative to an export (the reference layout)."""
    return f"{MASKS_ROOT}/{REFERENCE_MASK_DIRS.get(dataset, f'{dataset}/fn_fp')}"


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
    if MODEL_NAME_COLUMN in rows.columns:
        identity.append(MODEL_NAME_COLUMN)
    for full_stem, group in rows.groupby("full_stem", sort=False):
        distinct = group[identity].drop_duplicates()
        if len(distinct) > 1:
            raise ClicksFileError(
                f"Clicks CSV rows of dataset {dataset.name!r} with full_stem {full_stem!r} disagree on "
                f"{identity}: {distinct.to_dict('records')}; one full_stem must name one task."
            )
        image_stem, object_stem, model_type, click_type = distinct.iloc[0].tolist()[:4]
        if MODEL_NAME_COLUMN in distinct.columns and distinct.iloc[0][MODEL_NAME_COLUMN]:
            model_type = distinct.iloc[0][MODEL_NAME_COLUMN]  # our export: the model RClicks has no token for
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


def drop_small_components(region: np.ndarray, *, min_area_px: int) -> np.ndarray:
    """``region`` (bool (H, W)) without its 8-connected components of fewer than ``min_area_px`` pixels."""
    if min_area_px <= 1 or not region.any():
        return region.copy()
    count, labels, stats, _ = cv2.connectedComponentsWithStats(region.astype(np.uint8), connectivity=8)
    keep = np.zeros(count, dtype=bool)
    keep[1:] = stats[1:, cv2.CC_STAT_AREA] >= min_area_px
    return keep[labels]


def task_error_regions(
    *, mask: np.ndarray, previous: np.ndarray, ignore: np.ndarray | None, min_area_px: int
) -> dict[str, np.ndarray | None]:
    """{"fn": region or None, "fp": region or None}: fn = M & ~P & ~ignore, fp = ~M & P & ~ignore, each
    without its components under ``min_area_px`` and None when what is left is under ``min_area_px``.

    The one rule for error masks: the web app's next-round build (``collector.services.next_round``) makes
    the regions workers are shown with it, and :func:`error_mask` rebuilds them with it.
    """
    keep = np.ones_like(mask) if ignore is None else ~ignore
    raw = {"fn": mask & ~previous & keep, "fp": ~mask & previous & keep}
    regions: dict[str, np.ndarray | None] = {}
    for kind, region in raw.items():
        cleaned = drop_small_components(region, min_area_px=min_area_px)
        regions[kind] = cleaned if int(np.count_nonzero(cleaned)) >= max(1, min_area_px) else None
    return regions


def error_mask(
    task: ClickTask, sample: Sample, prev_masks_dir: Path | None, *, min_error_area_px: int = 0
) -> np.ndarray:
    """Error region E of a task, bool (H, W): first: M; fn: M & ~P; fp: ~M & P; ignore band excluded.

    M = GT object mask of ``sample``; P = the previous-round mask ``<prev_masks_dir>/<full_stem>.png``. The
    fn/fp region is made by :func:`task_error_regions` with ``min_error_area_px``, the rule the round was built
    with (a Clicklab export's manifest names it per mask: :meth:`ExportManifest.min_error_area_px`; 0 for
    the public RClicks release, whose regions are the plain differences). A region that rule leaves empty
    is all False.
    """
    obj, ignore = sample.load_masks()
    ignore = ignore & ~obj  # as the web app's import stores it
    if task.click_type == "first":
        return obj & ~ignore
    if prev_masks_dir is None:
        raise ClicksFileError(
            f"Task {task.full_stem!r} is a {task.click_type} task: pass prev_masks_dir, the folder holding "
            "its previous-round mask <full_stem>.png."
        )
    if task.click_type not in ("fn", "fp"):
        raise ClicksFileError(
            f"Task {task.full_stem!r} has click_type {task.click_type!r}; expected one of {CLICK_TYPES}."
        )
    prev = load_prev_mask(Path(prev_masks_dir) / f"{task.full_stem}.png", shape=obj.shape)
    region = task_error_regions(mask=obj, previous=prev, ignore=ignore, min_area_px=min_error_area_px)[
        task.click_type
    ]
    return region if region is not None else np.zeros_like(obj)


# --------------------------------------------------------------------------------------------------
# A Clicklab export (exports.rclicks): its manifest names the datasets and the rules of its rounds


@dataclass(frozen=True)
class ExportDataset:
    """A dataset of an export: the ``dataset`` column value, its layout and content hash
    (``benchmark.datasets.dataset_content_hash``; "" when the export does not know it)."""

    name: str
    layout: str
    content_hash: str
    studies: tuple[int, ...] = ()


@dataclass
class ExportManifest:
    """What ``manifest.json`` of a Clicklab RClicks export says, and where the export's files are."""

    root: Path
    datasets: list[ExportDataset]
    #: ``<full_stem>.png`` -> who made that previous mask and the rule of its error regions
    prev_masks: dict[str, dict] = field(default_factory=dict)
    raw: dict = field(default_factory=dict)

    @property
    def clicks_csv(self) -> Path:
        return self.root / CLICKS_FILE

    def prev_masks_dir(self, dataset: str) -> Path:
        return self.root / prev_masks_subdir(dataset)

    def min_error_area_px(self, full_stem: str) -> int:
        """The ``min_error_area_px`` the error regions of ``full_stem`` were built with (0 if not recorded)."""
        return int(self.prev_masks.get(f"{full_stem}.png", {}).get("min_error_area_px") or 0)

    def dataset_for(self, *, content_hash: str, folder: Path) -> ExportDataset:
        """The dataset of this export a folder with ``content_hash`` holds.

        Raises:
          ClicksFileError: no dataset of the export has that content, naming what the export holds.
        """
        known = [d for d in self.datasets if d.content_hash]
        for entry in self.datasets:
            if entry.content_hash == content_hash:
                return entry
        if len(self.datasets) == 1 and not known:
            return self.datasets[0]  # an export that does not know its content hash: trust the one name
        names = ", ".join(f"{d.name!r} (content {d.content_hash or 'unknown'})" for d in self.datasets)
        raise ClicksFileError(
            f"{folder} (content {content_hash}) is not the dataset of the export {self.root}, which holds {names}. "
            "Pass --dataset the folder that dataset was imported from (the same image and mask files), "
            "or --clicks clicks.csv with --name to use its clicks on another folder."
        )


def _read_manifest(root: Path) -> ExportManifest:
    path = root / MANIFEST_FILE
    if not path.is_file() or not (root / CLICKS_FILE).is_file():
        raise ClicksFileError(
            f"{root} is not a Clicklab RClicks export: it needs {MANIFEST_FILE} and {CLICKS_FILE} (download "
            "rclicks.zip from the study page, or run manage.py export_rclicks --study ID --out DIR)."
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ClicksFileError(f"{path} is not readable JSON ({error}); export the study again.") from None
    entries = manifest.get("datasets")
    if not isinstance(entries, list) or not entries:
        raise ClicksFileError(
            f"{path} names no dataset (no 'datasets' list): it was written by an earlier Clicklab; export the "
            "study again, or pass --clicks clicks.csv and --name DATASET."
        )
    datasets = [
        ExportDataset(
            name=str(entry.get("name", "")),
            layout=str(entry.get("layout", "")),
            content_hash=str(entry.get("content_hash") or ""),
            studies=tuple(int(s) for s in entry.get("studies", [])),
        )
        for entry in entries
    ]
    prev = manifest.get("prev_mask_provenance") or {}
    return ExportManifest(root=root, datasets=datasets, prev_masks=dict(prev), raw=manifest)


#: Extracting a zipped export for ``open_export``: the user's own file, so only the safety rules matter.
EXPORT_ARCHIVE_LIMITS = ArchiveLimits(max_uncompressed_bytes=64 * 1024**3)


@contextlib.contextmanager
def open_export(path: str | Path) -> Iterator[ExportManifest]:
    """A Clicklab RClicks export, its folder or its ``rclicks.zip`` (extracted to a temporary folder that
    lives until the ``with`` block ends).

    Raises:
      ClicksFileError: not an export, or an export without a dataset list.
      benchmark.archives.ArchiveError: a zip that cannot be extracted safely.
    """
    path = Path(path)
    if path.is_dir():
        yield _read_manifest(path)
        return
    if not path.is_file():
        raise ClicksFileError(f"{path} does not exist: pass the export folder or its rclicks.zip.")
    with tempfile.TemporaryDirectory(prefix="clicklab-export-") as folder:
        extracted = extract_archive(path, Path(folder) / "export", limits=EXPORT_ARCHIVE_LIMITS)
        yield _read_manifest(archive_root(extracted))
