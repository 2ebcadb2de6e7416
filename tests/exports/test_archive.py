"""exports.archive: each export as one open temp file at offset 0; a failed export leaves no file or folder."""

from __future__ import annotations

import json
import tempfile
import zipfile

import pytest

from exports.archive import full_file_write, rclicks_zip_write
from exports.selectors import ExportError


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """The temp files and folders the archive writes go here, so a test sees what is left behind."""
    folder = tmp_path / "scratch"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.mark.django_db
def test_the_rclicks_zip_holds_the_export_folder_and_is_read_from_the_start(small_study, scratch):
    handle, result = rclicks_zip_write(study_ids=[small_study.study.pk])
    with handle:
        assert handle.tell() == 0
        with zipfile.ZipFile(handle) as archive:
            names = set(archive.namelist())
            manifest = json.loads(archive.read("manifest.json"))
    assert {"clicks.csv", "manifest.json"} <= names and result.rows > 0
    assert manifest["studies"][0]["rows"] == result.rows
    masks = [name for name in names if name.endswith(".png")]
    assert len(masks) == result.masks
    assert list(scratch.iterdir()) == [], "the scratch folder is removed once zipped"


@pytest.mark.django_db
def test_the_full_file_is_the_export_itself(small_study, scratch, tmp_path):
    handle, result = full_file_write(study_ids=[small_study.study.pk], format="jsonl")
    with handle:
        assert handle.tell() == 0
        lines = handle.read().decode().splitlines()
    assert len(lines) == result.rows > 0 and json.loads(lines[0])["study_id"] == small_study.study.pk
    assert list(scratch.iterdir()) == []


@pytest.mark.django_db
def test_a_failed_export_raises_and_leaves_nothing_behind(scratch):
    with pytest.raises(ExportError):
        rclicks_zip_write(study_ids=[987654])
    with pytest.raises(ExportError):
        full_file_write(study_ids=[987654], format="jsonl")
    assert list(scratch.iterdir()) == []
