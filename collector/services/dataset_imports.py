"""Dataset imports asked for in the browser: an uploaded zip/tar archive, or a folder under the import root.

:func:`dataset_import_request` (the researcher area's import page) checks what was asked, stores the upload
and writes a :class:`~collector.models.DatasetImport` row with the task intent in one transaction;
``tasks.datasets.import_dataset`` then calls :func:`dataset_import_run`, which extracts the archive safely
(``benchmark.archives``: no absolute paths, no ``..``, no links, at most ``settings.DATASET_ARCHIVE_MAX_BYTES``
uncompressed), finds the dataset folder in it, detects the layout when none was chosen, and runs the same
atomic import as ``manage.py import_dataset`` (``collector.services.datasets.dataset_import``), recording its
progress on the row as it goes (the page polls it). Errors name the file at fault, inside the archive as
``<archive>/<path in the archive>``, and what to do; nothing is imported then. The upload and the extracted
files are removed once the import ends, whatever its outcome.

Folders: only a folder under ``settings.DATASET_IMPORT_ROOT`` (``CLICKLAB_IMPORT_ROOT``) may be chosen; the
path is resolved (symbolic links followed) before the check, so neither ``..`` nor a link leads out of it.
"""

from __future__ import annotations

import logging
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.utils import timezone

from benchmark.archives import ArchiveError, ArchiveLimits, archive_kind, archive_root, extract_archive
from benchmark.datasets import LAYOUTS, DatasetError, guess_layout
from collector.models import Dataset, DatasetImport
from collector.services.datasets import ImportFailed, dataset_import
from collector.services.outbox import task_intent_add
from tasks import names as task_names

logger = logging.getLogger(__name__)

#: Where uploads wait for their import and archives are extracted (under MEDIA_ROOT: the import writes
#: there too, so whoever runs the import can read them).
IMPORTS_DIR = "dataset_imports"
ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
#: The page's progress is written at most this often (one UPDATE each).
PROGRESS_EVERY_S = 0.5
#: How deep the page lists folders under the import root.
FOLDER_DEPTH = 2


