"""Segmentation dataset layouts, read exactly as the RClicks/RITM loaders read them.

No Django here: ``collector``'s ``import_dataset`` and the benchmark both use this module, so a dataset
folder means the same thing to the web app and to the benchmark.

Layouts (``../shared/spec/rclicks-protocol.md`` §1.4):

=========  ==================  ===========================  ==============================================
layout     images              masks                        mask encoding
=========  ==================  ===========================  ==============================================
grabcut    ``data_GT/``        ``boundary_GT/``             first channel: 128 ignore band, > 128 object
berkeley   ``images/``         ``masks/``                   as grabcut
davis      ``img/``            ``gt/``                      any channel > 0 is object
coco_mval  ``img/``            ``gt/``                      as davis (dataset name ``COCO``)
tetris     ``images/``         ``masks/<stem>.png``         id = R + 256·G + 65536·B, every id an object;
                                                            image and ids resized to long side <= 2048
folder     ``images/``         ``masks/<stem>.png`` or      grey value 128 ignore band, > 128 object;
                               ``masks/<stem>_<obj>.png``   one file per object in the second form
=========  ==================  ===========================  ==============================================

Images and masks are paired by stem (the file name without its last extension), so stems may contain
spaces and dots and extensions may differ in case or kind. Images are returned as (H, W, 3) uint8 RGB;
masks as boolean (H, W) arrays. Coordinates elsewhere are x = column, y = row.

Every problem raises :class:`DatasetError` naming the file and what to do about it.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
from PIL import Image as PILImage

LAYOUTS = ("grabcut", "berkeley", "davis", "coco_mval", "tetris", "folder")

#: (images folder, masks folder, RClicks dataset name, max long side or None)
_LAYOUT_SPEC: dict[str, tuple[str, str, str, int | None]] = {
    "grabcut": ("data_GT", "boundary_GT", "GrabCut", None),
    "berkeley": ("images", "masks", "Berkeley", None),
    "davis": ("img", "gt", "DAVIS", None),
    "coco_mval": ("img", "gt", "COCO", None),
    "tetris": ("images", "masks", "TETRIS", 2048),
    "folder": ("images", "masks", "", None),
}

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp"})
IGNORE_VALUE = 128
#: Files an OS or editor drops into folders; never data.
_JUNK_NAMES = frozenset({"thumbs.db", "desktop.ini"})


class DatasetError(ValueError):
    """A dataset folder or file cannot be used; the message names it and says what to do."""


@dataclass(frozen=True, order=True)
class SampleKey:
    """Identifies one instance: the columns RClicks keys its clicks by."""

    dataset: str
    image_stem: str
    object_stem: str = ""


@dataclass
class Sample:
    """One instance (object) of one image.

    ``object_id`` is the object's value in the decoded label map: 1 for single-object layouts, the
    TETRIS colour id, or the folder layout's per-object file (always 1).
    """

    key: SampleKey
    image_path: Path
    mask_path: Path
    object_id: int
    layout: str
    max_side: int | None = None

    def load_image(self) -> np.ndarray:
        """(H, W, 3) uint8 RGB, resized so the long side is at most ``max_side`` (bilinear)."""
        image = read_image_rgb(self.image_path)
        return resize_long_side(image, self.max_side)

    def load_masks(self) -> tuple[np.ndarray, np.ndarray]:
        """(object mask, ignore mask): boolean (H, W) arrays at :meth:`load_image` size."""
        labels, ignore = _decode_labels(self.mask_path, self.layout, self.max_side)
        return labels == self.object_id, ignore


@dataclass
class Dataset:
    name: str
    layout: str
    root: Path
    samples: list[Sample]

    def __len__(self) -> int:
        return len(self.samples)

    @property
    def image_stems(self) -> list[str]:
        return sorted({s.key.image_stem for s in self.samples})


# --------------------------------------------------------------------------------------------------
# files


def check_stem(stem: str, path: Path) -> None:
    """Reject stems that cannot be a safe file name or CSV key (separators, control characters)."""
    if not stem or stem in {".", ".."}:
        raise DatasetError(f"{path}: the file name has no usable stem; rename the file.")
    bad = [ch for ch in stem if ch in "/\\" or unicodedata.category(ch) in {"Cc", "Cf", "Zl", "Zp"}]
    if bad:
        shown = ", ".join(sorted({repr(ch) for ch in bad}))
        raise DatasetError(
            f"{path}: unsafe stem {stem!r} (contains {shown}); rename the file without path separators or "
            "control characters."
        )


def _list_files(folder: Path, what: str) -> dict[str, Path]:
    """Image-like files of ``folder`` by stem; raises on non-images and duplicate stems."""
    if not folder.is_dir():
        raise DatasetError(f"{folder}: the {what} folder is missing; check PATH and --layout.")
    by_stem: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        if path.name.startswith(".") or path.name.lower() in _JUNK_NAMES:
            continue
        if path.is_dir():
            raise DatasetError(f"{path}: unexpected sub-folder in the {what} folder; move it out.")
        if path.suffix.lower() not in IMAGE_EXTENSIONS:
            raise DatasetError(
                f"{path}: not an image file (extension {path.suffix or 'none'!r}); the {what} folder may "
                f"only hold images ({', '.join(sorted(IMAGE_EXTENSIONS))}). Remove or move it."
            )
        stem = path.stem
        check_stem(stem, path)
        if stem in by_stem:
            raise DatasetError(
                f"{path}: stem {stem!r} also used by {by_stem[stem].name}; images and masks are paired by "
                "stem, so keep one file per stem."
            )
        by_stem[stem] = path
    return by_stem


def verify_image_file(path: Path) -> tuple[int, int]:
    """Fully decode ``path`` with Pillow; return (width, height).

    Raises :class:`DatasetError` for unreadable or truncated files and for decompression bombs
    (more pixels than Pillow's ``Image.MAX_IMAGE_PIXELS``).
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", PILImage.DecompressionBombWarning)
            with PILImage.open(path) as img:
                width, height = img.size
                img.load()
    except (PILImage.DecompressionBombWarning, PILImage.DecompressionBombError) as exc:
        raise DatasetError(
            f"{path}: image too large to load safely ({exc}); the limit is "
            f"{PILImage.MAX_IMAGE_PIXELS} pixels. Downscale the image and its mask."
        ) from None
    except PILImage.UnidentifiedImageError:
        raise DatasetError(f"{path}: not a readable image; replace it with a valid image file.") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise DatasetError(f"{path}: unreadable or truncated image ({exc}); replace the file.") from None
    return width, height


def read_image_rgb(path: Path) -> np.ndarray:
    """Decode with OpenCV and convert BGR to RGB, as the reference loaders do."""
    data = np.fromfile(str(path), dtype=np.uint8)
    image = cv2.imdecode(data, cv2.IMREAD_COLOR) if data.size else None
    if image is None:
        raise DatasetError(f"{path}: not a readable image; replace it with a valid image file.")
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)


