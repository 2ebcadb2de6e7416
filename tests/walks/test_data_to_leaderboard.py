"""The researcher's walk of issue 33, from data to leaderboard, across every component as a user goes:

import a dataset from the browser (an archive of three GrabCut images, imported by the Celery worker), create
and publish a study on it in the researcher area, a worker plays the batch in the player (another browser
context, clicks inside each target), the worker validates it, the researcher downloads the RClicks export,
``python -m benchmark run --export`` benchmarks it in a process of its own (the export's manifest names the
dataset; the real clicks give User IoU@1), ``python -m benchmark publish`` sends the run over HTTP, and the
researcher's leaderboard shows it marked local, unverified, with the dataset's content hash the export named.
Screenshots: var/screenshots/walk-*.png.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image as PILImage

from tests.annotation_ui.driver import (
    ClickPlan,
    open_player,
    play_trial,
    press_start,
    wait_finished,
    wait_for,
    wait_start_enabled,
)
from tests.collector.test_services_dataset_imports import zip_folder
from tests.factories import make_researcher
from tests.support.researcher_login import researcher_log_in

pytestmark = [
    pytest.mark.browser,
    pytest.mark.celery,
    pytest.mark.dataset,
    pytest.mark.django_db(transaction=True),
]

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = PROJECT_ROOT / "var" / "screenshots"


def _shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"walk-{name}.png"), full_page=True)


def _inside(trial) -> ClickPlan:
    """The point of the trial's target deepest inside its mask, as a fraction of the image (what the player's
    canvas shows whole)."""
    mask = np.asarray(PILImage.open(trial.target.instance.mask_file.path).convert("L")) > 127
    depth = cv2.distanceTransform(mask.astype(np.uint8), cv2.DIST_L2, 5)
    row, col = np.unravel_index(int(np.argmax(depth)), depth.shape)
    height, width = mask.shape
    return ClickPlan(fx=(col + 0.5) / width, fy=(row + 0.5) / height)


def _run(args: list[str], *, timeout: int = 600) -> subprocess.CompletedProcess:
    """A command as a user runs it: its own process, no Django settings, the project as working directory."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")}
    return subprocess.run(
        [sys.executable, *args], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_from_a_dataset_archive_to_the_leaderboard(
    chromium, live_server, celery_worker, settings, grabcut3, tmp_path
):
    from collector.models import Session, Study
    from evaluation.models import LocalRun

    settings.MEDIA_ROOT = tmp_path / "media"
    settings.ALLOWED_HOSTS = ["localhost", "127.0.0.1"]
    settings.PUBLIC_BASE_URL = live_server.url  # what the study's links name, as a deployment sets it
    celery_worker.follow_media_root()
    make_researcher("alice")
    researcher = chromium.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    page = researcher.new_page()
    researcher_log_in(page, live_server.url, "alice")

    # 1. the dataset, from an archive uploaded on the import page (the worker imports it)
    archive = tmp_path / "GrabCut.zip"
    archive.write_bytes(zip_folder(grabcut3))
    page.click("text=Datasets")
    page.click("#import-dataset")
    page.set_input_files("#id_archive-archive", str(archive))
    page.select_option("#id_archive-layout", "grabcut")
    page.fill("#id_archive-name", "GrabCut walk")
    page.click("#archive-import button[type=submit]")
    page.wait_for_selector("#import-result, #import-error", timeout=120_000)
    assert page.inner_text("#result-dataset") == "GrabCut walk", page.inner_text("#import-status")
    _shot(page, "1-imported")

    # 2. a study on it, from the import's "New study" link; short phases; published as plain links
    page.click("#new-study")
    page.wait_for_selector("#study-form")
    page.fill("input[name=name]", "Walk study")
    for name in ("image_ms", "target_ms", "blocked_ms"):
        page.fill(f"input[name={name}]", "300")
    assert page.input_value("input[name=batch_size]") == "3"  # the batch this dataset can give
    page.click("#study-form button[type=submit]")
    page.wait_for_selector("#study-actions")
    page.click("#study-actions button:has-text('Publish')")
    page.wait_for_selector("#study-state:has-text('published')")
    study = Study.objects.get(name="Walk study")
    link = page.get_attribute("#annotator-links input.link-url >> nth=0", "value")
    assert link and link.startswith(f"{live_server.url}/s/"), link

    # 3. a worker plays the batch from the study's own link, clicking inside each target
    worker = chromium.new_context(viewport={"width": 1600, "height": 1000})
    player = worker.new_page()
    open_player(player, link)
    wait_start_enabled(player)
    session = Session.objects.get(study=study)
    trials = list(session.trials.select_related("target__instance").order_by("position"))
    assert len(trials) == 3
    press_start(player)
    for trial in trials:
        play_trial(player, trial.position, _inside(trial), touch=False, blocked_in=())
    wait_finished(player)
    worker.close()
    wait_for(
        lambda: Session.objects.get(pk=session.pk).validated_at is not None,
        timeout_s=120,
        what="the validation",
    )
    session.refresh_from_db()
    assert session.validity == Session.Validity.COUNTED, session.rejection_reason

    # 4. the researcher downloads the RClicks export from the study page
    page.goto(f"{live_server.url}/researcher/studies/{study.pk}/")
    with page.expect_download() as download:
        page.click("#export-rclicks")
    export = tmp_path / "rclicks.zip"
    download.value.save_as(export)
    with zipfile.ZipFile(export) as bundle:
        manifest = json.loads(bundle.read(next(n for n in bundle.namelist() if n.endswith("manifest.json"))))
        clicks = bundle.read(next(n for n in bundle.namelist() if n.endswith("clicks.csv"))).decode()
    (entry,) = manifest["datasets"]
    assert entry["name"] == "GrabCut walk" and len(entry["content_hash"]) == 64
    assert len(io.StringIO(clicks).readlines()) == 1 + 3  # a header and the worker's three clicks

    # 5. the benchmark on the export, in a process of its own: the manifest names the dataset
    out = tmp_path / "runs"
    ran = _run(
        [
            "-m",
            "benchmark",
            "run",
            "--method",
            "embedded",
            "--option",
            "work_long_side_px=96",
            "--dataset",
            str(grabcut3),
            "--export",
            str(export),
            "--click-model",
            "dt",
            "--groups",
            "2",
            "--max-clicks",
            "3",
            "--seed",
            "7",
            "--heatmaps",
            "0",
            "--no-progress",
            "--out",
            str(out),
        ]  # fmt: skip
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    run_dir = out / "embedded" / "GrabCut walk"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["dataset_hash"] == entry["content_hash"], "the benchmark's dataset is the export's"
    assert summary["clicks_source"]["export_dataset"] == "GrabCut walk"
    assert summary["user_instances"] == 3, "each of the worker's clicks is a User IoU@1 sample"
    assert 0.0 < summary["user_iou1"] <= 1.0 and 0.0 < summary["sample_iou1"] <= 1.0, summary

    # 6. published over HTTP with an evaluation key the researcher creates on the leaderboard page
    page.goto(f"{live_server.url}/eval/leaderboard/")
    page.fill("input[name=name]", "walk")
    page.click("button:has-text('Create key')")
    key = page.inner_text("ul.messages").rsplit(": ", 1)[-1].strip()
    assert key.startswith("ek_"), key
    published = _run(["-m", "benchmark", "publish", str(run_dir), "--host", live_server.url, "--key", key])
    assert published.returncode == 0, published.stderr[-3000:]

    # 7. the leaderboard shows the run, local and unverified, with the export's dataset hash
    local = LocalRun.objects.get()
    assert local.provenance["dataset_hash"] == entry["content_hash"]
    page.goto(f"{live_server.url}/eval/leaderboard/")
    row = page.locator('tr[data-source="local"]')
    assert row.count() == 1
    assert row.locator("td.source").inner_text() == "local, unverified"
    assert entry["content_hash"] in row.locator("td.source").get_attribute("title")
    _shot(page, "7-leaderboard")
    researcher.close()
