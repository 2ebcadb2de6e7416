"""Importing a dataset folder: validate everything, then write files and rows in one transaction."""

from __future__ import annotations

import csv
import hashlib
import io
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from django.conf import settings
from django.db import transaction
from django.utils.text import slugify
from PIL import Image as PILImage

from benchmark.datasets import DatasetError, Sample, open_dataset, validate_sample
from collector.models import Dataset, Image, Instance

logger = logging.getLogger(__name__)

Progress = Callable[[int, int, str], None]
DESCRIPTIONS_FILE = "descriptions.csv"


class ImportFailed(Exception):
    """The import was refused or failed; nothing was written. The message names the file at fault."""


@dataclass
class ImportResult:
    dataset: Dataset
    created: bool
    images: int
    instances: int
    ignore_bands: int
    unchanged: bool = False
    messages: list[str] = field(default_factory=list)


@dataclass
class _Prepared:
    sample: Sample
    image_sha256: str
    image_size: int
    mask_sha256: str
    mask_size: int
    width: int
    height: int
    original_width: int
    original_height: int
    mask_png: bytes
    ignore_png: bytes | None
    area: int
    ignore_area: int
    bbox: tuple[int, int, int, int]
    description: str


def file_sha256(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def mask_png_bytes(mask: np.ndarray) -> bytes:
    """8-bit single-channel PNG, 0/255, of a boolean (H, W) mask."""
    buffer = io.BytesIO()
    PILImage.fromarray(np.where(mask, 255, 0).astype(np.uint8), mode="L").save(
        buffer, format="PNG", optimize=False
    )
    return buffer.getvalue()


def _read_descriptions(root: Path) -> dict[tuple[str, str], str]:
    """Optional ``descriptions.csv`` (image_stem, object_stem, description) for Text Description mode."""
    path = root / DESCRIPTIONS_FILE
    if not path.exists():
        return {}
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = {"image_stem", "object_stem", "description"} - set(reader.fieldnames or [])
        if missing:
            raise ImportFailed(
                f"{path}: missing column(s) {', '.join(sorted(missing))}; the header must be "
                "image_stem,object_stem,description."
            )
        return {(row["image_stem"], row["object_stem"]): row["description"] for row in reader}


def _check_lengths(sample: Sample) -> None:
    limits = (
        (sample.key.image_stem, Image._meta.get_field("stem").max_length, sample.image_path, "image stem"),
        (
            sample.key.object_stem,
            Instance._meta.get_field("object_stem").max_length,
            sample.mask_path,
            "object stem",
        ),
    )
    for value, limit, path, what in limits:
        if len(value) > limit:
            raise ImportFailed(
                f"{path}: the {what} is {len(value)} characters long (at most {limit}); rename the file."
            )


def _prepare(samples: list[Sample], descriptions: dict, progress: Progress | None) -> list[_Prepared]:
    """Decode and check every sample; raises ImportFailed on the first bad file (nothing written yet)."""
    prepared: list[_Prepared] = []
    hashes: dict[Path, tuple[str, int]] = {}
    for index, sample in enumerate(samples):
        if progress:
            progress(index, len(samples), f"checking {sample.image_path.name}")
        _check_lengths(sample)
        try:
            checked = validate_sample(sample)
        except DatasetError as exc:
            raise ImportFailed(str(exc)) from None
        for path in (sample.image_path, sample.mask_path):
            if path not in hashes:
                hashes[path] = file_sha256(path)
        ys, xs = np.nonzero(checked.object_mask)
        ignore = checked.ignore_mask & ~checked.object_mask
        prepared.append(
            _Prepared(
                sample=sample,
                image_sha256=hashes[sample.image_path][0],
                image_size=hashes[sample.image_path][1],
                mask_sha256=hashes[sample.mask_path][0],
                mask_size=hashes[sample.mask_path][1],
                width=checked.width,
                height=checked.height,
                original_width=checked.original_width,
                original_height=checked.original_height,
                mask_png=mask_png_bytes(checked.object_mask),
                ignore_png=mask_png_bytes(ignore) if ignore.any() else None,
                area=int(checked.object_mask.sum()),
                ignore_area=int(ignore.sum()),
                bbox=(int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max())),
                description=descriptions.get((sample.key.image_stem, sample.key.object_stem), ""),
            )
        )
    if progress:
        progress(len(samples), len(samples), "checked")
    return prepared


def _fingerprint(prepared: list[_Prepared]) -> set[tuple[str, str, str, str]]:
    return {
        (p.sample.key.image_stem, p.sample.key.object_stem, p.image_sha256, p.mask_sha256) for p in prepared
    }


def _existing_fingerprint(dataset: Dataset) -> set[tuple[str, str, str, str]]:
    rows = Instance.objects.filter(image__dataset=dataset).values_list(
        "image__stem", "object_stem", "image__sha256", "source_mask_sha256"
    )
    return set(rows)


