"""Admin actions: download the exports of the selected studies."""

from __future__ import annotations

import io
import zipfile

import pyarrow.parquet as pq
import pytest

from tests.factories import make_researcher

CHANGELIST = "/admin/collector/study/"


@pytest.mark.django_db
def test_superuser_downloads_the_rclicks_zip_of_two_studies(small_study, admin_client, tmp_path):
    from tests.factories import make_study

    empty = make_study(small_study.dataset, publish=True)
    response = admin_client.post(
        CHANGELIST, {"action": "download_rclicks_zip", "_selected_action": [small_study.study.pk, empty.pk]}
    )
    assert response.status_code == 200
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    assert len(archive.read("clicks.csv").decode().splitlines()) == 1 + 11
    assert f"study {empty.pk}" in archive.read("manifest.json").decode()


@pytest.mark.django_db
def test_superuser_downloads_the_full_export(small_study, admin_client):
    response = admin_client.post(
        CHANGELIST, {"action": "download_full_export", "_selected_action": [small_study.study.pk]}
    )
    assert response.status_code == 200
    assert pq.read_table(io.BytesIO(b"".join(response.streaming_content))).num_rows == 15


@pytest.mark.django_db
def test_staff_who_may_not_see_a_study_get_a_message_not_a_file(small_study, client):
    from django.contrib.auth.models import Permission

    staff = make_researcher()
    staff.user_permissions.add(*Permission.objects.filter(codename__in=["view_study", "change_study"]))
    client.force_login(staff)
    response = client.post(
        CHANGELIST,
        {"action": "download_rclicks_zip", "_selected_action": [small_study.study.pk]},
        follow=True,
    )
    assert response.status_code == 200 and response["Content-Type"].startswith("text/html")
    assert f"You may not export study {small_study.study.pk}" in response.content.decode()
