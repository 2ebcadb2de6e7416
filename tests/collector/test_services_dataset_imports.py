"""Dataset imports asked for in the browser: an uploaded archive or a folder under the import root, the same
atomic import and errors as manage.py import_dataset, progress on the row, the outbox, the clean-up."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from benchmark.datasets import dataset_content_hash, open_dataset
from collector.models import Dataset, DatasetImport, TaskIntent
from collector.selectors.datasets import dataset_content_hash_stored
from collector.services.dataset_imports import (
    IMPORTS_DIR,
    ImportRequestError,
    dataset_import_request,
    dataset_import_run,
    import_root_folders,
)
from tasks import names as task_names
from tests.factories import draw_dataset_folder, make_researcher

pytestmark = pytest.mark.django_db


@pytest.fixture
def media_root(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


def zip_folder(folder: Path, *, top: str | None = None) -> bytes:
    """A zip of ``folder`` as ``zip -r`` from its parent makes it (``top``/... inside)."""
    buffer = io.BytesIO()
    top = top or folder.name
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                archive.write(path, f"{top}/{path.relative_to(folder).as_posix()}")
    return buffer.getvalue()


def _upload(name: str, data: bytes) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, data, content_type="application/zip")


def test_an_uploaded_archive_is_imported_and_the_upload_removed(tmp_path, media_root):
    folder = draw_dataset_folder(tmp_path / "Orchard", n_images=3, objects_per_image=2)
    user = make_researcher("alice")
    job = dataset_import_request(user=user, archive=_upload("Orchard.zip", zip_folder(folder)))
    assert job.state == DatasetImport.State.PENDING and job.archive_name == "Orchard.zip"
    assert (media_root / job.archive.name).is_file()
    intent = TaskIntent.objects.get(task_name=task_names.DATASETS_IMPORT_DATASET)
    assert intent.args == [job.pk]  # sent through the outbox, in the request's transaction

    done = dataset_import_run(import_id=job.pk)

    assert done.state == DatasetImport.State.DONE, done.error
    assert (done.images, done.instances, done.detected_layout) == (3, 6, "folder")
    dataset = done.dataset
    assert (
        dataset.name == "Orchard" and dataset.source_path == "upload: Orchard.zip"
    )  # the archive's folder name
    # the same content identity as the folder the archive was made of
    assert dataset_content_hash_stored(dataset=dataset) == dataset_content_hash(
        open_dataset(folder, "folder")
    )
    assert not (media_root / IMPORTS_DIR).exists() or not any((media_root / IMPORTS_DIR).rglob("*"))
    assert done.archive.name == "" and done.finished_at is not None and done.stage == ""
    assert (
        dataset_import_run(import_id=job.pk).state == DatasetImport.State.DONE
    )  # a redelivery changes nothing
    assert Dataset.objects.count() == 1


def test_a_bad_file_in_the_archive_fails_the_import_naming_it_in_the_archive_and_imports_nothing(
    tmp_path, media_root
):
    folder = draw_dataset_folder(tmp_path / "Orchard", n_images=3)
    (folder / "images" / "img01.jpg").write_bytes(b"not a picture")
    job = dataset_import_request(
        user=None, archive=_upload("orchard.zip", zip_folder(folder)), name="Orchard"
    )
    done = dataset_import_run(import_id=job.pk)
    assert done.state == DatasetImport.State.FAILED and done.dataset is None
    assert done.error.startswith("orchard.zip/Orchard/images/img01.jpg: not a readable image; replace it")
    assert str(media_root) not in done.error  # no server path in the message
    assert not Dataset.objects.exists()
    assert not any(
        p.is_file() for p in media_root.rglob("*")
    )  # neither dataset files nor the upload are left


def test_an_unsafe_archive_is_refused_with_what_to_do(tmp_path, media_root):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("images/a.png", b"x")
        archive.writestr("../../outside.png", b"evil")
    job = dataset_import_request(user=None, archive=_upload("evil.zip", buffer.getvalue()))
    done = dataset_import_run(import_id=job.pk)
    assert done.state == DatasetImport.State.FAILED
    assert "evil.zip: member '../../outside.png' climbs out of the archive with '..'" in done.error
    assert not list(tmp_path.rglob("outside.png"))


def test_the_uncompressed_limit_is_applied(tmp_path, media_root, settings):
    settings.DATASET_ARCHIVE_MAX_BYTES = 1000
    folder = draw_dataset_folder(tmp_path / "Orchard", n_images=2)
    done = dataset_import_run(
        import_id=dataset_import_request(user=None, archive=_upload("o.zip", zip_folder(folder))).pk
    )
    assert (
        done.state == DatasetImport.State.FAILED
        and "more than the limit of 1,000 bytes uncompressed" in done.error
    )


def test_the_request_refuses_an_upload_over_the_limit_or_not_an_archive_and_writes_nothing(
    media_root, settings
):
    settings.DATASET_UPLOAD_MAX_BYTES = 10
    with pytest.raises(
        ImportRequestError, match=r"big.zip: 11 bytes, more than the upload limit of 10 bytes"
    ) as caught:
        dataset_import_request(user=None, archive=_upload("big.zip", b"x" * 11))
    assert caught.value.field == "archive"
    settings.DATASET_UPLOAD_MAX_BYTES = 1000
    with pytest.raises(ImportRequestError, match=r"notes.txt: not an archive name"):
        dataset_import_request(user=None, archive=_upload("notes.txt", b"x"))
    with pytest.raises(ImportRequestError, match="unknown layout 'voc'") as caught:
        dataset_import_request(user=None, archive=_upload("a.zip", b"x"), layout="voc")
    assert caught.value.field == "layout"
    with pytest.raises(ImportRequestError, match="one of the two"):
        dataset_import_request(user=None)
    assert not DatasetImport.objects.exists() and not TaskIntent.objects.exists()


def test_a_folder_under_the_import_root_is_imported(tmp_path, media_root, settings):
    root = tmp_path / "import-root"
    draw_dataset_folder(root / "lab" / "Orchard", n_images=2)
    (root / ".hidden").mkdir()
    settings.DATASET_IMPORT_ROOT = root
    assert import_root_folders() == ["lab", "lab/Orchard"]  # two levels down
    job = dataset_import_request(user=None, folder="lab/Orchard", layout="folder", name="Orchard v2")
    done = dataset_import_run(import_id=job.pk)
    assert done.state == DatasetImport.State.DONE, done.error
    assert done.dataset.name == "Orchard v2" and done.dataset.source_path == str(
        (root / "lab" / "Orchard").resolve()
    )
    assert (root / "lab" / "Orchard" / "images").is_dir()  # the researcher's folder is left as it was


def test_paths_outside_the_import_root_are_refused(tmp_path, media_root, settings):
    root = tmp_path / "import-root"
    (root / "lab").mkdir(parents=True)
    outside = draw_dataset_folder(tmp_path / "private", n_images=1)
    (root / "lab" / "link").symlink_to(outside, target_is_directory=True)
    settings.DATASET_IMPORT_ROOT = root
    assert import_root_folders() == ["lab"]  # the link out is not offered
    for folder, says in (
        ("../private", "leads outside the import root"),
        ("lab/link", "leads outside the import root"),
        (str(outside), "is an absolute path"),
        ("lab/missing", "is not a folder under the import root"),
    ):
        with pytest.raises(ImportRequestError, match=says) as caught:
            dataset_import_request(user=None, folder=folder)
        assert caught.value.field == "folder"
    settings.DATASET_IMPORT_ROOT = None
    with pytest.raises(ImportRequestError, match="no import root is configured"):
        dataset_import_request(user=None, folder="lab")
    assert not DatasetImport.objects.exists()


def test_progress_goes_on_the_row_at_most_twice_a_second_and_the_last_step_always(media_root):
    from collector.services.dataset_imports import PROGRESS_EVERY_S, _Progress

    assert PROGRESS_EVERY_S == 0.5
    job = DatasetImport.objects.create(source=DatasetImport.Source.FOLDER, folder="x")
    progress = _Progress(job.pk)
    progress(0, 10, "checking a.jpg")
    progress(1, 10, "checking b.jpg")  # within the half second: not written
    job.refresh_from_db()
    assert (job.stage, job.done, job.total) == ("checking a.jpg", 0, 10)
    progress(10, 10, "checked")  # the last step is always written
    job.refresh_from_db()
    assert (job.stage, job.done, job.total) == ("checked", 10, 10)