def dataset_import(
    *,
    path: str | Path,
    layout: str,
    name: str | None = None,
    progress: Progress | None = None,
    source: str | None = None,
) -> ImportResult:
    """Import the dataset folder ``path`` read with ``layout``; atomic and idempotent.

    Every image and mask is decoded and checked before anything is written; the rows are created in one
    transaction and files written during a failed import are removed again. Importing the same folder
    again changes nothing; importing different content under an existing name is refused. ``source``: what
    ``Dataset.source_path`` records (default: the folder; an uploaded archive's name when it came from one).
    """
    root = Path(path).resolve()
    try:
        opened = open_dataset(root, layout, name=name)
    except DatasetError as exc:
        raise ImportFailed(str(exc)) from None
    descriptions = _read_descriptions(root)
    prepared = _prepare(opened.samples, descriptions, progress)

    existing = Dataset.objects.filter(name=opened.name).first()
    if existing is not None:
        theirs, ours = _existing_fingerprint(existing), _fingerprint(prepared)
        if theirs == ours and existing.layout == layout:
            return ImportResult(
                dataset=existing,
                created=False,
                images=existing.images.count(),
                instances=len(ours),
                ignore_bands=sum(1 for p in prepared if p.ignore_png),
                unchanged=True,
                messages=[
                    f"dataset {existing.name!r} is already imported with identical files; nothing changed."
                ],
            )
        differing = sorted((ours ^ theirs), key=lambda row: (row[0], row[1]))
        stem = differing[0][0] if differing else "?"
        raise ImportFailed(
            f"{root}: a dataset named {opened.name!r} already exists with different content (first difference: "
            f"image stem {stem!r}, layout {existing.layout!r}); import it under a new name with --name."
        )
    if progress:
        progress(len(prepared), len(prepared), "writing")
    return _write(opened.name, layout, source or str(root), prepared)


def _write(name: str, layout: str, source: str, prepared: list[_Prepared]) -> ImportResult:
    media_root = Path(settings.MEDIA_ROOT)
    written: dict[str, Path] = {}

    def put(relative: Path, data: bytes | None = None, source: Path | None = None) -> str:
        """Write one file (overwriting leftovers of a crashed run); remembered for cleanup on failure."""
        key = relative.as_posix()
        if key not in written:
            target = media_root / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            if source is not None:
                shutil.copyfile(source, target)
            else:
                target.write_bytes(data or b"")
            written[key] = target
        return key

    try:
        with transaction.atomic():
            dataset = Dataset.objects.create(name=name, layout=layout, source_path=source[:1000])
            base = Path("datasets") / f"{dataset.pk}-{slugify(name) or 'dataset'}"
            images: dict[str, Image] = {}
            for item in prepared:
                sample = item.sample
                stem = sample.key.image_stem
                if stem not in images:
                    image_rel = put(base / "images" / sample.image_path.name, source=sample.image_path)
                    images[stem] = Image.objects.create(
                        dataset=dataset,
                        stem=stem,
                        file=image_rel,
                        file_size=item.image_size,
                        sha256=item.image_sha256,
                        width=item.width,
                        height=item.height,
                        original_width=item.original_width,
                        original_height=item.original_height,
                    )
                object_suffix = f"_______{sample.key.object_stem}" if sample.key.object_stem else ""
                source_rel = put(base / "source_masks" / sample.mask_path.name, source=sample.mask_path)
                mask_rel = put(base / "masks" / f"{stem}{object_suffix}.png", data=item.mask_png)
                ignore_rel = (
                    put(base / "ignore" / f"{stem}{object_suffix}.png", data=item.ignore_png)
                    if item.ignore_png
                    else ""
                )
                Instance.objects.create(
                    image=images[stem],
                    object_stem=sample.key.object_stem,
                    object_id=sample.object_id,
                    mask_file=mask_rel,
                    mask_sha256=hashlib.sha256(item.mask_png).hexdigest(),
                    source_mask_file=source_rel,
                    source_mask_size=item.mask_size,
                    source_mask_sha256=item.mask_sha256,
                    ignore_file=ignore_rel,
                    ignore_area=item.ignore_area,
                    area=item.area,
                    bbox_x0=item.bbox[0],
                    bbox_y0=item.bbox[1],
                    bbox_x1=item.bbox[2],
                    bbox_y1=item.bbox[3],
                    text_description=item.description,
                )
    except BaseException:
        for path in written.values():
            path.unlink(missing_ok=True)
        raise
    logger.info("dataset imported", extra={"dataset_id": dataset.pk, "instances": len(prepared)})
    return ImportResult(
        dataset=dataset,
        created=True,
        images=len(images),
        instances=len(prepared),
        ignore_bands=sum(1 for p in prepared if p.ignore_png),
    )
