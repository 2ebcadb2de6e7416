"""Extracting a zip or tar archive of a dataset or an export, refusing what could escape or flood the disk.

No Django here: the web app's dataset import from an uploaded archive (``collector.services.dataset_imports``)
and ``python -m benchmark run --export export.zip`` both extract with :func:`extract_archive`.

Refused (:class:`ArchiveError`, naming the member and what to do), before anything of that member is written:

* a member name that is absolute (``/etc/x``, ``C:\\x``) or climbs out with ``..``;
* a symbolic or hard link, a device, a FIFO: only regular files and folders are extracted;
* more than ``limits.max_members`` members;
* more than ``limits.max_uncompressed_bytes`` in total once uncompressed. A zip's sizes are read from its
  directory first, and every member's bytes are counted again while they are written (a member holding more
  than its header says is refused too); a tar's are counted as it is read.

A refused or broken archive leaves nothing behind: the destination folder is removed again. macOS' resource
fork folder ``__MACOSX/`` is skipped.
"""

from __future__ import annotations

import lzma
import shutil
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

#: ``progress(bytes written, total bytes or 0 when not known yet)``.
Progress = Callable[[int, int], None]

_SKIPPED_TOP = frozenset({"__MACOSX"})
_JUNK_NAMES = frozenset({".DS_Store", "Thumbs.db", "desktop.ini"})
_BLOCK = 1 << 20
#: gzip, bzip2 and xz streams start with these bytes
_COMPRESSED_MAGIC = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ")


class ArchiveError(ValueError):
    """An archive cannot be extracted safely or at all; the message names the member or file and what to do."""


@dataclass(frozen=True)
class ArchiveLimits:
    max_uncompressed_bytes: int
    max_members: int = 200_000


def archive_kind(path: Path) -> str | None:
    """``"zip"``, ``"tar"`` (plain, gzip, bzip2 or xz) or None, from the file's content (not its name)."""
    if zipfile.is_zipfile(path):
        return "zip"
    try:
        return "tar" if tarfile.is_tarfile(path) else None
    except (OSError, EOFError, tarfile.TarError, zlib.error, lzma.LZMAError):
        # a compressed stream that breaks off: a damaged tar (extracting it says so), unless it is none of them
        with open(path, "rb") as handle:
            head = handle.read(6)
        return "tar" if head.startswith(_COMPRESSED_MAGIC) else None


def member_path(name: str, *, archive: str) -> PurePosixPath | None:
    """The safe relative path of a member name, None for entries to skip; ArchiveError for unsafe names."""
    cleaned = name.replace("\\", "/")
    parts = [part for part in cleaned.split("/") if part not in ("", ".")]
    if cleaned.startswith("/") or (parts and len(parts[0]) == 2 and parts[0][1] == ":"):
        raise ArchiveError(
            f"{archive}: member {name!r} has an absolute path; make the archive with relative paths "
            "(e.g. `zip -r dataset.zip DatasetFolder` from the folder's parent)."
        )
    if ".." in parts:
        raise ArchiveError(
            f"{archive}: member {name!r} climbs out of the archive with '..'; make the archive again from the "
            "dataset folder's parent, without '..' in any path."
        )
    if not parts or parts[0] in _SKIPPED_TOP or parts[-1] in _JUNK_NAMES:
        return None
    return PurePosixPath(*parts)


def _too_big(archive: str, limits: ArchiveLimits, what: str) -> ArchiveError:
    return ArchiveError(
        f"{archive}: {what} more than the limit of {limits.max_uncompressed_bytes:,} bytes uncompressed; "
        "split the dataset into smaller archives, or import its folder from the import root."
    )


class _Budget:
    """Counts the bytes written against the limit, and reports progress."""

    def __init__(self, archive: str, limits: ArchiveLimits, progress: Progress | None, total: int) -> None:
        self.archive, self.limits, self.progress, self.total = archive, limits, progress, total
        self.written = 0

    def copy(self, source: IO[bytes], target: Path, *, name: str, declared: int | None) -> None:
        size = 0
        with open(target, "wb") as out:
            while block := source.read(_BLOCK):
                size += len(block)
                self.written += len(block)
                if declared is not None and size > declared:
                    raise ArchiveError(
                        f"{self.archive}: member {name!r} holds more bytes than its header says ({declared:,}); "
                        "the archive is damaged or crafted. Make it again."
                    )
                if self.written > self.limits.max_uncompressed_bytes:
                    raise _too_big(self.archive, self.limits, "its files hold")
                out.write(block)
                if self.progress is not None:
                    self.progress(self.written, self.total)


