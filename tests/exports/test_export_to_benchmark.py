"""From a two-round study to the benchmark: the export names its dataset, ``python -m benchmark run --export``
(a separate process) takes that name and gives User and Sample IoU@1, and the error masks the benchmark
rebuilds from the export are byte for byte the ones workers were shown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from django.core.files.storage import default_storage
from PIL import Image as PILImage

from benchmark.datasets import open_dataset
from benchmark.rclicks import error_mask, group_tasks, open_export, read_clicks_csv
from collector.models import Round
from collector.services.datasets import dataset_import, mask_png_bytes
from collector.services.next_round import round_build_next
from exports.rclicks import rclicks_export
from segmenters.base import Embedding, Prediction, Predictor
from segmenters.registry import register, unregister
from tests.factories import draw_dataset_folder, make_clicked_session, make_study

pytestmark = pytest.mark.django_db

PROJECT_ROOT = Path(__file__).resolve().parents[2]
STEMS = ["apple", "pear"]
SIZE = (160, 120)
MIN_AREA = 30


def _object_centre(index: int) -> tuple[float, float]:
    """Where ``draw_dataset_folder`` puts the ellipse of image ``index`` (one object per image)."""
    return SIZE[0] / 2, SIZE[1] / 2 + (index % 3 - 1) * SIZE[1] / 8


class SpecklePredictor(Predictor):
    """A disk right of the click, pierced by single-pixel holes and ringed by 2x2 specks: the fn and fp
    regions it leaves have components far under ``MIN_AREA`` besides the large ones, which the round build
    drops (as the embedded segmenter's ragged boundaries leave them)."""

    name = "test-speckle"
    model_type = "speckle"  # not an RClicks token
    threshold = 0.5

    @property
    def model_id(self) -> str:
        return "test-speckle-1"

    def encode(self, image: np.ndarray) -> Embedding:
        return Embedding(model_id=self.model_id, image_shape=image.shape[:2], payload=None, nbytes=0)

    def predict(self, embedding, clicks, previous_logits=None) -> Prediction:
        height, width = embedding.image_shape
        yy, xx = np.mgrid[0:height, 0:width]
        cx, cy = clicks[-1].x + 12, clicks[-1].y
        distance = np.hypot(xx - cx, yy - cy)
        mask = distance <= 24
        mask[(yy % 6 == 0) & (xx % 6 == 0)] = False  # holes inside: 1-px fn components
        specks = (distance > 27) & (distance < 40) & (yy % 8 < 2) & (xx % 8 < 2)
        mask[specks] = True  # specks outside: 4-px fp components
        return Prediction(probabilities=mask.astype(np.float32))


@pytest.fixture
def speckle_segmenter(settings, tmp_path):
    register("test-speckle")(SpecklePredictor)
    settings.NEXT_ROUND_SEGMENTERS = ["test-speckle"]
    settings.MEDIA_ROOT = str(tmp_path / "media")
    yield
    unregister("test-speckle")


@pytest.fixture
def two_round_export(speckle_segmenter, tmp_path):
    """A study on a dataset imported under a name of its own, round 1 clicked on pc and mobile, round 2
    built by the speckle segmenter with ``min_error_area_px`` 30 and clicked too; exported."""
    folder = draw_dataset_folder(tmp_path / "drawn", stems=STEMS, size=SIZE, seed=4)
    dataset = dataset_import(path=folder, layout="folder", name="Orchard v1").dataset
    study = make_study(dataset, publish=True, min_error_area_px=MIN_AREA)
    round_1 = study.rounds.get(number=1)
    for index, stem in enumerate(STEMS):
        target = round_1.targets.get(instance__image__stem=stem)
        cx, cy = _object_centre(index)
        make_clicked_session(study, clicks=[(target, cx - 3, cy)])
        make_clicked_session(study, clicks=[(target, cx + 2, cy + 1)], device="mobile")
    Round.objects.filter(pk=round_1.pk).update(state=Round.State.CLOSED)
    built = round_build_next(round_id=round_1.pk)
    assert built.created, built.error
    corrections = list(built.round.targets.order_by("full_stem"))
    assert sorted(t.click_type for t in corrections) == ["fn", "fn", "fp", "fp"], built.skipped
    for target in corrections:
        with default_storage.open(target.error_mask_file.name, "rb") as handle:
            served = np.asarray(PILImage.open(handle)) > 127
        rows, cols = np.nonzero(served)
        make_clicked_session(study, round=built.round, clicks=[(target, cols[0] + 0.5, rows[0] + 0.5)])
    out = tmp_path / "export"
    rclicks_export(study_ids=[study.pk], out_dir=out)
    return out, folder, corrections


def test_rebuilt_error_masks_are_byte_identical_to_the_ones_workers_were_shown(two_round_export):
    out, folder, corrections = two_round_export
    with open_export(out) as export:
        assert [d.name for d in export.datasets] == ["Orchard v1"]
        dataset = open_dataset(folder, "folder", name=export.datasets[0].name)
        masks = export.prev_masks_dir(dataset.name)
        tasks = group_tasks(read_clicks_csv(export.clicks_csv), dataset, prev_masks_dir=masks)
        samples = {sample.key: sample for sample in dataset.samples}
        served = {t.full_stem: default_storage.open(t.error_mask_file.name, "rb").read() for t in corrections}
        later = [task for task in tasks if task.click_type != "first"]
        assert sorted(task.full_stem for task in later) == sorted(served)
        differs_without_rule = 0
        for task in later:
            assert task.model_type == "speckle"  # read back from the model_name column
            rule = export.min_error_area_px(task.full_stem)
            assert rule == MIN_AREA
            rebuilt = error_mask(task, samples[task.key], masks, min_error_area_px=rule)
            assert mask_png_bytes(rebuilt) == served[task.full_stem], (
                f"{task.full_stem}: not what workers saw"
            )
            plain = error_mask(task, samples[task.key], masks)
            differs_without_rule += int(mask_png_bytes(plain) != served[task.full_stem])
        # the study is one where the rule matters: without it every region gains the small components back
        assert differs_without_rule == len(later)


def test_the_clicks_csv_keeps_the_rclicks_model_vocabulary(two_round_export):
    out, _, corrections = two_round_export
    frame = read_clicks_csv(out / "clicks.csv")
    later = frame[frame["click_type"] != "first"]
    assert len(later) == len(corrections)
    assert set(later["model_type"]) == {""} and set(later["model_name"]) == {"speckle"}
    assert set(frame.loc[frame["click_type"] == "first", "model_name"]) == {""}
    manifest = json.loads((out / "manifest.json").read_text())
    assert {p["model_name"] for p in manifest["prev_mask_provenance"].values()} == {"speckle"}


def _benchmark(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "benchmark", "run", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
    )


RUN = ["--method", "embedded", "--groups", "1", "--click-model", "dt", "--max-clicks", "2", "--heatmaps", "0",
       "--no-progress"]  # fmt: skip


def test_benchmark_run_on_the_zipped_export_takes_the_manifests_name_and_gives_user_and_sample_iou(
    two_round_export, tmp_path
):
    out, folder, _ = two_round_export
    archive = tmp_path / "study-rclicks.zip"
    with zipfile.ZipFile(archive, "w") as handle:  # as the study page's download holds it
        for path in sorted(out.rglob("*")):
            if path.is_file():
                handle.write(path, path.relative_to(out).as_posix())
    runs = tmp_path / "runs"
    done = _benchmark(
        *RUN, "--dataset", str(folder), "--export", str(archive), "--out", str(runs), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads((runs / "embedded" / "Orchard v1" / "summary.json").read_text())
    assert summary["dataset"] == "Orchard v1" and summary["instances"] == 2
    assert summary["user_instances"] == 2
    assert 0.0 <= summary["user_iou1"] <= 1.0 and 0.0 <= summary["sample_iou1"] <= 1.0
    assert summary["clicks_source"]["export_dataset"] == "Orchard v1"
    assert summary["clicks_source"]["export_content_hash"] == summary["dataset_hash"]
    assert "User IoU@1" in done.stdout and "Sample IoU@1" in done.stdout


def test_benchmark_run_refuses_an_export_of_other_content_and_clicks_of_no_instance(
    two_round_export, tmp_path
):
    out, _, _ = two_round_export
    other = draw_dataset_folder(tmp_path / "other", stems=["plum"], size=SIZE, seed=9)
    runs = tmp_path / "runs"
    done = _benchmark(*RUN, "--dataset", str(other), "--export", str(out), "--out", str(runs), cwd=tmp_path)
    assert done.returncode == 2
    assert "is not the dataset of the export" in done.stderr and "'Orchard v1'" in done.stderr
    assert "Pass --dataset the folder that dataset was imported from" in done.stderr
    # a bare clicks.csv on a folder whose instances it does not name: refused, not a run without User IoU
    done = _benchmark(*RUN, "--dataset", str(other), "--layout", "folder", "--clicks", str(out / "clicks.csv"),
                      "--out", str(runs), cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2, done.stdout
    assert "no first-round click matches an instance of dataset 'other'" in done.stderr
    assert "['Orchard v1']" in done.stderr and "--name" in done.stderr
    assert not (runs / "embedded" / "other" / "summary.json").exists()
