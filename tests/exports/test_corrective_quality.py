"""exports.corrective_quality: the quality model Mr (features f1-f5 + time, random forest), its held-out Spearman
correlation with the true IoU, and the top-N % export; the campaign is worked by the seed-001 simulator."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import spearmanr

from collector.models import CorrectiveItem
from collector.services.corrective_simulation import corrective_simulate
from exports.corrective import corrective_export
from exports.corrective_quality import FEATURES, quality_ranking, top_items
from exports.selectors import ExportError
from tests.factories import make_dataset, make_study

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


def test_mr_ranks_every_finished_instance_and_reports_its_heldout_spearman(simulated, tmp_path):
    ranking = quality_ranking(study_id=simulated.pk, holdout=0.5, seed=1)
    finished = set(CorrectiveItem.objects.filter(session__study=simulated).values_list("pk", flat=True))
    assert set(ranking.predicted) == finished and len(ranking.heldout) == 4 and ranking.n_train == 4
    assert all(0.0 <= value <= 1.0 for value in ranking.predicted.values())
    assert set(ranking.importances) == set(FEATURES) and sum(ranking.importances.values()) == pytest.approx(
        1.0
    )
    truth = [ranking.true_iou[i] for i in ranking.heldout]
    guessed = [ranking.predicted[i] for i in ranking.heldout]
    expected = spearmanr(guessed, truth).statistic if np.ptp(truth) > 0 else float("nan")
    if np.isnan(expected):  # constant truth or constant predictions (seen in CI): no rank correlation
        assert ranking.spearman is None
    else:
        assert ranking.spearman == pytest.approx(expected)

    best = top_items(ranking, top_percent=25)
    assert best == set(sorted(ranking.predicted, key=lambda i: -ranking.predicted[i])[:2])
    best = top_items(quality_ranking(study_id=simulated.pk), top_percent=25)  # the export's own fit
    result = corrective_export(study_id=simulated.pk, out_dir=tmp_path / "top", top_percent=25)
    coco = json.loads((tmp_path / "top" / "masks.json").read_text())
    assert result.annotations == 2 and {a["clicklab"]["item_id"] for a in coco["annotations"]} == best
    assert all(a["clicklab"]["predicted_iou"] is not None for a in coco["annotations"])
    quality = json.loads((tmp_path / "top" / "quality.json").read_text())
    assert quality["kept"] == 2 and quality["n_train"] + quality["heldout"] == 8
    with pytest.raises(ExportError, match="top_percent=0"):
        top_items(ranking, top_percent=0)


def test_too_few_instances_are_refused_by_number(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    study = make_study(
        make_dataset(tmp_path, n_images=2, size=(96, 72)), publish=True, kind="corrective", batch_size=2
    )
    corrective_simulate(study_id=study.pk, max_sessions=1)
    with pytest.raises(ExportError, match="has 2 finished instance"):
        quality_ranking(study_id=study.pk)
