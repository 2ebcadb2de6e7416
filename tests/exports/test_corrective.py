"""exports.corrective: final masks as COCO RLE (pycocotools) that decode back to the stored masks, PNGs, the
click log and the seed-001 report; the download view and the command."""

from __future__ import annotations

import csv
import io
import json
import zipfile

import numpy as np
import pytest
from django.core.management import call_command
from PIL import Image as PILImage
from pycocotools import mask as coco_mask

from collector.models import CorrectiveItem
from collector.services.corrective import (
    corrective_click_record,
    corrective_click_undo,
    corrective_item_skip,
    corrective_items_ensure,
    corrective_round_submit,
    corrective_update_apply,
)
from collector.services.session_start import session_start
from exports.corrective import corrective_export, read_mask, rle_decode, rle_encode
from exports.selectors import ExportError
from tests.factories import make_dataset, make_researcher, make_study, make_worker

pytestmark = pytest.mark.django_db


@pytest.fixture
def campaign(tmp_path, settings):
    """Two instances: one corrected over two rounds (one undone click), one skipped; round times recorded."""
    settings.MEDIA_ROOT = tmp_path / "media"
    dataset = make_dataset(tmp_path, n_images=2, size=(120, 90))
    study = make_study(
        dataset, publish=True, kind="corrective", corrective_rounds=2, batch_size=2, quota_pc=1
    )
    session = session_start(study=study, worker=make_worker(), device="pc")
    corrected, skipped = corrective_items_ensure(session=session)
    for item in (corrected, skipped):
        corrective_update_apply(item_id=item.pk, round_number=0)
    instance = CorrectiveItem.objects.get(pk=corrected.pk).trial.target.instance
    cx, cy = (instance.bbox_x0 + instance.bbox_x1) / 2, (instance.bbox_y0 + instance.bbox_y1) / 2

    def click(key, x, y, positive=True, ms=100.0):
        corrective_click_record(
            session=session, item_id=corrected.pk, idempotency_key=key, x=x, y=y, is_positive=positive,
            pointer_type="mouse", item_ms=ms,
        )  # fmt: skip

    click("a", cx, cy)
    click("b", 2, 2, positive=False, ms=300.0)
    corrective_click_undo(session=session, item_id=corrected.pk, idempotency_key="b")
    corrective_round_submit(session=session, item_id=corrected.pk, round_number=1, round_ms=2000)
    corrective_update_apply(item_id=corrected.pk, round_number=1)
    click("c", 3, 3, positive=False, ms=2500.0)
    corrective_round_submit(session=session, item_id=corrected.pk, round_number=2, round_ms=1000)
    corrective_update_apply(item_id=corrected.pk, round_number=2)
    corrective_item_skip(session=session, item_id=skipped.pk, round_ms=500)
    return study, CorrectiveItem.objects.get(pk=corrected.pk), CorrectiveItem.objects.get(pk=skipped.pk)


def test_rle_round_trips_through_pycocotools():
    mask = np.zeros((7, 5), dtype=bool)
    mask[1:4, 2:5] = True
    rle = rle_encode(mask)
    assert rle["size"] == [7, 5] and isinstance(rle["counts"], str)
    assert np.array_equal(rle_decode(rle), mask)


def test_the_export_decodes_back_to_the_stored_masks_with_log_and_report(campaign, tmp_path):
    study, corrected, skipped = campaign
    result = corrective_export(study_id=study.pk, out_dir=tmp_path / "out")
    coco = json.loads((tmp_path / "out" / "masks.json").read_text())
    assert result.annotations == 2 and len(coco["images"]) == 2
    by_item = {a["clicklab"]["item_id"]: a for a in coco["annotations"]}
    for item in (corrected, skipped):
        annotation = by_item[item.pk]
        stored = read_mask(item.current_mask.file.name)
        decoded = coco_mask.decode(
            {
                "size": annotation["segmentation"]["size"],
                "counts": annotation["segmentation"]["counts"].encode(),
            }
        ).astype(bool)
        assert np.array_equal(decoded, stored)
        assert annotation["area"] == int(stored.sum())
        png = np.asarray(PILImage.open(tmp_path / "out" / annotation["clicklab"]["png"])) == 255
        assert np.array_equal(png, stored)
        assert annotation["clicklab"]["model_id"] == item.current_mask.model_id
    assert (
        by_item[corrected.pk]["clicklab"]["mask_round"] == 2
        and by_item[skipped.pk]["clicklab"]["state"] == "skipped"
    )

    rows = list(csv.DictReader(open(tmp_path / "out" / "clicks.csv")))
    assert [(r["round"], r["order"], r["sign"], r["undone"]) for r in rows] == [
        ("1", "0", "positive", "0"),
        ("1", "1", "negative", "1"),
        ("2", "0", "negative", "0"),
    ]
    assert rows[2]["item_ms"] == "2500.0" and rows[0]["worker"] == corrected.session.worker.pseudonym

    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["clicks"] == 2 and report["undone_clicks"] == 1 and report["skips"] == 1
    assert report["clicks_per_round"] == {"0": 0, "1": 1, "2": 1}
    # Round 1: the corrected instance's 2 s and the 0.5 s before the other was skipped; round 2: 1 s.
    assert report["time_per_round_ms"]["1"] == 1250.0 and report["time_per_round_ms"]["2"] == 1000.0
    assert report["time_per_instance_ms"]["mean"] == pytest.approx((3000.0 + 500.0) / 2)
    round_0 = [corrected.masks.get(round=0).iou, skipped.masks.get(round=0).iou]
    assert report["miou_per_round"]["0"] == pytest.approx(np.mean(round_0))
    assert report["miou_per_round"]["2"] == pytest.approx(corrected.current_mask.iou)
    assert [p["round"] for p in report["quality_vs_time"]] == [0, 1, 2]
    assert (tmp_path / "out" / "quality_vs_time.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_download_and_command(campaign, client, tmp_path):
    study, _, _ = campaign
    researcher = make_researcher("corr")
    study.owner = researcher
    study.save(update_fields=["owner"])
    client.force_login(researcher)
    response = client.get(f"/exports/studies/{study.pk}/corrective.zip")
    assert response.status_code == 200
    names = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content))).namelist()
    assert {"masks.json", "clicks.csv", "report.json", "quality_vs_time.png"} <= set(names)
    out = io.StringIO()
    call_command("export_corrective", study=study.pk, out=str(tmp_path / "cmd"), stdout=out)
    assert "2 mask(s), 3 click(s)" in out.getvalue()


def test_a_timed_study_is_refused_by_name(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    study = make_study(make_dataset(tmp_path, n_images=1))
    with pytest.raises(ExportError, match="is a timed study"):
        corrective_export(study_id=study.pk, out_dir=tmp_path / "x")
