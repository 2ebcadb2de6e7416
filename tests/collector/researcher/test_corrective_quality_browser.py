"""Issue 34.1 in a real Chromium against the live server: a corrective campaign's quality ranking (Mr) on its
researcher pages, sorted by estimated quality beside the true IoU, with how Mr was trained and whether to trust
it; and the study page's download keeping the top N %, checked in the downloaded zip. Screenshots go to
var/screenshots/researcher-quality-*.png."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

from collector.models import CorrectiveItem
from collector.selectors.corrective_quality import quality_ranking
from collector.services.corrective_simulation import corrective_simulate
from tests.factories import make_dataset, make_study
from tests.support.researcher_login import researcher_log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = Path(__file__).resolve().parents[3] / "var" / "screenshots"


@pytest.fixture
def campaign(tmp_path, settings, alice):
    settings.MEDIA_ROOT = tmp_path / "media"
    dataset = make_dataset(tmp_path, n_images=8, size=(96, 72))
    study = make_study(dataset, publish=True, owner=alice, name="Campaign with Mr", kind="corrective", batch_size=8,
                       quota_pc=1, corrective_rounds=2, corrective_clicks_per_round=2)  # fmt: skip
    corrective_simulate(study_id=study.pk, seed=3, max_sessions=1, min_region_px=1, noise_sigma_px=6.0)
    return study


def test_the_quality_ranking_and_the_top_percent_download(chromium, live_server, campaign, tmp_path):
    context = chromium.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    page = context.new_page()
    try:
        researcher_log_in(page, live_server.url, "alice")
        page.goto(f"{live_server.url}/researcher/studies/{campaign.pk}/")
        page.wait_for_selector("#corrective-download")
        page.click("#quality-ranking")
        page.wait_for_selector("#quality-rows")
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shot = SCREENSHOTS / "researcher-quality-ranking.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000

        rows = page.eval_on_selector_all(
            "#quality-rows tbody tr",
            "rows => rows.map(r => ({item: +r.dataset.item, estimate: +r.querySelector('.estimate').textContent,"
            " truth: +r.querySelector('.truth').textContent}))",
        )
        assert len(rows) == 8
        estimates = [row["estimate"] for row in rows]
        assert estimates == sorted(estimates, reverse=True), "sorted by estimated quality, the best first"
        stored = dict(
            CorrectiveItem.objects.filter(session__study=campaign).values_list("pk", "current_mask__iou")
        )
        assert all(abs(row["truth"] - stored[row["item"]]) <= 0.0005 for row in rows), (
            "the true IoU beside it"
        )
        ranking = quality_ranking(study_id=campaign.pk)
        assert [row["item"] for row in rows] == ranking.ordered()
        verdict = page.inner_text("#quality-verdict")
        assert verdict.startswith("Too few instances to trust: Mr was trained and checked on 8 instances")
        training = page.inner_text("#quality-training")
        assert "sklearn.ensemble.RandomForestRegressor" in training and "n_estimators=50" in training
        assert "random_state=0" in training and "IoU of the instance's final mask" in training
        assert "6 instances to learn from, 2 held out (hold-out share 0.3, seed 0)" in training
        assert page.inner_text("#quality-heldout") == ", ".join(map(str, ranking.heldout))
        assert "3 shuffles" in page.inner_text("#quality-cv") and "±0.74" in page.inner_text("#quality-cv")

        # the study page's download with a chosen N: the zip keeps exactly the top 25 % (2 of 8)
        page.goto(f"{live_server.url}/researcher/studies/{campaign.pk}/")
        page.fill("#corrective-download #top-percent", "25")
        page.locator("#corrective-download").screenshot(
            path=str(SCREENSHOTS / "researcher-quality-download.png")
        )
        with page.expect_download() as download:
            page.click("#corrective-download button[type=submit]")
        path = tmp_path / "top25.zip"
        download.value.save_as(path)
        archive = zipfile.ZipFile(io.BytesIO(path.read_bytes()))
        coco = json.loads(archive.read("masks.json"))
        quality = json.loads(archive.read("quality.json"))
        assert [a["clicklab"]["item_id"] for a in coco["annotations"]] != []
        assert {a["clicklab"]["item_id"] for a in coco["annotations"]} == {row["item"] for row in rows[:2]}
        assert (quality["kept"], quality["of"], quality["split"]["heldout_ids"]) == (2, 8, ranking.heldout)
    finally:
        context.close()
