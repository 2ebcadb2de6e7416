"""collector.services.corrective_simulation: seed 001's simulated annotators work a corrective campaign on the
shared GrabCut images through the same services as people, with the default model (the embedded segmenter, no
weights), and the masks get better every round (gated real-data test, marker ``dataset``)."""

from __future__ import annotations

import shutil

import pytest

from collector.models import CorrectiveClick, CorrectiveItem, Session
from collector.services.corrective_simulation import corrective_simulate
from collector.services.datasets import dataset_import
from exports.corrective import corrective_export
from tests.factories import make_study

pytestmark = pytest.mark.django_db

#: Instances simulated here: the first GrabCut images by name (bench/bench_corrective.py runs all 21). Seeds are
#: fixed, so the numbers repeat: measured 0.888, 0.923, 0.944, 0.955 after rounds 0..3 (docs/corrective.md).
N_INSTANCES = 8
#: The least gain of every round over the one before (a round that only holds its ground fails).
MIN_GAIN_PER_ROUND = 0.005


@pytest.mark.dataset
@pytest.mark.one_backend
def test_seed_001_annotators_raise_the_mean_iou_every_round_on_grabcut(grabcut_root, tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    # The first N_INSTANCES GrabCut images (by name) in the GrabCut layout: importing all 21 costs seconds.
    subset = tmp_path / "GrabCut"
    for folder in ("data_GT", "boundary_GT"):
        (subset / folder).mkdir(parents=True)
    for image in sorted((grabcut_root / "data_GT").iterdir())[:N_INSTANCES]:
        shutil.copy(image, subset / "data_GT" / image.name)
        shutil.copy(
            grabcut_root / "boundary_GT" / f"{image.stem}.bmp", subset / "boundary_GT" / f"{image.stem}.bmp"
        )
    dataset = dataset_import(path=subset, layout="grabcut", name="GrabCut").dataset
    study = make_study(dataset, publish=True, kind="corrective", batch_size=N_INSTANCES, quota_pc=1)
    assert (study.corrective_init, study.corrective_rounds, study.corrective_clicks_per_round) == (
        "box",
        3,
        4,
    )
    assert study.next_round_segmenter == "" and settings.NEXT_ROUND_SEGMENTERS == ["embedded"]
    result = corrective_simulate(study_id=study.pk, seed=1, max_sessions=1)
    assert (result.sessions, result.items) == (1, N_INSTANCES)
    assert Session.objects.get(study=study).validity == "counted"
    report = corrective_export(study_id=study.pk, out_dir=tmp_path / "out").report
    print("mIoU after rounds 0..3:", report["miou_after_round"], "states", report["states"])
    assert report["instances_after_round"] == {str(r): N_INSTANCES for r in range(4)}
    miou = [report["miou_after_round"][str(r)] for r in range(4)]
    for before, after, number in zip(miou, miou[1:], range(1, 4)):
        assert after >= before + MIN_GAIN_PER_ROUND, f"round {number} did not improve the masks: {miou}"
    assert CorrectiveClick.objects.filter(item__session__study=study).count() > N_INSTANCES
    assert not CorrectiveItem.objects.filter(
        session__study=study, state__in=["clicking", "updating"]
    ).exists()
