"""benchmark.archives: what an uploaded dataset or export archive may not do, and what it extracts to."""

from __future__ import annotations

import io
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from benchmark.archives import ArchiveError, ArchiveLimits, archive_root, extract_archive

LIMITS = ArchiveLimits(max_uncompressed_bytes=10_000, max_members=50)


def _zip(path: Path, members: dict[str, bytes], *, links: dict[str, str] | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
        for name, target in (links or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, target)
    return path


def _tar(path: Path, members: list[tarfile.TarInfo], data: dict[str, bytes] | None = None) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for info in members:
            payload = (data or {}).get(info.name)
            archive.addfile(info, io.BytesIO(payload) if payload is not None else None)
    return path


def _file(name: str, data: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info


def test_a_zip_of_a_dataset_folder_extracts_and_its_root_is_the_folder(tmp_path):
    archive = _zip(tmp_path / "GrabCut.zip", {"GrabCut/data_GT/a.jpg": b"x", "GrabCut/boundary_GT/a.bmp": b"y",
                                              "__MACOSX/GrabCut/._a.jpg": b"junk", "GrabCut/.DS_Store": b"junk"})  # fmt: skip
    out = extract_archive(archive, tmp_path / "out", limits=LIMITS)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "GrabCut/boundary_GT/a.bmp",
        "GrabCut/data_GT/a.jpg",
    ]
    assert archive_root(out) == out / "GrabCut"


def test_a_tar_gz_extracts_too_and_a_flat_archive_is_its_own_root(tmp_path):
    archive = _tar(tmp_path / "d.tgz", [_file("images/a.png", b"1"), _file("masks/a.png", b"22")],
                   {"images/a.png": b"1", "masks/a.png": b"22"})  # fmt: skip
    out = extract_archive(archive, tmp_path / "out", limits=LIMITS)
    assert (out / "masks" / "a.png").read_bytes() == b"22"
    assert archive_root(out) == out


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("../escape.txt", "climbs out of the archive with '..'"),
        ("data/../../escape.txt", "climbs out of the archive with '..'"),
        ("/etc/escape.txt", "has an absolute path"),
        ("C:\\escape.txt", "has an absolute path"),
        ("..\\escape.txt", "climbs out of the archive with '..'"),
    ],
)
def test_unsafe_member_names_are_refused_and_nothing_is_left(tmp_path, name, says):
    archive = _zip(tmp_path / "bad.zip", {"ok/a.txt": b"fine", name: b"evil"})
    with pytest.raises(ArchiveError, match=rf"bad.zip: member .* {says}"):
        extract_archive(archive, tmp_path / "out", limits=LIMITS)
    assert not (tmp_path / "out").exists() and not (tmp_path / "escape.txt").exists()
    tar = _tar(
        tmp_path / "bad.tar.gz", [_file(name.replace("\\", "/"), b"evil")], {name.replace("\\", "/"): b"evil"}
    )
    with pytest.raises(ArchiveError, match="bad.tar.gz: member"):
        extract_archive(tar, tmp_path / "out", limits=LIMITS)
    assert not (tmp_path / "out").exists()


def test_links_are_refused_in_zips_and_tars(tmp_path):
    archive = _zip(tmp_path / "link.zip", {"a.txt": b"x"}, links={"images/passwd.png": "/etc/passwd"})
    with pytest.raises(ArchiveError, match=r"member 'images/passwd.png' is a symbolic link"):
        extract_archive(archive, tmp_path / "out", limits=LIMITS)
    symlink = tarfile.TarInfo("images/passwd.png")
    symlink.type, symlink.linkname = tarfile.SYMTYPE, "/etc/passwd"
    with pytest.raises(ArchiveError, match="is a symbolic link"):
        extract_archive(_tar(tmp_path / "s.tgz", [symlink]), tmp_path / "out", limits=LIMITS)
    hard = tarfile.TarInfo("images/b.png")
    hard.type, hard.linkname = tarfile.LNKTYPE, "images/a.png"
    with pytest.raises(ArchiveError, match="is a hard link"):
        extract_archive(_tar(tmp_path / "h.tgz", [_file("images/a.png", b"1"), hard], {"images/a.png": b"1"}),
                        tmp_path / "out", limits=LIMITS)  # fmt: skip
    device = tarfile.TarInfo("dev/zero")
    device.type = tarfile.CHRTYPE
    with pytest.raises(ArchiveError, match="not a regular file or folder"):
        extract_archive(_tar(tmp_path / "d.tgz", [device]), tmp_path / "out", limits=LIMITS)
    assert not (tmp_path / "out").exists()


def test_an_archive_over_the_uncompressed_limit_is_refused_before_it_fills_the_disk(tmp_path):
    big = b"\0" * 6_000  # compresses to almost nothing: the limit is on what it would become
    archive = tmp_path / "bomb.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as handle:
        handle.writestr("a.bin", big)
        handle.writestr("b.bin", big)
    assert archive.stat().st_size < 1_000
    with pytest.raises(
        ArchiveError, match=r"bomb.zip: its directory says 12,000 bytes, more than the limit of 10,000"
    ):
        extract_archive(archive, tmp_path / "out", limits=LIMITS)
    tar = _tar(
        tmp_path / "bomb.tgz", [_file("a.bin", big), _file("b.bin", big)], {"a.bin": big, "b.bin": big}
    )
    with pytest.raises(ArchiveError, match="more than the limit of 10,000 bytes uncompressed"):
        extract_archive(tar, tmp_path / "out", limits=LIMITS)
    assert not (tmp_path / "out").exists()
    many = _zip(tmp_path / "many.zip", {f"f{i}.txt": b"" for i in range(51)})
    with pytest.raises(ArchiveError, match="51 members, more than the limit of 50"):
        extract_archive(many, tmp_path / "out", limits=LIMITS)


def test_a_zip_member_whose_header_lies_about_its_size_is_refused(tmp_path):
    archive = _zip(tmp_path / "liar.zip", {"a.bin": b"\0" * 5_000})
    data = bytearray(archive.read_bytes())
    # shrink the declared size in the local header and the central directory to 100 bytes
    declared = (5_000).to_bytes(4, "little")
    data = data.replace(declared, (100).to_bytes(4, "little"))
    archive.write_bytes(bytes(data))
    # zipfile reads only the declared bytes, so the data fails its CRC (the copy also counts against the header)
    with pytest.raises(
        ArchiveError, match=r"liar.zip: the archive is damaged or truncated \(BadZipFile: Bad CRC"
    ):
        extract_archive(archive, tmp_path / "out", limits=LIMITS)
    assert not (tmp_path / "out").exists()


def test_not_an_archive_or_a_truncated_one_says_so(tmp_path):
    text = tmp_path / "dataset.zip"
    text.write_text("not an archive")
    with pytest.raises(ArchiveError, match=r"dataset.zip: not a zip or tar archive"):
        extract_archive(text, tmp_path / "out", limits=LIMITS)
    whole = _tar(tmp_path / "t.tgz", [_file("a.bin", b"x" * 5000)], {"a.bin": b"x" * 5000}).read_bytes()
    (tmp_path / "cut.tgz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(
        ArchiveError, match=r"cut.tgz: (the archive is damaged or truncated|not a zip or tar)"
    ):
        extract_archive(tmp_path / "cut.tgz", tmp_path / "out", limits=LIMITS)
    assert not (tmp_path / "out").exists()
