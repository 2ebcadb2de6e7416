"""Reads about imported datasets: their content identity, as the benchmark computes it from a folder."""

from __future__ import annotations

from pathlib import PurePosixPath

from benchmark.datasets import ContentEntry, content_hash, layout_max_side
from collector.models import Dataset, Instance


def dataset_content_hash_stored(*, dataset: Dataset) -> str:
    """``benchmark.datasets.dataset_content_hash`` of the folder ``dataset`` was imported from, computed from
    what the import stored (file names and sha256 of every image and source mask, keys and object ids),
    without reading a file: the benchmark gets the same value from the original folder or any copy of it.
    """
    rows = Instance.objects.filter(image__dataset=dataset).values_list(
        "image__stem", "object_stem", "object_id", "image__file", "image__sha256", "source_mask_file",
        "source_mask_sha256",
    )  # fmt: skip
    entries = [
        ContentEntry(
            image_stem=image_stem,
            object_stem=object_stem,
            object_id=object_id,
            image_name=PurePosixPath(image_file).name,
            image_sha256=image_sha256,
            mask_name=PurePosixPath(mask_file).name,
            mask_sha256=mask_sha256,
        )
        for image_stem, object_stem, object_id, image_file, image_sha256, mask_file, mask_sha256 in rows
    ]
    return content_hash(entries, layout=dataset.layout, max_side=layout_max_side(dataset.layout))
