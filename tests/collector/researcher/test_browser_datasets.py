"""The dataset import page in a real Chromium against the live server, with a real Celery worker doing the
imports: upload an archive, import a folder under the import root, an archive with a bad file (the page names
it inside the archive), the result page and its "New study" link. Screenshots:
var/screenshots/researcher-datasets-*.png."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.models import Dataset, DatasetImport
from tests.collector.test_services_dataset_imports import zip_folder
from tests.factories import draw_dataset_folder, make_researcher
from tests.support.researcher_login import researcher_log_in

pytestmark = [pytest.mark.browser, pytest.mark.celery, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = Path(__file__).resolve().parents[3] / "var" / "screenshots"


def _shot(page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"researcher-datasets-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000, f"{path} looks empty"
    return path


@pytest.fixture
def files(settings, tmp_path):
    """Media root and import root of this test (set before the worker fixture, which follows them)."""
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.DATASET_IMPORT_ROOT = tmp_path / "import-root"
    draw_dataset_folder(settings.DATASET_IMPORT_ROOT / "lab" / "Pears", n_images=2, seed=3)
    return tmp_path


@pytest.fixture
def page(files, chromium, live_server, celery_worker):
    celery_worker.follow_media_root()
    make_researcher("alice")
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    researcher_log_in(page, live_server.url, "alice")
    yield page
    context.close()


def _wait_finished(page) -> str:
    page.wait_for_selector("#import-result, #import-error", timeout=120_000)
    return page.inner_text("#import-status")


def test_import_an_archive_and_a_folder_and_see_a_bad_file_named(page, live_server, files):
    page.click("text=Datasets")
    page.wait_for_selector("#dataset-list")
    assert "No dataset yet" in page.inner_text("#dataset-list")
    page.click("#import-dataset")
    page.wait_for_selector("#archive-import")
    limits = page.inner_text("#archive-limits")
    assert "2 GiB" in limits and "8 GiB" in limits and "symbolic and hard links" in limits
    assert page.inner_text("#import-root") == str((files / "import-root").resolve())
    _shot(page, "import-page")

    # 1. an archive, uploaded: the worker imports it; the result page shows what was imported
    orchard = draw_dataset_folder(files / "Orchard", n_images=3, objects_per_image=2, seed=1)
    archive = files / "Orchard.zip"
    archive.write_bytes(zip_folder(orchard))
    page.set_input_files("#id_archive-archive", str(archive))
    page.fill("#id_archive-name", "Orchard v1")
    page.click("#archive-import button[type=submit]")
    page.wait_for_url("**/researcher/datasets/imports/*/")
    status = _wait_finished(page)
    assert "Imported." in status, status
    assert page.inner_text("#result-dataset") == "Orchard v1"
    assert (page.inner_text("#result-images"), page.inner_text("#result-instances")) == ("3", "6")
    assert "folder (detected)" in status and "Orchard.zip" in status
    _shot(page, "import-result")

    # 2. an archive with a file that is no image: the page names it inside the archive; nothing is imported
    broken = draw_dataset_folder(files / "Broken", n_images=2, seed=2)
    (broken / "images" / "img01.jpg").write_bytes(b"this is no JPEG")
    (files / "Broken.zip").write_bytes(zip_folder(broken))
    page.goto(f"{live_server.url}/researcher/datasets/import/")
    page.set_input_files("#id_archive-archive", str(files / "Broken.zip"))
    page.click("#archive-import button[type=submit]")
    page.wait_for_url("**/researcher/datasets/imports/*/")
    status = _wait_finished(page)
    error = page.inner_text("#import-error-text")
    assert error.startswith("Broken.zip/Broken/images/img01.jpg: not a readable image; replace it"), error
    assert "nothing was imported" in status and not Dataset.objects.filter(name="Broken").exists()
    _shot(page, "import-error")

    # 3. a folder under the import root, with its layout chosen
    page.goto(f"{live_server.url}/researcher/datasets/import/")
    page.select_option("#id_folder-folder", "lab/Pears")
    page.select_option("#id_folder-layout", "folder")
    page.click("#folder-import button[type=submit]")
    page.wait_for_url("**/researcher/datasets/imports/*/")
    assert "Imported." in _wait_finished(page)
    assert page.inner_text("#result-dataset") == "Pears"

    # the list shows both datasets and every import; "New study" starts a study on the imported dataset
    page.click("text=← Datasets")
    page.wait_for_selector("#dataset-list")
    listing = page.inner_text("#dataset-list")
    assert "Orchard v1" in listing and "Pears" in listing
    assert page.locator("#import-list tbody tr").count() == DatasetImport.objects.count() == 3
    _shot(page, "dataset-list")
    orchard_import = DatasetImport.objects.get(archive_name="Orchard.zip")
    page.goto(f"{live_server.url}/researcher/datasets/imports/{orchard_import.pk}/")
    page.click("#new-study")
    page.wait_for_selector("#study-form")
    chosen = page.eval_on_selector("#id_dataset", "select => select.options[select.selectedIndex].text")
    assert chosen == "Orchard v1"


def test_the_import_page_follows_a_running_import_until_its_result(page, live_server):
    from django.utils import timezone

    job = DatasetImport.objects.create(
        source=DatasetImport.Source.FOLDER, folder="lab/Pears", state=DatasetImport.State.RUNNING,
        stage="checking img03.jpg", done=3, total=10, started_at=timezone.now(),
    )  # fmt: skip
    page.goto(f"{live_server.url}/researcher/datasets/imports/{job.pk}/")
    assert page.inner_text("#import-stage") == "checking img03.jpg: 3 / 10"
    assert "30 %" in page.inner_text("#import-progress")
    _shot(page, "import-progress")
    DatasetImport.objects.filter(pk=job.pk).update(stage="checking img07.jpg", done=7)
    page.wait_for_function(
        "() => document.querySelector('#import-stage').textContent.includes('7 / 10')", timeout=10_000
    )
    dataset = Dataset.objects.create(name="Pears", layout="folder", source_path="x")
    DatasetImport.objects.filter(pk=job.pk).update(
        state=DatasetImport.State.DONE, dataset=dataset, images=2, instances=2, finished_at=timezone.now()
    )
    page.wait_for_selector("#import-result", timeout=10_000)  # the page polled: no reload
    assert page.inner_text("#result-dataset") == "Pears"
