"""Download views: login required, the per-study rule, and the files they stream."""

from __future__ import annotations

import io
import json
import zipfile

import pyarrow.parquet as pq
import pytest

from tests.factories import make_researcher


def _body(response) -> bytes:
    return b"".join(response.streaming_content)


def _urls(study_id: int) -> list[str]:
    return [
        f"/exports/studies/{study_id}/rclicks.zip",
        f"/exports/studies/{study_id}/full.parquet",
        f"/exports/studies/{study_id}/full.jsonl",
        f"/exports/studies/{study_id}/full.manifest.json",
    ]


@pytest.mark.django_db
def test_anonymous_users_are_sent_to_log_in(small_study, client):
    for url in _urls(small_study.study.pk):
        response = client.get(url)
        assert response.status_code == 302 and "login" in response["Location"]


@pytest.mark.django_db
def test_a_researcher_who_may_not_see_the_study_gets_404(small_study, client):
    client.force_login(make_researcher())
    for url in _urls(small_study.study.pk):
        assert client.get(url).status_code == 404
    assert client.get("/exports/studies/987654/rclicks.zip").status_code == 404


@pytest.mark.django_db
def test_a_user_who_is_no_researcher_gets_404_even_as_owner(small_study, client):
    from django.contrib.auth.models import User

    user = User.objects.create_user(username="plain", password="pw-plain-123")
    small_study.study.owner = user
    small_study.study.save(update_fields=["owner"])
    client.force_login(user)
    assert client.get(_urls(small_study.study.pk)[0]).status_code == 404


@pytest.mark.django_db
def test_the_owner_downloads_the_rclicks_zip(small_study, client):
    from tests.exports.test_rclicks import GOLDEN

    owner = make_researcher()
    small_study.study.owner = owner
    small_study.study.save(update_fields=["owner"])
    client.force_login(owner)
    response = client.get(f"/exports/studies/{small_study.study.pk}/rclicks.zip")
    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    assert f"study-{small_study.study.pk}-rclicks.zip" in response["Content-Disposition"]
    archive = zipfile.ZipFile(io.BytesIO(_body(response)))
    names = set(archive.namelist())
    assert archive.read("clicks.csv") == GOLDEN.read_bytes()
    assert "manifest.json" in names and "previews.csv" not in names
    assert {n for n in names if n.endswith(".png")} == {
        "SUBSEC_MASKS/Mixed stems/fn_fp/single one.v2_embedded_fn_pc_0.png",
        "SUBSEC_MASKS/Mixed stems/fn_fp/multi_x_______2_sam_fp_mobile_3.png",
        "SUBSEC_MASKS/Mixed stems/fn_fp/x_sample_mivos_fn.png",
    }


@pytest.mark.django_db
def test_a_shared_researcher_gets_invalid_rows_and_previews_when_asked(small_study, client):
    colleague = make_researcher()
    small_study.study.researchers.add(colleague)
    client.force_login(colleague)
    response = client.get(f"/exports/studies/{small_study.study.pk}/rclicks.zip?include_invalid=1&previews=1")
    archive = zipfile.ZipFile(io.BytesIO(_body(response)))
    header = archive.read("clicks.csv").decode().splitlines()
    assert header[0].endswith(",h,model_name,valid") and len(header) == 1 + 15
    assert archive.read("previews.csv").decode().splitlines()[1].startswith("Object_CutOut,")


@pytest.mark.django_db
def test_full_parquet_and_jsonl_downloads(small_study, client):
    client.force_login(make_researcher(staff=True))
    from django.contrib.auth.models import User

    User.objects.filter(pk=client.session["_auth_user_id"]).update(is_superuser=True)
    response = client.get(f"/exports/studies/{small_study.study.pk}/full.parquet")
    assert response.status_code == 200
    table = pq.read_table(io.BytesIO(_body(response)))
    assert table.num_rows == 15 and "worker" in table.column_names
    response = client.get(f"/exports/studies/{small_study.study.pk}/full.jsonl")
    assert response.status_code == 200 and len(_body(response).splitlines()) == 15
    # the downloaded Parquet names its dataset; for JSON Lines the manifest is its own download
    embedded = json.loads(table.schema.metadata[b"clicklab_manifest"])
    assert [d["name"] for d in embedded["datasets"]] == [small_study.dataset.name]
    response = client.get(f"/exports/studies/{small_study.study.pk}/full.manifest.json?format=jsonl")
    assert response.status_code == 200 and "attachment" in response["Content-Disposition"]
    manifest = json.loads(response.content)
    assert manifest["rows"] == 15 and manifest["file_format"] == "jsonl"
    assert manifest["datasets"] == embedded["datasets"] and len(manifest["datasets"][0]["content_hash"]) == 64


@pytest.mark.django_db
def test_an_export_error_is_answered_readably(small_study, client):
    from collector.models import Target

    owner = make_researcher()
    small_study.study.owner = owner
    small_study.study.save(update_fields=["owner"])
    Target.objects.filter(full_stem="x_sample_mivos_fn").update(full_stem="x_sample_mivos")
    client.force_login(owner)
    response = client.get(f"/exports/studies/{small_study.study.pk}/rclicks.zip")
    assert response.status_code == 409
    assert b"expected 'x_sample_mivos_fn'" in response.content
