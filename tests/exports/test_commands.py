"""The management commands export_rclicks and export_full."""

from __future__ import annotations

import io

import pyarrow.parquet as pq
import pytest
from django.core.management import CommandError, call_command

from tests.exports.test_rclicks import GOLDEN


@pytest.mark.django_db
def test_export_rclicks_command_writes_the_golden_csv(small_study, tmp_path):
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "export_rclicks",
        "--study",
        str(small_study.study.pk),
        "--out",
        str(tmp_path),
        "--no-progress",
        stdout=out,
        stderr=err,
    )
    assert (tmp_path / "clicks.csv").read_bytes() == GOLDEN.read_bytes()
    assert "11 click row(s); 3 previous-round mask(s)" in out.getvalue()


@pytest.mark.django_db
def test_export_rclicks_command_explains_an_empty_study(tmp_path):
    from tests.factories import make_dataset, make_study

    study = make_study(make_dataset(tmp_path, n_images=1), publish=True)
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "export_rclicks",
        "--study",
        str(study.pk),
        "--out",
        str(tmp_path / "o"),
        "--no-progress",
        stdout=out,
        stderr=err,
    )
    assert "0 click row(s)" in out.getvalue() and "no sessions yet" in err.getvalue()


@pytest.mark.django_db
def test_export_rclicks_command_several_studies_and_include_invalid(small_study, tmp_path):
    from tests.factories import make_study

    other = make_study(small_study.dataset, publish=True, display_mode="Silhouette_Mask")
    call_command(
        "export_rclicks", "--study", str(small_study.study.pk), "--study", str(other.pk), "--out", str(tmp_path),
        "--include-invalid", "--no-progress", stdout=io.StringIO(), stderr=io.StringIO(),
    )  # fmt: skip
    assert (tmp_path / "clicks.csv").read_text().splitlines()[0].endswith(",valid")
    assert (tmp_path / "previews.csv").is_file()  # two display modes


@pytest.mark.django_db
def test_export_rclicks_command_unknown_study(tmp_path):
    with pytest.raises(CommandError, match="no study with id 424242"):
        call_command("export_rclicks", "--study", "424242", "--out", str(tmp_path), "--no-progress")


@pytest.mark.django_db
def test_export_full_command(small_study, tmp_path):
    out = io.StringIO()
    call_command(
        "export_full",
        "--study",
        str(small_study.study.pk),
        "--out",
        str(tmp_path / "all.parquet"),
        "--no-progress",
        stdout=out,
    )
    assert (
        pq.read_table(tmp_path / "all.parquet").num_rows == 15 and "15 click(s) as parquet" in out.getvalue()
    )
    call_command(
        "export_full",
        "--study",
        str(small_study.study.pk),
        "--out",
        str(tmp_path / "all.jsonl"),
        "--no-progress",
        stdout=out,
    )
    assert len((tmp_path / "all.jsonl").read_text().splitlines()) == 15