def _extract_zip(path: Path, dest: Path, limits: ArchiveLimits, progress: Progress | None) -> None:
    archive = path.name
    with zipfile.ZipFile(path) as handle:
        members = handle.infolist()
        if len(members) > limits.max_members:
            raise ArchiveError(
                f"{archive}: {len(members):,} members, more than the limit of {limits.max_members:,}; split it."
            )
        total = sum(info.file_size for info in members)
        if total > limits.max_uncompressed_bytes:
            raise _too_big(archive, limits, f"its directory says {total:,} bytes,")
        plan = []
        for info in members:
            relative = member_path(info.filename, archive=archive)
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                raise ArchiveError(
                    f"{archive}: member {info.filename!r} is a symbolic link; links are not extracted. Put the "
                    "file itself in the archive (zip without --symlinks)."
                )
            if relative is not None:
                plan.append((info, relative))
        budget = _Budget(archive, limits, progress, total)
        for info, relative in plan:
            target = dest.joinpath(*relative.parts)
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with handle.open(info) as source:
                budget.copy(source, target, name=info.filename, declared=info.file_size)


def _extract_tar(path: Path, dest: Path, limits: ArchiveLimits, progress: Progress | None) -> None:
    archive = path.name
    count = 0
    budget = _Budget(archive, limits, progress, 0)
    with tarfile.open(path, mode="r:*") as handle:
        for member in handle:  # streamed: each member is checked before its bytes are read
            count += 1
            if count > limits.max_members:
                raise ArchiveError(
                    f"{archive}: more than the limit of {limits.max_members:,} members; split it."
                )
            relative = member_path(member.name, archive=archive)
            if member.issym() or member.islnk():
                raise ArchiveError(
                    f"{archive}: member {member.name!r} is a {'symbolic' if member.issym() else 'hard'} link; links "
                    "are not extracted. Put the file itself in the archive (tar without links, e.g. tar -h)."
                )
            if not (member.isfile() or member.isdir()):
                raise ArchiveError(
                    f"{archive}: member {member.name!r} is not a regular file or folder (a device or FIFO); "
                    "remove it from the archive."
                )
            if budget.written + member.size > limits.max_uncompressed_bytes:
                raise _too_big(archive, limits, "its files hold")
            if relative is None:
                continue
            target = dest.joinpath(*relative.parts)
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            source = handle.extractfile(member)
            if source is None:  # pragma: no cover - regular files always have a stream
                continue
            with source:
                budget.copy(source, target, name=member.name, declared=member.size)


def extract_archive(
    path: str | Path, dest: str | Path, *, limits: ArchiveLimits, progress: Progress | None = None
) -> Path:
    """Extract the zip or tar ``path`` into the new folder ``dest`` (see the module docstring); returns ``dest``.

    Raises:
      ArchiveError: not an archive, damaged, or refused; ``dest`` is then removed again.
    """
    path, dest = Path(path), Path(dest)
    kind = archive_kind(path)
    if kind is None:
        raise ArchiveError(
            f"{path.name}: not a zip or tar archive (.zip, .tar, .tar.gz, .tgz, .tar.bz2, .tar.xz); pack the "
            "dataset folder into one of those."
        )
    dest.mkdir(parents=True, exist_ok=False)
    try:
        if kind == "zip":
            _extract_zip(path, dest, limits, progress)
        else:
            _extract_tar(path, dest, limits, progress)
    except ArchiveError:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, OSError) as error:
        shutil.rmtree(dest, ignore_errors=True)
        if isinstance(error, OSError) and error.errno is not None:
            raise  # the disk, not the archive (no space left, permissions)
        raise ArchiveError(
            f"{path.name}: the archive is damaged or truncated ({type(error).__name__}: {error}); upload or "
            "copy it again."
        ) from None
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return dest


def archive_root(folder: str | Path) -> Path:
    """The dataset folder inside an extracted archive: its only top-level folder when it holds nothing else
    (``GrabCut.zip`` -> ``GrabCut/``), else the extraction folder itself."""
    folder = Path(folder)
    entries = [p for p in folder.iterdir() if p.name not in _JUNK_NAMES and not p.name.startswith(".")]
    if len(entries) == 1 and entries[0].is_dir():
        return entries[0]
    return folder