class ImportRequestError(Exception):
    """What was asked cannot be imported; ``field`` names the form field at fault."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def size_text(size: int) -> str:
    """``2147483648`` -> ``"2 GiB"`` (the limits as the page states them)."""
    value = float(size)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "bytes" or value == int(value) else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover - the loop returns at GiB


@dataclass(frozen=True)
class ImportLimits:
    upload_max_bytes: int
    archive_max_bytes: int
    archive_max_members: int
    import_root: Path | None


def import_limits() -> ImportLimits:
    return ImportLimits(
        upload_max_bytes=settings.DATASET_UPLOAD_MAX_BYTES,
        archive_max_bytes=settings.DATASET_ARCHIVE_MAX_BYTES,
        archive_max_members=settings.DATASET_ARCHIVE_MAX_MEMBERS,
        import_root=settings.DATASET_IMPORT_ROOT,
    )


def import_root_folder(relative: str) -> Path:
    """The folder ``relative`` names under the import root, resolved; ImportRequestError when there is no
    import root, or the path is absolute, leads outside it, or is not a folder."""
    root = settings.DATASET_IMPORT_ROOT
    if root is None:
        raise ImportRequestError(
            "no import root is configured on this server: upload an archive instead, or ask the administrator "
            "to set CLICKLAB_IMPORT_ROOT to the folder holding dataset folders.",
            field="folder",
        )
    text = relative.strip().replace("\\", "/")
    if not text:
        raise ImportRequestError("choose a folder under the import root.", field="folder")
    if text.startswith("/"):
        raise ImportRequestError(
            f"{relative!r} is an absolute path: give the folder relative to the import root {root}.",
            field="folder",
        )
    root = Path(root).resolve()
    folder = (root / text).resolve()
    if folder != root and root not in folder.parents:
        raise ImportRequestError(
            f"{relative!r} leads outside the import root {root}; only folders under it can be imported.",
            field="folder",
        )
    if not folder.is_dir():
        raise ImportRequestError(
            f"{relative!r} is not a folder under the import root {root}.", field="folder"
        )
    return folder


def import_root_folders(*, depth: int = FOLDER_DEPTH) -> list[str]:
    """Folders under the import root, relative to it, to choose from (hidden ones and links out left out)."""
    root = settings.DATASET_IMPORT_ROOT
    if root is None:
        return []
    root = Path(root).resolve()
    found: list[str] = []

    def walk(folder: Path, level: int) -> None:
        try:
            children = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
        except OSError:
            return
        for child in children:
            resolved = child.resolve()
            if root not in resolved.parents:
                continue
            found.append(child.relative_to(root).as_posix())
            if level < depth:
                walk(child, level + 1)

    walk(root, 1)
    return found


def _check_layout_and_name(layout: str, name: str) -> None:
    if layout and layout not in LAYOUTS:
        raise ImportRequestError(
            f"unknown layout {layout!r}; choose one of {', '.join(LAYOUTS)}.", field="layout"
        )
    max_length = Dataset._meta.get_field("name").max_length
    if name and len(name) > max_length:
        raise ImportRequestError(
            f"the name is {len(name)} characters long; at most {max_length}.", field="name"
        )


def _check_upload(upload: UploadedFile) -> None:
    limit = settings.DATASET_UPLOAD_MAX_BYTES
    if upload.size is not None and upload.size > limit:
        raise ImportRequestError(
            f"{upload.name}: {upload.size:,} bytes, more than the upload limit of {size_text(limit)}; split the "
            "dataset into smaller archives, or put its folder under the import root.",
            field="archive",
        )
    if not str(upload.name).lower().endswith(ARCHIVE_SUFFIXES):
        raise ImportRequestError(
            f"{upload.name}: not an archive name ({', '.join(ARCHIVE_SUFFIXES)}); pack the dataset folder into a "
            "zip or tar file.",
            field="archive",
        )


def dataset_import_request(
    *,
    user,
    archive: UploadedFile | None = None,
    folder: str = "",
    layout: str = "",
    name: str = "",
) -> DatasetImport:
    """Record an import of ``archive`` (an upload) or of ``folder`` (relative to the import root) and send it
    to a worker (through the outbox, after commit).

    Raises:
      ImportRequestError: neither or both given, an upload over the limit or not named like an archive, a
        folder outside the import root, an unknown layout; ``field`` names the form field.
    """
    layout, name, folder = layout.strip(), name.strip(), folder.strip()
    _check_layout_and_name(layout, name)
    if (archive is None) == (not folder):
        raise ImportRequestError(
            "upload an archive or choose a folder under the import root (one of the two)."
        )
    job = DatasetImport(layout=layout, name=name, created_by=user if getattr(user, "pk", None) else None)
    if archive is not None:
        _check_upload(archive)
        job.source = DatasetImport.Source.ARCHIVE
        job.archive_name = Path(str(archive.name)).name[:255]
        job.archive_size = archive.size or 0
    else:
        import_root_folder(folder)  # refuses what is not a folder under the root
        job.source = DatasetImport.Source.FOLDER
        job.folder = folder
    with transaction.atomic():
        job.save()
        if archive is not None:
            job.archive.save(f"{IMPORTS_DIR}/{job.pk}/{uuid.uuid4().hex[:8]}-upload", archive, save=False)
            job.save(update_fields=["archive"])
        task_intent_add(name=task_names.DATASETS_IMPORT_DATASET, args=[job.pk])
    logger.info("dataset import requested", extra={"dataset_import_id": job.pk, "source": job.source})
    return job


# --------------------------------------------------------------------------------------------------
# Running an import (the worker)


class _Progress:
    """Writes (stage, done, total) on the row, at most every PROGRESS_EVERY_S (and always the last call)."""

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id
        self.at = 0.0

    def __call__(self, done: int, total: int, stage: str, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.at < PROGRESS_EVERY_S and done < total:
            return
        self.at = now
        DatasetImport.objects.filter(pk=self.job_id).update(
            stage=stage[:200], done=max(0, done), total=max(0, total)
        )


def detect_layout(root: Path) -> str:
    """The layout of ``root`` (``benchmark.datasets.guess_layout``); a folder with ``images/`` and ``masks/`` and
    no dataset name in it is read as the generic ``folder`` layout."""
    try:
        return guess_layout(root)
    except DatasetError:
        if (root / "images").is_dir() and (root / "masks").is_dir():
            return "folder"
        raise DatasetError(
            f"{root}: cannot tell the dataset layout (no data_GT/, img/+gt/ or images/+masks/ folder); choose the "
            f"layout ({', '.join(LAYOUTS)}) and check that the archive holds the dataset folder."
        ) from None


def _claim(import_id: int) -> DatasetImport | None:
    """The row, marked running, or None when it is gone or finished (a redelivered message)."""
    claimed = DatasetImport.objects.filter(
        pk=import_id, state__in=[DatasetImport.State.PENDING, DatasetImport.State.RUNNING]
    ).update(state=DatasetImport.State.RUNNING, started_at=timezone.now(), stage="starting", error="")
    return DatasetImport.objects.get(pk=import_id) if claimed else None


def _source_folder(job: DatasetImport, work: Path, progress: _Progress) -> tuple[Path, str]:
    """(the dataset folder to import, the prefix its paths have in messages)."""
    if job.source == DatasetImport.Source.FOLDER:
        try:
            return import_root_folder(job.folder), ""
        except ImportRequestError as error:
            raise ImportFailed(str(error)) from None
    archive_path = Path(job.archive.path)
    if archive_kind(archive_path) is None:
        raise ArchiveError(
            f"{job.archive_name}: not a zip or tar archive (.zip, .tar, .tar.gz, .tgz, .tar.bz2, .tar.xz); pack "
            "the dataset folder into one of those."
        )
    limits = ArchiveLimits(
        max_uncompressed_bytes=settings.DATASET_ARCHIVE_MAX_BYTES,
        max_members=settings.DATASET_ARCHIVE_MAX_MEMBERS,
    )
    progress(0, 0, "extracting", force=True)
    extracted = extract_archive(
        archive_path,
        work / "extracted",
        limits=limits,
        progress=lambda written, total: progress(written, total, "extracting (bytes)"),
    )
    return archive_root(extracted), str(extracted)


def _in_words(message: str, *, job: DatasetImport, extracted: str) -> str:
    """Paths inside the extraction folder as ``<archive>/<path in the archive>``, and the archive's own name
    where a message names the upload's stored file."""
    if job.source != DatasetImport.Source.ARCHIVE:
        return message
    for prefix in {str(Path(extracted).resolve()), extracted} - {""}:
        message = message.replace(prefix, job.archive_name)
    stored = Path(job.archive.name).name if job.archive else ""
    return message.replace(stored, job.archive_name) if stored else message


