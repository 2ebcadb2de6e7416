"""Reads of the exporters: dataset names, the per-target table, the click stream."""

from __future__ import annotations

import pytest

from collector.models import Click
from exports.selectors import (
    ExportError,
    export_dataset_name,
    export_targets,
    rclicks_click_count,
    rclicks_click_rows,
    studies_for_export,
)


def test_dataset_names_are_kept_except_the_coco_mval_cli_name():
    assert export_dataset_name(name="GrabCut", layout="grabcut") == "GrabCut"
    assert export_dataset_name(name="COCO", layout="coco_mval") == "COCO"
    assert export_dataset_name(name="COCO_MVal", layout="coco_mval") == "COCO"
    assert export_dataset_name(name="coco_mval", layout="coco_mval") == "COCO"
    assert export_dataset_name(name="COCO_MVal", layout="folder") == "COCO_MVal"
    assert export_dataset_name(name="my coco subset", layout="coco_mval") == "my coco subset"


@pytest.mark.django_db
def test_click_stream_is_grouped_by_target_and_flags_counted_rows(small_study):
    ids = [small_study.study.pk]
    default = list(rclicks_click_rows(study_ids=ids, include_invalid=False))
    everything = list(rclicks_click_rows(study_ids=ids, include_invalid=True, chunk_size=2))
    assert len(default) == rclicks_click_count(study_ids=ids, include_invalid=False) == 11
    assert len(everything) == rclicks_click_count(study_ids=ids, include_invalid=True) == 15
    assert all(row[5] for row in default)
    assert [row[:5] for row in everything if row[5]] == [row[:5] for row in default]
    keys = [(row[1], row[0]) for row in everything]
    assert keys == sorted(keys)
    assert {row[0] for row in everything} == set(Click.objects.values_list("id", flat=True))


@pytest.mark.django_db
def test_target_table_holds_the_explicit_key_columns(small_study):
    targets = export_targets(study_ids=[small_study.study.pk])
    fp = targets[small_study.targets["multi_x_______2_sam_fp_mobile_3"].pk]
    assert (fp.dataset, fp.image_stem, fp.object_stem, fp.click_type, fp.model_type) == (
        "Mixed stems",
        "multi_x",
        "2",
        "fp",
        "sam",
    )
    assert (fp.source_device, fp.source_index, fp.width, fp.height, fp.round_number) == (
        "mobile",
        3,
        160,
        120,
        2,
    )
    assert fp.previous_mask_file.endswith("multi_x_______2_sam_fp_mobile_3.png")


@pytest.mark.django_db
def test_studies_keep_the_order_asked_and_drop_repeats(small_study, tmp_path):
    from tests.factories import make_study

    other = make_study(small_study.dataset)
    assert [s.pk for s in studies_for_export(study_ids=[other.pk, small_study.study.pk, other.pk])] == [
        other.pk,
        small_study.study.pk,
    ]
    with pytest.raises(ExportError, match="pass at least one study"):
        studies_for_export(study_ids=[])
