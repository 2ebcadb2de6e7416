"""Exports as single downloadable files: the RClicks folder as a zip, the full export as one file.

Both are written to an anonymous temporary file (removed by the OS when closed) and handed back open at
offset 0, so a view can stream it with ``FileResponse`` and memory stays flat whatever the export size.
"""

from __future__ import annotations

import shutil
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, TypeVar

from exports.full import FullExport, full_export
from exports.rclicks import RClicksExport, rclicks_export

#: PNG is already compressed; deflating it again costs time and gains nothing.
_STORED_SUFFIXES = {".png"}

T = TypeVar("T")


def _folder_zip(folder: str, handle: IO[bytes]) -> None:
    """Every file under ``folder`` into a zip written to ``handle``, by its path relative to ``folder``."""
    with zipfile.ZipFile(handle, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(Path(folder).rglob("*")):
            if path.is_file():
                kind = zipfile.ZIP_STORED if path.suffix.lower() in _STORED_SUFFIXES else None
                archive.write(path, path.relative_to(folder).as_posix(), compress_type=kind)


def _temp_file_written(
    *, suffix: str, prefix: str, write: Callable[[str, IO[bytes]], T]
) -> tuple[IO[bytes], T]:
    """An anonymous temp file (``suffix``) filled by ``write(folder, handle)``, where ``folder`` is a scratch
    directory (``prefix``) removed afterwards; handed back open at offset 0 with what ``write`` returned. When
    ``write`` raises, the file is closed (and so gone) before the error goes on."""
    handle = tempfile.TemporaryFile(suffix=suffix)
    try:
        with tempfile.TemporaryDirectory(prefix=prefix) as folder:
            result = write(folder, handle)
    except BaseException:
        handle.close()
        raise
    handle.seek(0)
    return handle, result


def _folder_export_zip(*, prefix: str, export: Callable[[str], T]) -> tuple[IO[bytes], T]:
    """What ``export(folder)`` writes into a scratch folder, zipped in an open temp file, with its result."""

    def write(folder: str, handle: IO[bytes]) -> T:
        result = export(folder)
        _folder_zip(folder, handle)
        return result

    return _temp_file_written(suffix=".zip", prefix=prefix, write=write)


def rclicks_zip_write(
    *, study_ids: list[int], include_invalid: bool = False, previews: bool | None = None
) -> tuple[IO[bytes], RClicksExport]:
    """The RClicks export of ``study_ids`` zipped (``clicks.csv``, masks, ...) in an open temp file."""
    return _folder_export_zip(
        prefix="clicklab-rclicks-",
        export=lambda folder: rclicks_export(
            study_ids=study_ids, out_dir=folder, include_invalid=include_invalid, previews=previews
        ),
    )


def full_file_write(*, study_ids: list[int], format: str) -> tuple[IO[bytes], FullExport]:
    """The full-fidelity export of ``study_ids`` in ``format`` ("parquet"/"jsonl") in an open temp file."""

    def write(folder: str, handle: IO[bytes]) -> FullExport:
        result = full_export(study_ids=study_ids, out_path=Path(folder) / f"full.{format}", format=format)
        with open(result.path, "rb") as source:
            shutil.copyfileobj(source, handle, 1 << 20)
        return result

    return _temp_file_written(suffix=f".{format}", prefix="clicklab-full-", write=write)


def corrective_zip_write(*, study_id: int, top_percent: float | None = None) -> tuple[IO[bytes], object]:
    """A corrective campaign's outputs (``exports.corrective``; with ``top_percent`` only the best N % by Mr)
    zipped in an open temp file."""
    from exports.corrective import corrective_export

    return _folder_export_zip(
        prefix="clicklab-corrective-",
        export=lambda folder: corrective_export(study_id=study_id, out_dir=folder, top_percent=top_percent),
    )