def dataset_import_run(*, import_id: int) -> DatasetImport | None:
    """Run the import ``import_id`` (module docstring); idempotent (a finished one is returned as it is)."""
    job = _claim(import_id)
    if job is None:
        return DatasetImport.objects.filter(pk=import_id).first()
    progress = _Progress(job.pk)
    work = Path(settings.MEDIA_ROOT) / IMPORTS_DIR / str(job.pk) / f"run-{uuid.uuid4().hex[:8]}"
    extracted = ""
    try:
        root, extracted = _source_folder(job, work, progress)
        layout = job.layout or detect_layout(root)
        DatasetImport.objects.filter(pk=job.pk).update(detected_layout=layout)
        result = dataset_import(
            path=root,
            layout=layout,
            name=job.name or None,
            progress=lambda done, total, what: progress(done, total, what),
            source=f"upload: {job.archive_name}" if job.source == DatasetImport.Source.ARCHIVE else None,
        )
    except (ImportFailed, ArchiveError, DatasetError) as error:
        message = _in_words(str(error), job=job, extracted=extracted)
        _finish(job, work, state=DatasetImport.State.FAILED, error=message)
        logger.info("dataset import failed", extra={"dataset_import_id": job.pk, "reason": message})
    except Exception as error:  # a bug or the disk: recorded for the page, then the task's own error
        _finish(
            job,
            work,
            state=DatasetImport.State.FAILED,
            error=f"the import stopped: {type(error).__name__}: {error}",
        )
        raise
    else:
        _finish(
            job,
            work,
            state=DatasetImport.State.DONE,
            dataset=result.dataset,
            images=result.images,
            instances=result.instances,
            ignore_bands=result.ignore_bands,
            unchanged=result.unchanged,
            messages=result.messages,
        )
    # A worker stopped mid-import (no exception reached here) leaves the row running and the upload in place:
    # the message is delivered again (acks_late) and the import runs again from the start.
    return DatasetImport.objects.get(pk=job.pk)


def _finish(job: DatasetImport, work: Path, **fields) -> None:
    _clean_up(job, work)
    DatasetImport.objects.filter(pk=job.pk).update(finished_at=timezone.now(), stage="", **fields)


def _clean_up(job: DatasetImport, work: Path) -> None:
    """The extracted files and the upload go once the import ended (imported files live under datasets/)."""
    shutil.rmtree(work, ignore_errors=True)
    if job.archive:
        job.archive.delete(save=False)
        DatasetImport.objects.filter(pk=job.pk).update(archive="")
    shutil.rmtree(Path(settings.MEDIA_ROOT) / IMPORTS_DIR / str(job.pk), ignore_errors=True)
