"""Published benchmarks (issue 33.2/33.3): a protocol the operator fixes, refused values named; the health endpoint;
a local ``benchmark run`` published with ``python -m benchmark publish`` (and the page's upload) shown as "local,
unverified" with its provenance; a leaderboard across participants with their display names, in Chromium."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.dataset]
PROJECT_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def api(eval_key):
    from django.core.cache import cache
    from rest_framework.test import APIClient

    cache.clear()  # the throttle's counts
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"EvalKey {eval_key}")
    return client


def publish_benchmark(researcher, dataset, **protocol):
    from evaluation.publishing import benchmark_publish

    return benchmark_publish(
        user=researcher, dataset=dataset, title=protocol.pop("title", "GrabCut three"), **protocol
    )


def local_benchmark_run(
    dataset_folder: Path, out: Path, *, seed: int, groups: int = 2, max_clicks: int = 3
) -> Path:
    """``python -m benchmark run`` on the folder (in this process); its run folder."""
    from benchmark.cli import main

    argv = ["run", "--method", "embedded", "--option", "work_long_side_px=96", "--option", "grabcut_iterations=1",
            "--dataset", str(dataset_folder), "--click-model", "dt", "--groups", str(groups), "--max-clicks",
            str(max_clicks), "--seed", str(seed), "--heatmaps", "0", "--no-progress", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    return out / "embedded" / "GrabCut"


@pytest.mark.django_db
def test_a_benchmark_fixes_its_protocol_and_refuses_every_value_that_differs_naming_it(
    api, researcher, eval_dataset, eval_key, wsgi_transport
):
    from benchmark.remote import RemoteError
    from benchmark.session import ClickSession
    from evaluation.models import EvaluationRun

    benchmark = publish_benchmark(researcher, eval_dataset, max_clicks=2, seed=5, groups=2)
    refused = {
        "one value": ({"max_clicks": 3}, ["max_clicks=3 (the benchmark's: 2)"]),
        "several": ({"max_clicks": 4, "seed": 0, "max_time_s": 9}, ["max_clicks=4", "seed=0 (the benchmark's: 5)",
                                                                    "max_time_s=9 (the benchmark's: None)"]),
        "clicker": ({"clicker": "replay"}, ["clicker='replay' (the benchmark's clickers: ['baseline', 'group'])"]),
        "groups": ({"clicker": "group", "group_bounds": [[0, 1]]}, ["group_bounds=[[0, 1]] (the benchmark's: [[0.0, 0.5], [0.5, 1.0]])"]),
        "click model": ({"clicker": "group", "click_model": "sm"}, ["click_model='sm' (the benchmark's: 'dt')"]),
        "dataset": ({"dataset": "Other"}, ["dataset='Other' (the benchmark's: 'GrabCut')"]),
        "every click": ({"stop_at_target": True}, ["stop_at_target=True (the benchmark's: False)"]),
    }  # fmt: skip
    for name, (sent, words) in refused.items():
        response = api.post("/api/eval/runs/", {"benchmark": benchmark.slug, **sent}, format="json")
        assert response.status_code == 400 and response.json()["code"] == "protocol_mismatch", (
            name,
            response.json(),
        )
        for word in words:
            assert word in response.json()["message"], (name, response.json()["message"])
    assert not EvaluationRun.objects.exists()
    unknown = api.post("/api/eval/runs/", {"benchmark": "nope"}, format="json")
    assert unknown.status_code == 400 and benchmark.slug in unknown.json()["message"]

    # the benchmark's own values, sent or left out, are taken
    same = api.post(
        "/api/eval/runs/", {"benchmark": benchmark.slug, "seed": 5, "clicker": "group"}, format="json"
    )
    assert same.status_code == 201, same.content
    run = same.json()
    assert (run["benchmark"], run["max_clicks"], run["seed"], run["clicker"], run["group_bounds"]) == (
        benchmark.slug, 2, 5, "group", [[0.0, 0.5], [0.5, 1.0]])  # fmt: skip

    # the remote session sends only what it was given: a benchmark run with defaults, a refused one naming it
    where = dict(host="http://testserver", key=eval_key, transport=wsgi_transport, benchmark=benchmark.slug)
    with ClickSession(**where) as sess:
        assert sess.run_config["max_clicks"] == 2 and sess.run_config["seed"] == 5
        while sess.next():
            sample, _, _ = sess.get_clicks()
            sess.submit_masks(np.zeros((sample.height, sample.width), bool))
    assert len(sess.get_report()) == 3 * 2
    with pytest.raises(RemoteError, match=r"max_clicks=20 \(the benchmark's: 2\)"):
        ClickSession(**where, max_clicks=20).__enter__()


@pytest.mark.django_db
def test_the_health_endpoint_says_what_the_server_is_without_a_key(client, researcher, eval_dataset):
    from benchmark.provenance import code_version

    publish_benchmark(researcher, eval_dataset, title="Health check")
    response = client.get("/api/eval/health/")
    assert response.status_code == 200
    assert response.json() == {"service": "clicklab-evaluation", "api_version": 1, "code_version": code_version(),
                               "status": "ok", "database": "ok", "benchmarks": ["health-check"]}  # fmt: skip


@pytest.mark.django_db
def test_a_published_local_run_appears_marked_local_unverified_with_its_provenance(
    researcher, eval_dataset, eval_key, grabcut3, wsgi_transport, client, tmp_path, capsys
):
    from benchmark.provenance import code_version
    from benchmark.publish import main as publish
    from evaluation.models import LocalRun

    run_dir = local_benchmark_run(grabcut3, tmp_path / "runs", seed=42)
    summary = json.loads((run_dir / "summary.json").read_text())
    host = ["--host", "http://testserver", "--key", eval_key]

    assert (
        publish([str(tmp_path / "runs"), *host], transport=wsgi_transport) == 0
    )  # the --out folder: every run
    assert "published: embedded on GrabCut (local, unverified, your runs): http://testserver/eval/local/" in (
        capsys.readouterr().out
    )
    assert publish([str(run_dir), *host], transport=wsgi_transport) == 0  # again: the same run
    assert "already published" in capsys.readouterr().out and LocalRun.objects.count() == 1
    local = LocalRun.objects.get()
    assert local.provenance["dataset_hash"] == summary["dataset_hash"] and local.provenance["seed"] == 42
    assert local.provenance["code_version"] == code_version() and local.timing["time_curve_base"]["seconds"]

    client.force_login(researcher)
    page = client.get("/eval/leaderboard/").content.decode()
    assert "No finished runs yet" not in page.split("Your runs")[1].split("Your display name")[0]
    assert 'data-source="local"' in page and "local, unverified" in page and summary["dataset_hash"] in page
    detail = client.get(f"/eval/local/{local.pk}/").content.decode()
    assert "Time AuC" in detail and "miou-plot" in detail and code_version() in detail

    # to a benchmark: its protocol is checked, the value that differs named
    benchmark = publish_benchmark(researcher, eval_dataset, max_clicks=3, seed=7, groups=2)
    assert publish([str(run_dir), *host, "--benchmark", benchmark.slug], transport=wsgi_transport) == 1
    assert "--seed=42 (the benchmark's: 7)" in capsys.readouterr().err
    matching = publish_benchmark(researcher, eval_dataset, title="Seed 42", max_clicks=3, seed=42, groups=2)
    assert publish([str(run_dir), *host, "--benchmark", matching.slug], transport=wsgi_transport) == 0
    assert LocalRun.objects.filter(benchmark=matching).count() == 1
    board = client.get(f"/eval/b/{matching.slug}/").content.decode()
    assert "local, unverified" in board and "embedded" in board

    # the page's upload takes the same files, and says what is wrong with others
    with open(run_dir / "summary.json", "rb") as handle:
        response = client.post("/eval/local-runs/upload/", {"summary": handle}, follow=True)
    assert "Already published: embedded on GrabCut" in response.content.decode()
    bad = tmp_path / "summary.json"
    bad.write_text(json.dumps({**summary, "dataset_hash": "not-a-hash"}))
    with open(bad, "rb") as handle:
        response = client.post("/eval/local-runs/upload/", {"summary": handle}, follow=True)
    assert "summary.dataset_hash must be" in response.content.decode() and LocalRun.objects.count() == 2


def _remote_run(host: str, key: str, benchmark: str, predictor, **config) -> None:
    from benchmark.session import ClickSession

    with ClickSession(host=host, key=key, benchmark=benchmark, **config) as sess:
        while sess.next():
            sample, clicks, is_new = sess.get_clicks()
            if is_new:
                embedding = predictor.encode(sample.load_image())
            sess.submit_masks(predictor.predict(embedding, clicks, sess.previous_logits))


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_leaderboard_shows_two_participants_and_a_published_local_run_marked_in_chromium(
    chromium, live_server, eval_dataset, grabcut3, fast_predictor, tmp_path
):
    from evaluation.publishing import participant_rename
    from evaluation.services import create_key
    from tests.factories import make_researcher
    from tests.support.researcher_login import researcher_log_in

    alice, bob = make_researcher("alice"), make_researcher("bob")
    participant_rename(user=alice, display_name="Alice's lab")
    alice_key, bob_key = create_key(user=alice)[1], create_key(user=bob)[1]
    benchmark = publish_benchmark(alice, eval_dataset, title="GrabCut three", max_clicks=3, seed=42, groups=2)
    _remote_run(
        live_server.url, alice_key, benchmark.slug, fast_predictor, clicker="group", method="alice-net"
    )
    _remote_run(live_server.url, bob_key, benchmark.slug, fast_predictor, method="bob-net")
    run_dir = local_benchmark_run(grabcut3, tmp_path / "runs", seed=42)
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")}
    published = subprocess.run(  # the CLI as a user runs it: its own process, HTTP to the server
        [sys.executable, "-m", "benchmark", "publish", str(run_dir), "--host", live_server.url, "--key", alice_key,
         "--benchmark", benchmark.slug], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert published.returncode == 0, published.stderr
    local_url = published.stdout.split(": ")[-1].strip()

    page = chromium.new_page()
    try:
        page.goto(f"{live_server.url}/eval/b/{benchmark.slug}/")  # the public board: no login
        rows = page.locator("section.board tbody tr")
        assert rows.count() == 3
        cells = [(rows.nth(i).locator("td.participant").inner_text(), rows.nth(i).locator("td.source").inner_text())
                 for i in range(3)]  # fmt: skip
        assert sorted(cells) == [("Alice's lab", "local, unverified"), ("Alice's lab", "server, verified"),
                                 ("bob", "server, verified")]  # fmt: skip
        local_row = page.locator('tr[data-source="local"]')
        assert json.loads((run_dir / "summary.json").read_text())["dataset_hash"] in local_row.locator(
            "td.source").get_attribute("title")  # fmt: skip
        group_row = page.locator("tr", has_text="alice-net")
        assert group_row.locator("td.delta").nth(1).inner_text().endswith("%")  # ΔGR of the group run
        assert page.locator("svg[aria-label='mIoU vs time']").count() == 1
        shots = PROJECT_ROOT / "var" / "test-logs"
        shots.mkdir(parents=True, exist_ok=True)
        page.set_viewport_size({"width": 1400, "height": 900})
        page.screenshot(path=str(shots / "leaderboard-public.png"), full_page=True)

        page.goto(local_url)
        assert "local, unverified" in page.locator("p.source").inner_text()
        assert page.locator("td.time-auc").inner_text() != "—"

        researcher_log_in(
            page, live_server.url, "bob"
        )  # a participant's own leaderboard shows the same board
        page.goto(f"{live_server.url}/eval/leaderboard/")
        board = page.locator(f"section.board[data-board='{benchmark.title}']")
        assert board.locator("tbody tr").count() == 3 and board.locator("td.source.unverified").count() == 1
        page.screenshot(path=str(shots / "leaderboard-researcher.png"), full_page=True)
    finally:
        page.close()
