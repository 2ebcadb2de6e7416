"""The quality model Mr (collector.selectors.corrective_quality; issues 17, 34.1): features f1-f5 + time, a
random forest of the true IoU; its held-out and cross-validated Spearman; quality.json naming how it was trained
and whether to trust it; and the exports that keep exactly the top N % by its estimate (the function, the
command and the study page's zip download). The campaign is worked by the seed-001 simulator."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest
from django.core.management import CommandError, call_command
from scipy.stats import spearmanr

from collector.models import CorrectiveItem
from collector.selectors.corrective_quality import (
    FEATURES,
    MIN_TRUSTED_INSTANCES,
    MODEL_PARAMETERS,
    QualityModelError,
    kept_count,
    quality_ranking,
)
from collector.services.corrective_simulation import corrective_simulate
from exports.corrective import corrective_export
from exports.selectors import ExportError
from tests.factories import make_dataset, make_researcher, make_study

# scikit-learn over stored rows (slow); the same on either backend: the PostgreSQL run only
pytestmark = [pytest.mark.django_db, pytest.mark.one_backend]


@pytest.fixture
def simulated(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    dataset = make_dataset(tmp_path, n_images=8, size=(96, 72))
    study = make_study(
        dataset,
        publish=True,
        kind="corrective",
        batch_size=8,
        quota_pc=1,
        corrective_rounds=2,
        corrective_clicks_per_round=2,
    )
    corrective_simulate(study_id=study.pk, seed=3, max_sessions=1, min_region_px=1, noise_sigma_px=6.0)
    return study


def test_mr_ranks_every_finished_instance_and_reports_its_heldout_and_cross_validated_spearman(simulated):
    ranking = quality_ranking(study_id=simulated.pk, holdout=0.5, seed=1)
    finished = set(CorrectiveItem.objects.filter(session__study=simulated).values_list("pk", flat=True))
    assert set(ranking.predicted) == finished and len(ranking.heldout) == 4 and ranking.n_train == 4
    assert not set(ranking.heldout) & set(ranking.train)
    assert all(0.0 <= value <= 1.0 for value in ranking.predicted.values())
    assert set(ranking.importances) == set(FEATURES) and sum(ranking.importances.values()) == pytest.approx(
        1.0
    )
    truth = [ranking.true_iou[i] for i in ranking.heldout]
    guessed = [ranking.predicted[i] for i in ranking.heldout]
    expected = spearmanr(guessed, truth).statistic if np.ptp(truth) > 0 and np.ptp(guessed) > 0 else np.nan
    if np.isnan(expected):  # constant truth or constant predictions: no rank correlation
        assert ranking.spearman is None
    else:
        assert ranking.spearman == pytest.approx(expected)
    assert (ranking.cv.folds, ranking.cv.repeats, len(ranking.cv.spearman_per_repeat)) == (5, 3, 3)
    if ranking.cv.defined:
        assert ranking.cv.mean == pytest.approx(np.mean(ranking.cv.defined))
        assert ranking.cv.sd == pytest.approx(np.std(ranking.cv.defined))
    # 8 instances: far too few, and it says so with the figure that makes it so
    assert not ranking.trusted and MIN_TRUSTED_INSTANCES > 8
    assert ranking.verdict.startswith("Too few instances to trust: Mr was trained and checked on 8 instances")
    assert "±0.74 one time in 20" in ranking.verdict  # 1.96 / sqrt(7)
    assert (
        quality_ranking(study_id=simulated.pk, holdout=0.5, seed=1).predicted == ranking.predicted
    )  # seeded


def test_the_export_keeps_exactly_the_top_percent_by_mr_and_quality_json_names_its_training(
    simulated, tmp_path
):
    ranking = quality_ranking(study_id=simulated.pk)  # the export's own fit: default hold-out and seed
    for top_percent, kept in ((25, 2), (31.25, 3), (100, 8), (1, 1)):
        assert kept_count(8, top_percent) == kept
        out = tmp_path / f"top{top_percent}"
        result = corrective_export(study_id=simulated.pk, out_dir=out, top_percent=top_percent)
        coco = json.loads((out / "masks.json").read_text())
        best = ranking.ordered()[:kept]
        assert result.annotations == kept and {a["clicklab"]["item_id"] for a in coco["annotations"]} == set(
            best
        )
        assert min(ranking.predicted[i] for i in best) >= max(
            (ranking.predicted[i] for i in ranking.predicted if i not in best), default=-1
        ), "nothing left out scores above what was kept"
        assert all(a["clicklab"]["predicted_iou"] == ranking.predicted[a["id"]] for a in coco["annotations"])
        assert len(list((out / "masks").iterdir())) == kept
        quality = json.loads((out / "quality.json").read_text())
        assert (quality["top_percent"], quality["kept"], quality["of"], quality["kept_ids"]) == (
            top_percent, kept, 8, best,
        )  # fmt: skip
    assert kept_count(8, 30) == 2 and kept_count(8, 50) == 4  # 2.4 -> 2; 4

    assert quality["model"] == "sklearn.ensemble.RandomForestRegressor"
    assert quality["parameters"] == {**MODEL_PARAMETERS, "random_state": 0}
    assert quality["features"] == list(FEATURES) and "ground-truth mask" in quality["target"]
    split = quality["split"]
    assert (split["holdout"], split["seed"], split["n_train"] + split["n_heldout"]) == (0.3, 0, 8)
    assert split["heldout_ids"] == ranking.heldout and split["train_ids"] == ranking.train
    assert quality["spearman_heldout"] == ranking.spearman
    cv = quality["cross_validation"]
    assert (cv["folds"], cv["repeats"], cv["spearman_mean"], cv["spearman_sd"]) == (
        5, 3, ranking.cv.mean, ranking.cv.sd,
    )  # fmt: skip
    assert quality["instances_with_ground_truth"] == 8 and quality["trusted"] is False
    assert quality["verdict"].startswith("Too few instances to trust")


def test_the_command_and_the_study_pages_zip_keep_the_chosen_top_percent(simulated, tmp_path, client):
    out = io.StringIO()
    call_command("export_corrective", "--study", simulated.pk, "--out", tmp_path / "cmd", "--top-percent", "50",
                 stdout=out)  # fmt: skip
    assert (
        "kept the top 50 %: 4 of 8 by Mr" in out.getvalue() and "Too few instances to trust" in out.getvalue()
    )
    assert json.loads((tmp_path / "cmd" / "quality.json").read_text())["kept"] == 4
    with pytest.raises(CommandError, match="top_percent=0 must be above 0 and at most 100"):
        call_command(
            "export_corrective", "--study", simulated.pk, "--out", tmp_path / "bad", "--top-percent", "0"
        )

    owner = make_researcher("owner")
    simulated.owner = owner
    simulated.save(update_fields=["owner"])
    client.force_login(owner)
    response = client.get(f"/exports/studies/{simulated.pk}/corrective.zip?top_percent=25")
    assert response.status_code == 200, response.content
    assert response["Content-Disposition"].endswith('corrective-top25.zip"')
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    coco = json.loads(archive.read("masks.json"))
    quality = json.loads(archive.read("quality.json"))
    assert len(coco["annotations"]) == quality["kept"] == 2
    assert {a["id"] for a in coco["annotations"]} == set(quality_ranking(study_id=simulated.pk).ordered()[:2])
    whole = zipfile.ZipFile(
        io.BytesIO(b"".join(client.get(f"/exports/studies/{simulated.pk}/corrective.zip").streaming_content))
    )
    assert (
        len(json.loads(whole.read("masks.json"))["annotations"]) == 8
        and "quality.json" not in whole.namelist()
    )
    for bad in ("0", "101", "lots", "nan"):
        refused = client.get(f"/exports/studies/{simulated.pk}/corrective.zip?top_percent={bad}")
        assert refused.status_code == 400 and f"top_percent='{bad}'" in refused.content.decode()


def test_too_few_instances_are_refused_by_number(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    study = make_study(
        make_dataset(tmp_path, n_images=2, size=(96, 72)), publish=True, kind="corrective", batch_size=2
    )
    corrective_simulate(study_id=study.pk, max_sessions=1, min_region_px=1)
    with pytest.raises(QualityModelError, match="has 2 finished instance.*needs at least 6"):
        quality_ranking(study_id=study.pk)
    with pytest.raises(ExportError, match="has 2 finished instance"):
        corrective_export(study_id=study.pk, out_dir=tmp_path / "out", top_percent=50)
    with pytest.raises(QualityModelError, match="top_percent=0"):
        kept_count(8, 0)


def _ranking(n: int, cv: list[float | None]):
    from collector.selectors.corrective_quality import CrossValidation, QualityRanking

    return QualityRanking(predicted={i: 0.5 for i in range(n)}, true_iou={i: 0.5 for i in range(n)}, train=[],
                          heldout=[], spearman=None, cv=CrossValidation(folds=5, repeats=len(cv), spearman_per_repeat=cv),
                          importances={}, holdout=0.3, seed=0)  # fmt: skip


@pytest.mark.parametrize(
    ("n", "cv", "trusted", "start"),
    [
        (5, [1.0, 1.0, 1.0], False, "Too few instances to trust: Mr was trained and checked on 5 instances"),
        (21, [0.6, 0.65, 0.7], False, "Too few instances to trust fully"),  # beyond ±0.44, but only 21
        (50, [0.1, 0.2, 0.15], False, "Mr ranks no better than chance here"),  # within ±0.28
        (50, [None, None, None], False, "Mr cannot be judged"),
        (
            50,
            [0.5, 0.6, 0.55],
            True,
            "Mr ranks better than chance: cross-validated Spearman 0.55 ± 0.04 on 50",
        ),
    ],
)
def test_the_verdict_says_plainly_whether_to_trust_mr(n, cv, trusted, start):
    ranking = _ranking(n, cv)
    assert ranking.trusted is trusted and ranking.verdict.startswith(start), ranking.verdict
    assert ranking.chance_band == pytest.approx(1.96 / np.sqrt(n - 1))