def _read_bgr_unchanged_depth(path: Path) -> np.ndarray:
    data = np.fromfile(str(path), dtype=np.uint8)
    image = cv2.imdecode(data, cv2.IMREAD_COLOR) if data.size else None
    if image is None:
        raise DatasetError(f"{path}: not a readable mask image; replace it with a valid PNG/BMP.")
    return image


def limited_size(width: int, height: int, max_side: int | None) -> tuple[int, int]:
    """(width, height) after limiting the long side to ``max_side`` as the RClicks loader does."""
    if not max_side or max(width, height) <= max_side:
        return width, height
    ratio = max_side / max(width, height)
    if width >= height:
        return max_side, int(ratio * height + 0.5)
    return int(ratio * width + 0.5), max_side


def resize_long_side(image: np.ndarray, max_side: int | None) -> np.ndarray:
    height, width = image.shape[:2]
    new_w, new_h = limited_size(width, height, max_side)
    if (new_w, new_h) == (width, height):
        return image
    return cv2.resize(image, (new_w, new_h), interpolation=cv2.INTER_LINEAR)


# --------------------------------------------------------------------------------------------------
# mask decoding


def _decode_labels(path: Path, layout: str, max_side: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Label map (int64 HxW, 0 background) and ignore mask (bool HxW) of a mask file."""
    bgr = _read_bgr_unchanged_depth(path)
    if layout in {"grabcut", "berkeley", "folder"}:
        first = bgr[:, :, 0]
        labels = (first > IGNORE_VALUE).astype(np.int64)
        ignore = first == IGNORE_VALUE
    elif layout in {"davis", "coco_mval"}:
        labels = (bgr.max(axis=2) > 0).astype(np.int64)
        ignore = np.zeros(labels.shape, dtype=bool)
    elif layout == "tetris":
        rgb = bgr[:, :, ::-1].astype(np.int64)
        labels = rgb[:, :, 0] + 256 * rgb[:, :, 1] + 65536 * rgb[:, :, 2]
        ignore = np.zeros(labels.shape, dtype=bool)
    else:  # pragma: no cover - guarded by open_dataset
        raise DatasetError(f"unknown layout {layout!r}; use one of {', '.join(LAYOUTS)}.")
    height, width = labels.shape
    new_w, new_h = limited_size(width, height, max_side)
    if (new_w, new_h) != (width, height):
        labels = _resize_label_map(labels, new_w, new_h)
        ignore = cv2.resize(ignore.astype(np.uint8), (new_w, new_h), interpolation=cv2.INTER_LINEAR) > 0
    return labels, ignore


def _resize_label_map(labels: np.ndarray, new_w: int, new_h: int) -> np.ndarray:
    """Resize each id on its own (bilinear, then nonzero) and paste ids in increasing order."""
    out = np.zeros((new_h, new_w), dtype=np.int64)
    for object_id in np.unique(labels):
        if object_id == 0:
            continue
        binary = (labels == object_id).astype(np.uint8)
        resized = cv2.resize(binary, (new_w, new_h), interpolation=cv2.INTER_LINEAR) > 0
        out[resized] = object_id
    return out


def object_ids(path: Path, layout: str) -> list[int]:
    """Nonzero ids of a mask file (before any resizing)."""
    labels, _ = _decode_labels(path, layout, None)
    return [int(v) for v in np.unique(labels) if v != 0]


# --------------------------------------------------------------------------------------------------
# opening a dataset


def guess_layout(root: Path) -> str:
    """The layout of a dataset folder from its sub-folders and name; raises when ambiguous."""
    root = Path(root)
    lowered = root.name.lower()
    for token, layout in (
        ("coco", "coco_mval"),
        ("tetris", "tetris"),
        ("berkeley", "berkeley"),
        ("davis", "davis"),
    ):
        if token in lowered:
            return layout
    if (root / "data_GT").is_dir():
        return "grabcut"
    if (root / "img").is_dir() and (root / "gt").is_dir():
        return "davis"
    raise DatasetError(
        f"{root}: cannot tell the dataset layout from the folder; pass --layout (one of {', '.join(LAYOUTS)})."
    )


def open_dataset(
    root: str | Path, layout: str, *, name: str | None = None, max_side: int | None = None
) -> Dataset:
    """List the instances of the dataset at ``root`` read with ``layout``.

    Pairs images and masks by stem and, for TETRIS, decodes each mask to list its object ids. Image and
    mask pixels are otherwise only read when a sample is loaded; :func:`validate_sample` checks one fully.
    ``max_side`` overrides the layout's long-side limit (TETRIS: 2048).
    """
    root = Path(root)
    if layout not in _LAYOUT_SPEC:
        raise DatasetError(f"unknown layout {layout!r}; use one of {', '.join(LAYOUTS)}.")
    if not root.is_dir():
        raise DatasetError(f"{root}: dataset folder not found; check the path.")
    images_dir, masks_dir, default_name, default_max_side = _LAYOUT_SPEC[layout]
    dataset_name = name or default_name or root.name
    limit = max_side if max_side is not None else default_max_side

    images = _list_files(root / images_dir, "images")
    if not images:
        raise DatasetError(f"{root / images_dir}: no images found; check PATH and --layout.")
    masks = _list_files(root / masks_dir, "masks")

    samples: list[Sample] = []
    if layout == "folder":
        samples = _pair_folder(images, masks, dataset_name, limit)
    else:
        for stem, image_path in images.items():
            mask_path = masks.get(stem)
            if mask_path is None:
                raise DatasetError(
                    f"{image_path}: no mask with stem {stem!r} in {root / masks_dir}; add the mask or remove "
                    "the image."
                )
            if layout == "tetris":
                ids = object_ids(mask_path, layout)
                if not ids:
                    raise DatasetError(
                        f"{mask_path}: the id-encoded mask has no object (every pixel decodes to id 0); "
                        "an object's id is R + 256*G + 65536*B. Fix the mask or remove the image."
                    )
                multi = len(ids) > 1
                for object_id in ids:
                    key = SampleKey(dataset_name, stem, str(object_id) if multi else "")
                    samples.append(_make_sample(key, image_path, mask_path, object_id, limit, layout))
            else:
                key = SampleKey(dataset_name, stem, "")
                samples.append(_make_sample(key, image_path, mask_path, 1, limit, layout))
        orphans = sorted(set(masks) - set(images))
        if orphans:
            raise DatasetError(
                f"{masks[orphans[0]]}: mask without an image of the same stem in {root / images_dir} "
                f"({len(orphans)} such mask(s)); add the image or remove the mask."
            )
    return Dataset(name=dataset_name, layout=layout, root=root, samples=samples)


def _make_sample(
    key: SampleKey, image_path: Path, mask_path: Path, object_id: int, limit: int | None, layout: str
) -> Sample:
    return Sample(
        key=key,
        image_path=image_path,
        mask_path=mask_path,
        object_id=object_id,
        layout=layout,
        max_side=limit,
    )


def _pair_folder(
    images: dict[str, Path], masks: dict[str, Path], dataset_name: str, limit: int | None
) -> list[Sample]:
    """``masks/<stem>.png`` (one object) or ``masks/<stem>_<object>.png`` (one file per object).

    An exact stem match wins; otherwise the longest image stem that prefixes ``<stem>_`` owns the mask.
    """
    per_image: dict[str, list[tuple[str, Path]]] = {stem: [] for stem in images}
    by_length = sorted(images, key=len, reverse=True)
    for mask_stem, mask_path in masks.items():
        if mask_stem in images:
            per_image[mask_stem].append(("", mask_path))
            continue
        owner = next(
            (s for s in by_length if mask_stem.startswith(s + "_") and len(mask_stem) > len(s) + 1), None
        )
        if owner is None:
            raise DatasetError(
                f"{mask_path}: no image for this mask; name masks <image stem>.png or "
                "<image stem>_<object>.png after an image in images/."
            )
        per_image[owner].append((mask_stem[len(owner) + 1 :], mask_path))
    samples: list[Sample] = []
    for stem, image_path in images.items():
        entries = per_image[stem]
        if not entries:
            raise DatasetError(
                f"{image_path}: no mask for image stem {stem!r}; add masks/{stem}.png or masks/{stem}_<object>.png."
            )
        if any(obj == "" for obj, _ in entries) and len(entries) > 1:
            raise DatasetError(
                f"{image_path}: both masks/{stem}.png and per-object masks exist; keep one form per image."
            )
        for object_stem, mask_path in sorted(entries):
            key = SampleKey(dataset_name, stem, object_stem)
            samples.append(_make_sample(key, image_path, mask_path, 1, limit, "folder"))
    return samples


@dataclass
class CheckedSample:
    """What :func:`validate_sample` learned: the loaded frame and the masks."""

    width: int
    height: int
    original_width: int
    original_height: int
    object_mask: np.ndarray
    ignore_mask: np.ndarray


def validate_sample(sample: Sample) -> CheckedSample:
    """Decode the image and mask fully and check they agree; raise :class:`DatasetError` if not.

    Checks: readable and complete image, no decompression bomb, mask readable, mask size equal to the
    image size, a non-empty object.
    """
    original_w, original_h = verify_image_file(sample.image_path)
    mask_w, mask_h = verify_image_file(sample.mask_path)
    if (mask_w, mask_h) != (original_w, original_h):
        raise DatasetError(
            f"{sample.mask_path}: mask is {mask_w}x{mask_h} but image {sample.image_path.name} is "
            f"{original_w}x{original_h}; masks must have the image's size."
        )
    object_mask, ignore_mask = sample.load_masks()
    if not object_mask.any():
        what = f"object {sample.key.object_stem!r}" if sample.key.object_stem else "the object"
        raise DatasetError(
            f"{sample.mask_path}: empty mask, {what} has no pixel (object pixels are > {IGNORE_VALUE} for "
            "grey masks, > 0 for DAVIS/COCO, a nonzero id for TETRIS); fix the mask or remove the image."
        )
    height, width = object_mask.shape
    return CheckedSample(width, height, original_w, original_h, object_mask, ignore_mask)


# --------------------------------------------------------------------------------------------------
# content identity


#: How each layout decodes its mask files: two folders holding the same files mean the same data only when
#: they are decoded the same way, so this is part of a dataset's content hash.
MASK_ENCODINGS = {
    "grabcut": "grey-128-ignore",
    "berkeley": "grey-128-ignore",
    "folder": "grey-128-ignore",
    "davis": "any-channel",
    "coco_mval": "any-channel",
    "tetris": "rgb-id",
}
CONTENT_HASH_FORMAT = "clicklab-dataset-content/1"


@dataclass(frozen=True)
class ContentEntry:
    """One instance as the content hash sees it: its key, object id, and the names and sha256 of its files."""

    image_stem: str
    object_stem: str
    object_id: int
    image_name: str
    image_sha256: str
    mask_name: str
    mask_sha256: str


def layout_max_side(layout: str) -> int | None:
    """The long-side limit a layout loads its images with by default (TETRIS: 2048; others: None)."""
    if layout not in _LAYOUT_SPEC:
        raise DatasetError(f"unknown layout {layout!r}; use one of {', '.join(LAYOUTS)}.")
    return _LAYOUT_SPEC[layout][3]


def content_hash(entries: Iterable[ContentEntry], *, layout: str, max_side: int | None) -> str:
    """sha256 (64 hex digits) of a dataset's content: every instance's key, object id, image and mask file
    (file name and sha256 of its bytes), how the layout decodes masks and the long-side limit.

    Independent of the dataset's name, its folder and the folder names of the layout (``data_GT`` or
    ``images``), and of the order of the entries: the same files imported from an archive or a folder, or
    read by the benchmark from a copy, give the same hash. The web app computes it from the sha256s it
    stored at import (``collector.selectors.datasets``), the benchmark from the files.
    """
    if layout not in MASK_ENCODINGS:
        raise DatasetError(f"unknown layout {layout!r}; use one of {', '.join(LAYOUTS)}.")
    lines = sorted(
        json.dumps(
            [
                e.image_stem,
                e.object_stem,
                int(e.object_id),
                e.image_name,
                e.image_sha256,
                e.mask_name,
                e.mask_sha256,
            ],
            ensure_ascii=False,
        )
        for e in entries
    )
    header = json.dumps(
        {"format": CONTENT_HASH_FORMAT, "mask_encoding": MASK_ENCODINGS[layout], "max_side": max_side},
        sort_keys=True,
    )
    digest = hashlib.sha256(header.encode("utf-8"))
    for line in lines:
        digest.update(b"\n" + line.encode("utf-8"))
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    """sha256 hex digest of a file's bytes (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def dataset_content_hash(dataset: Dataset, *, known_sha256: Mapping[Path, str] | None = None) -> str:
    """:func:`content_hash` of an opened dataset folder (reads every image and mask file once).

    ``known_sha256``: sha256 digests already computed, by path (the import has them), to skip re-reading.
    """
    digests: dict[Path, str] = dict(known_sha256 or {})

    def sha(path: Path) -> str:
        if path not in digests:
            digests[path] = file_sha256(path)
        return digests[path]

    entries = [
        ContentEntry(
            image_stem=s.key.image_stem,
            object_stem=s.key.object_stem,
            object_id=s.object_id,
            image_name=s.image_path.name,
            image_sha256=sha(s.image_path),
            mask_name=s.mask_path.name,
            mask_sha256=sha(s.mask_path),
        )
        for s in dataset.samples
    ]
    # open_dataset gives every sample the same limit
    max_side = dataset.samples[0].max_side if dataset.samples else layout_max_side(dataset.layout)
    return content_hash(entries, layout=dataset.layout, max_side=max_side)
