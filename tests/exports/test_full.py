"""Full-fidelity export: Parquet and the JSON Lines fallback, every click, pseudonyms only."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from collector.models import Click
from exports.full import COLUMN_NAMES, client_measurements, full_export
from exports.selectors import ExportError


@pytest.mark.django_db
def test_parquet_holds_every_click_with_session_and_measurements(small_study, tmp_path):
    result = full_export(study_ids=[small_study.study.pk], out_path=tmp_path / "full.parquet")
    assert result.format == "parquet" and result.rows == 15
    table = pq.read_table(result.path)
    assert tuple(table.column_names) == COLUMN_NAMES
    rows = table.to_pylist()
    clicks = {c.pk: c for c in Click.objects.select_related("trial__session__worker", "trial__target")}
    assert {r["click_id"] for r in rows} == set(clicks)
    for row in rows:
        click = clicks[row["click_id"]]
        session = click.trial.session
        assert row["session_id"] == session.pk and row["worker"] == session.worker.pseudonym
        assert (row["x"], row["y"], row["pointer_type"]) == (click.x, click.y, click.pointer_type)
        assert row["is_valid"] == click.is_valid and row["invalid_reason"] == click.invalid_reason
        assert row["counted"] == (bool(click.is_valid) and session.validity == "counted")
        assert row["full_stem"] == click.trial.target.full_stem
        assert json.loads(row["phase_onsets_ms"]) == click.trial.phase_onsets_ms
        assert json.loads(row["scheduled_onsets_ms"]) == click.trial.scheduled_onsets_ms
        assert row["load_wait_ms"] == click.trial.load_wait_ms
        assert (row["viewport_width"], row["viewport_height"], row["device_pixel_ratio"]) == (
            1280.0,
            720.0,
            2.0,
        )
        assert row["refresh_hz"] == 59.94  # the trial's own estimate wins over the session's
        assert row["reaction_ms"] == click.reaction_ms and row["session_started_at"] is not None
    rejected = [r for r in rows if r["session_validity"] == "rejected"]
    assert len(rejected) == 2 and {r["session_rejection_reason"] for r in rejected} == {
        "fewer than 7 of 10 clicks valid"
    }
    edge = next(r for r in rows if r["x"] == 160.0)
    assert (edge["x_px"], edge["y_px"]) == (159, 119)


@pytest.mark.django_db
def test_the_platform_id_never_appears_in_any_export(small_study, tmp_path):
    from collector.models import Worker

    external_ids = list(Worker.objects.values_list("external_id", flat=True))
    assert external_ids
    parquet = full_export(study_ids=[small_study.study.pk], out_path=tmp_path / "f.parquet").path
    jsonl = full_export(study_ids=[small_study.study.pk], out_path=tmp_path / "f.jsonl").path
    values = {v for row in pq.read_table(parquet).to_pylist() for v in row.values()}
    text = jsonl.read_text()
    for external_id in external_ids:
        assert external_id not in values and external_id not in text
    assert {w.pseudonym for w in Worker.objects.all()} <= values


@pytest.mark.django_db
def test_jsonl_writer_gives_the_same_rows_as_parquet(small_study, tmp_path):
    parquet = full_export(study_ids=[small_study.study.pk], out_path=tmp_path / "f.parquet").path
    result = full_export(study_ids=[small_study.study.pk], out_path=tmp_path / "f.out", format="jsonl")
    assert result.format == "jsonl"
    lines = [json.loads(line) for line in result.path.read_text().splitlines()]
    table = pq.read_table(parquet).to_pylist()
    assert len(lines) == len(table) == 15
    for from_json, from_parquet in zip(lines, table):
        assert list(from_json) == list(COLUMN_NAMES)
        for name in (
            "click_id",
            "session_id",
            "worker",
            "x",
            "y",
            "x_px",
            "is_valid",
            "counted",
            "dataset",
            "full_stem",
        ):
            assert from_json[name] == from_parquet[name]
        assert from_json["phase_onsets_ms"] == json.loads(from_parquet["phase_onsets_ms"])
        assert from_json["client_info"]["devicePixelRatio"] == 2.0
        assert from_json["received_at"] == from_parquet["received_at"].isoformat()


@pytest.mark.django_db
def test_an_empty_study_gives_the_columns_and_a_message(tmp_path):
    from tests.factories import make_dataset, make_study

    study = make_study(make_dataset(tmp_path, n_images=1), publish=True)
    said: list[str] = []
    result = full_export(study_ids=[study.pk], out_path=tmp_path / "e.parquet", on_message=said.append)
    table = pq.read_table(result.path)
    assert table.num_rows == 0 and tuple(table.column_names) == COLUMN_NAMES
    assert said and "no clicks recorded" in said[0]


@pytest.mark.django_db
def test_unknown_format_is_refused(small_study, tmp_path):
    with pytest.raises(ExportError, match="format 'csv' is not supported"):
        full_export(study_ids=[small_study.study.pk], out_path=tmp_path / "x", format="csv")


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        (
            {"viewport_width": 390, "viewport_height": 844, "devicePixelRatio": 3, "refresh_hz": 120},
            (390.0, 844.0, 3.0, 120.0),
        ),
        ({"viewport": {"width": 800, "height": 600}, "dpr": 1.25}, (800.0, 600.0, 1.25, None)),
        ({"viewport": [1024, 768], "refreshHz": 59.9}, (1024.0, 768.0, None, 59.9)),
        ({"viewport_width": "wide", "devicePixelRatio": True}, (None, None, None, None)),
        ({}, (None, None, None, None)),
        (None, (None, None, None, None)),
    ],
)
def test_client_measurements_read_the_players_report(info, expected):
    assert client_measurements(info) == expected


@pytest.mark.django_db
def test_every_click_row_says_which_model_made_its_targets_previous_mask(small_study, tmp_path):
    from collector.models import Target

    corrections = Target.objects.filter(round__study=small_study.study).exclude(click_type="first")
    for index, target in enumerate(corrections.order_by("pk")):
        Target.objects.filter(pk=target.pk).update(
            model_id=f"sam:vit_b:fingerprint{index}:mm1",
            model_variant="vit_b",
            checkpoint_sha256=f"{index:064x}",
        )
    expected = {t.pk: (t.model_id, t.model_variant, t.checkpoint_sha256) for t in Target.objects.all()}
    rows = pq.read_table(full_export(study_ids=[small_study.study.pk], out_path=tmp_path / "f.parquet").path)
    rows = rows.to_pylist()
    assert {r["click_type"] for r in rows} == {"first", "fn", "fp"}
    for row in rows:
        assert (row["model_id"], row["model_variant"], row["checkpoint_sha256"]) == expected[row["target_id"]]
        assert (row["model_id"] == "") == (row["click_type"] == "first")
    assert COLUMN_NAMES.index("model_id") == COLUMN_NAMES.index("model_type") + 1


@pytest.mark.django_db
def test_the_full_export_writes_a_manifest_naming_the_dataset_its_content_and_the_round_rules(
    small_study, tmp_path
):
    from benchmark.datasets import dataset_content_hash, open_dataset

    for name in ("full.parquet", "full.jsonl"):
        result = full_export(study_ids=[small_study.study.pk], out_path=tmp_path / name)
        assert result.manifest_path == tmp_path / "full.manifest.json"
        manifest = json.loads(result.manifest_path.read_text())
        assert (
            manifest["file"] == name and manifest["rows"] == 15 and manifest["columns"] == list(COLUMN_NAMES)
        )
        folder_hash = dataset_content_hash(open_dataset(small_study.folder, "folder"))
        assert manifest["datasets"] == [
            {
                "name": "Mixed stems",
                "layout": "folder",
                "content_hash": folder_hash,
                "studies": [small_study.study.pk],
            }
        ]
        rules = manifest["studies"][0]["round_rules"]
        assert rules["min_error_area_px"] == small_study.study.min_error_area_px
        assert {m["model_name"] for m in rules["models"]} == {"embedded", "sam", "mivos"}
    embedded = json.loads(pq.read_table(tmp_path / "full.parquet").schema.metadata[b"clicklab_manifest"])
    assert embedded["datasets"] == manifest["datasets"] and "rows" not in embedded
