"""Issue 34.3: a campaign's click log holds the clicks exactly as sent (full precision), so replaying the log into a
new study of the same dataset (``manage.py replay_corrective``) gives the same masks, byte for byte, round by
round; and a click sent over HTTP comes back out of clicks.csv as the very float that was sent."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.core.management import call_command
from django.test import Client

from collector.models import CorrectiveClick, CorrectiveItem, CorrectiveMask
from collector.services.corrective import (
    corrective_click_record,
    corrective_click_undo,
    corrective_item_skip,
    corrective_items_ensure,
    corrective_round_submit,
    corrective_session_finish,
    corrective_update_apply,
)
from collector.services.corrective_simulation import corrective_simulate
from collector.services.session_start import session_start
from collector.services.tokens import session_token_make
from exports.corrective import corrective_export
from tests.factories import make_dataset, make_study, make_worker

pytestmark = pytest.mark.django_db

SETTINGS = {"kind": "corrective", "batch_size": 2, "quota_pc": 1, "corrective_rounds": 3}


def _worked_by_hand(study) -> None:
    """One session worked through the services: sub-pixel clicks, one of them undone, two rounds, then skip."""
    session = session_start(study=study, worker=make_worker(), device="pc")
    for item in corrective_items_ensure(session=session, send=False):
        corrective_update_apply(item_id=item.pk, round_number=0)
        instance = CorrectiveItem.objects.get(pk=item.pk).trial.target.instance
        cx, cy = (instance.bbox_x0 + instance.bbox_x1) / 2, (instance.bbox_y0 + instance.bbox_y1) / 2
        for round_number, clicks in ((1, [(cx + 0.123456789, cy - 0.987654321, True, False),
                                          (1.0 / 3.0, 2.0 / 3.0, False, True),
                                          (instance.bbox_x0 + 0.1, cy + 0.7071067811865476, True, False)]),
                                     (2, [(2.000000000001, 3.1415926535, False, False)])):  # fmt: skip
            for order, (x, y, positive, undo) in enumerate(clicks):
                key = f"hand-{item.pk}-{round_number}-{order}"
                corrective_click_record(session=session, item_id=item.pk, idempotency_key=key, x=x, y=y,
                                        is_positive=positive, pointer_type="mouse", item_ms=100.0 * order)  # fmt: skip
                if undo:
                    corrective_click_undo(session=session, item_id=item.pk, idempotency_key=key)
            corrective_round_submit(session=session, item_id=item.pk, round_number=round_number, send=False)
            corrective_update_apply(item_id=item.pk, round_number=round_number)
        corrective_item_skip(session=session, item_id=item.pk)
    corrective_session_finish(session_id=session.pk)


def _by_instance(study) -> dict[str, dict]:
    """Per instance (image, object): its masks' PNG bytes by round and its clicks as stored."""
    held = {}
    for item in CorrectiveItem.objects.filter(session__study=study).select_related(
        "trial__target__instance__image"
    ):
        instance = item.trial.target.instance
        masks = CorrectiveMask.objects.filter(item=item).order_by("round")
        clicks = CorrectiveClick.objects.filter(item=item).order_by("round", "order")
        held[f"{instance.image.stem}/{instance.object_stem}"] = {
            "masks": [(m.round, m.file.open("rb").read()) for m in masks],
            "clicks": [(c.round, c.order, c.x, c.y, c.is_positive, c.undone) for c in clicks],
        }
    return held


def test_replaying_a_campaigns_click_log_gives_the_same_masks_byte_for_byte(tmp_path):
    dataset = make_dataset(tmp_path, n_images=6, size=(120, 90))
    original = make_study(dataset, publish=True, **SETTINGS)
    _worked_by_hand(original)  # two instances
    corrective_simulate(study_id=original.pk, seed=5, min_region_px=1)  # the other four
    corrective_export(study_id=original.pk, out_dir=tmp_path / "original")

    replay = make_study(dataset, publish=True, **SETTINGS)
    out = io.StringIO()
    call_command("replay_corrective", "--study", replay.pk, "--clicks", tmp_path / "original" / "clicks.csv",
                 "--out", tmp_path / "replay", stdout=out)  # fmt: skip
    assert "6 instance(s)" in out.getvalue()

    before, after = _by_instance(original), _by_instance(replay)
    assert sorted(before) == sorted(after) and len(before) == 6
    assert sum(len(held["clicks"]) for held in before.values()) > 12
    for instance, held in before.items():
        assert after[instance]["clicks"] == held["clicks"], f"{instance}: the clicks, to the last bit"
        assert [r for r, _ in after[instance]["masks"]] == [r for r, _ in held["masks"]], instance
        for (number, png), (_, replayed) in zip(held["masks"], after[instance]["masks"]):
            assert replayed == png, f"{instance}: the mask after round {number} differs"
    coco = [json.loads((tmp_path / name / "masks.json").read_text()) for name in ("original", "replay")]
    assert [sorted(a["segmentation"]["counts"] for a in c["annotations"]) for c in coco][0] == sorted(
        a["segmentation"]["counts"] for a in coco[1]["annotations"]
    )


def test_a_click_sent_over_http_comes_out_of_the_log_as_the_float_that_was_sent(tmp_path):
    dataset = make_dataset(tmp_path, n_images=2, size=(120, 90))
    study = make_study(dataset, publish=True, **SETTINGS)
    session = session_start(study=study, worker=make_worker(), device="pc")
    items = corrective_items_ensure(session=session, send=False)
    corrective_update_apply(item_id=items[0].pk, round_number=0)
    sent = [
        (60.12345678901234, 45.00000000000001),
        (0.1 + 0.2, 89.99999999999999),
        (1e-07, 3.3333333333333335),
    ]
    token = session_token_make(session_id=session.pk)
    for order, (x, y) in enumerate(sent):
        body = {"item": items[0].pk, "idempotency_key": f"k{order}", "x": x, "y": y, "positive": order != 1,
                "pointer_type": "mouse", "item_ms": 10.0}  # fmt: skip
        response = Client().post(f"/api/annotator/{token}/corrective/click", data=json.dumps(body),
                                 content_type="application/json")  # fmt: skip
        assert response.status_code == 201, response.content
    corrective_export(study_id=study.pk, out_dir=tmp_path / "out")
    rows = list(csv.DictReader((tmp_path / "out" / "clicks.csv").open()))
    assert [(float(row["x"]), float(row["y"])) for row in rows] == sent
