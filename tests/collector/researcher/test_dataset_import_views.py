"""The dataset pages through Django's test client (access, limits stated, the upload limit, the live status,
the admin's link) and one import carried out by a real Celery worker through the outbox."""

from __future__ import annotations

import time

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from collector.models import Dataset, DatasetImport, TaskIntent
from tests.collector.test_services_dataset_imports import zip_folder
from tests.factories import draw_dataset_folder, make_researcher


@pytest.fixture
def media_root(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


@pytest.mark.django_db
def test_the_dataset_pages_need_a_researcher(client):
    urls = [reverse("researcher:dataset_list"), reverse("researcher:dataset_import")]
    for url in urls:
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/researcher/login/")
    client.force_login(User.objects.create_user("annotator", password="pw-for-tests-1"))
    for url in urls:
        assert client.get(url).status_code == 403
    assert client.post(reverse("researcher:dataset_import"), {"source": "folder"}).status_code == 403
    assert not DatasetImport.objects.exists()


@pytest.mark.django_db
def test_the_import_page_states_its_limits_and_the_import_root(client, settings, tmp_path):
    client.force_login(make_researcher("alice"))
    settings.DATASET_IMPORT_ROOT = None
    page = client.get(reverse("researcher:dataset_import")).content.decode()
    assert (
        "Uploads up to <strong>2 GiB</strong>" in page and "<strong>8 GiB</strong> once uncompressed" in page
    )
    assert "symbolic and hard links" in page and 'id="no-import-root"' in page
    (tmp_path / "root" / "GrabCut").mkdir(parents=True)
    settings.DATASET_IMPORT_ROOT = tmp_path / "root"
    page = client.get(reverse("researcher:dataset_import")).content.decode()
    assert '<option value="GrabCut">GrabCut</option>' in page and str(tmp_path / "root") in page


@pytest.mark.django_db
def test_an_upload_over_the_limit_is_refused_naming_it_and_nothing_is_stored(client, media_root, settings):
    client.force_login(make_researcher("alice"))
    settings.DATASET_UPLOAD_MAX_BYTES = 1000
    upload = SimpleUploadedFile("huge.zip", b"\0" * 5000, content_type="application/zip")
    response = client.post(
        reverse("researcher:dataset_import"), {"source": "archive", "archive-archive": upload}
    )
    assert response.status_code == 413
    assert "huge.zip: more than the upload limit of 1000 bytes" in response.content.decode()
    assert not DatasetImport.objects.exists() and not TaskIntent.objects.exists()
    assert not media_root.exists() or not any(media_root.rglob("*"))


@pytest.mark.django_db
def test_a_folder_outside_the_root_is_refused_on_its_field(client, media_root, settings, tmp_path):
    client.force_login(make_researcher("alice"))
    (tmp_path / "root" / "GrabCut").mkdir(parents=True)
    settings.DATASET_IMPORT_ROOT = tmp_path / "root"
    response = client.post(
        reverse("researcher:dataset_import"), {"source": "folder", "folder-folder": "../etc"}
    )
    assert response.status_code == 400
    assert "Select a valid choice" in response.content.decode()  # only the listed folders can be chosen
    assert not DatasetImport.objects.exists()


@pytest.mark.django_db
def test_the_admin_points_at_the_import_page_instead_of_an_empty_add_form(client):
    admin = make_researcher("root-admin")
    User.objects.filter(pk=admin.pk).update(is_superuser=True)
    client.force_login(admin)
    page = client.get("/admin/collector/dataset/").content.decode()
    assert reverse("researcher:dataset_import") in page and "Import a dataset" in page
    assert "/admin/collector/dataset/add/" not in page
    assert client.get("/admin/collector/dataset/add/").status_code == 403


@pytest.mark.django_db(transaction=True)
def test_an_uploaded_archive_is_imported_by_a_worker_and_its_page_shows_the_result(
    client, media_root, tmp_path, celery_worker
):
    celery_worker.follow_media_root()
    client.force_login(make_researcher("alice"))
    folder = draw_dataset_folder(tmp_path / "Orchard", n_images=3, objects_per_image=2)
    upload = SimpleUploadedFile("Orchard.zip", zip_folder(folder), content_type="application/zip")
    response = client.post(
        reverse("researcher:dataset_import"),
        {"source": "archive", "archive-archive": upload, "archive-layout": "", "archive-name": "Orchard v1"},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    job = DatasetImport.objects.get()
    assert response["Location"] == reverse("researcher:dataset_import_detail", args=[job.pk])
    live = reverse("researcher:dataset_import_live", args=[job.pk])
    deadline = time.monotonic() + 120
    body = client.get(live).json()
    while not body["done"] and time.monotonic() < deadline:
        time.sleep(0.3)
        body = client.get(live).json()
    assert body["done"] and body["state"] == "done", (body, celery_worker.log()[-3000:])
    assert "Orchard v1" in body["html"]["import-status"] and ">6<" in body["html"]["import-status"]
    dataset = Dataset.objects.get(name="Orchard v1")
    assert dataset.images.count() == 3
    page = client.get(response["Location"]).content.decode()
    assert f"{reverse('researcher:study_create')}?dataset={dataset.pk}" in page
    form = client.get(f"{reverse('researcher:study_create')}?dataset={dataset.pk}").content.decode()
    assert f'<option value="{dataset.pk}" selected>' in form
