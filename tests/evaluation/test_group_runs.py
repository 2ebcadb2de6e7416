"""Clicking-group runs (clicker="group") on the evaluation server: the local ClickSession's clicks, groups and
random streams, maps computed by a real Celery worker, a run that survives a client crash and a worker
restart, group_bounds checked, and ΔSB/ΔGR/ΔHH on the leaderboard."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from .conftest import clear_sample_caches

VOLATILE = ["timing_s", "session_id"]
BOUNDS = [(0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0)]
GROUP = dict(clicker="group", click_model="dt", group_bounds=BOUNDS, max_clicks=2, seed=7)


@pytest.fixture
def groupset(tmp_path):
    """Two synthetic images with two objects each and an ignore band, imported as dataset 'groupset', and the
    same folder opened by the local benchmark loader."""
    from benchmark.datasets import open_dataset
    from tests.factories import make_dataset

    make_dataset(tmp_path, name="groupset", n_images=2, objects_per_image=2, ignore_band=True)
    return open_dataset(tmp_path / "groupset", "folder", name="groupset")


class GtDisks:
    """A trivial segmenter for the tests: the object pixels within ``radius_px`` of a positive click and
    farther than that from every negative click, so the IoU depends on where the clicks land."""

    def __init__(self, dataset, radius_px: float = 28.0) -> None:
        self.gt = {sample.key: sample.load_masks()[0] for sample in dataset.samples}
        self.radius_px = radius_px

    def __call__(self, sample, clicks) -> np.ndarray:
        gt = self.gt[sample.key]
        yy, xx = np.mgrid[0 : gt.shape[0], 0 : gt.shape[1]]
        near_pos, near_neg = np.zeros(gt.shape, bool), np.zeros(gt.shape, bool)
        for click in clicks:
            disk = (xx - click.x) ** 2 + (yy - click.y) ** 2 <= self.radius_px**2
            if click.is_positive:
                near_pos |= disk
            else:
                near_neg |= disk
        return gt & near_pos & ~near_neg


def run_session(predict, **where):
    from benchmark.session import ClickSession

    with ClickSession(**where) as sess:
        while sess.next():
            sample, clicks, _ = sess.get_clicks()
            sess.submit_masks(predict(sample, clicks))
    return sess.get_report(), sess.get_global_summary()


def remote(eval_key, wsgi_transport, **config):
    return dict(host="http://testserver", key=eval_key, transport=wsgi_transport, dataset="groupset",
                poll_timeout_s=120, **config)  # fmt: skip


@pytest.mark.celery
@pytest.mark.one_backend
@pytest.mark.django_db(transaction=True)
def test_group_runs_served_remotely_give_the_local_sessions_report_and_summary(
    groupset, eval_key, wsgi_transport, fast_predictor, celery_worker, settings
):
    import cv2

    from benchmark.session import ClickSession
    from evaluation.models import EvaluationRun

    settings.EVAL_GROUP_INLINE_MAX_PIXELS = (
        0  # every map and click in the Celery worker (large samples do that)
    )

    def embedded_script(**where):  # the user's script, the same locally and against the server
        cv2.setRNGSeed(0)  # OpenCV's GrabCut draws from OpenCV's global RNG: the same draws both times
        # the saliency click model reads the image: the server's decoded image must be the local loader's
        with ClickSession(**{**GROUP, "click_model": "sm"}, shuffle=True, **where) as sess:
            embedding = None
            while sess.next():
                sample, clicks, is_new = sess.get_clicks()
                if is_new:
                    embedding = fast_predictor.encode(sample.load_image())
                sess.submit_masks(fast_predictor.predict(embedding, clicks).probabilities)
        return sess.get_report(), sess.get_global_summary()

    local_report, local_summary = embedded_script(dataset=groupset)
    remote_report, remote_summary = embedded_script(**remote(eval_key, wsgi_transport, method="embedded"))

    assert len(local_report) == 4 * 4 * 2  # 4 instances x 4 groups x 2 clicks
    assert set(local_report["group"]) == {"G1", "G2", "G3", "G4"}
    pd.testing.assert_frame_equal(local_report.drop(columns=VOLATILE), remote_report.drop(columns=VOLATILE))
    for summary in (local_summary, remote_summary):  # the client's own timing differs between the runs
        (
            summary.pop("session_id"),
            summary.pop("seconds_per_click"),
            summary.pop("time_curve"),
            summary.pop("time_auc"),
        )
        for group in summary["groups"].values():
            group.pop("seconds_per_click"), group.pop("time_curve"), group.pop("time_auc")
    assert json.dumps(local_summary, sort_keys=True) == json.dumps(remote_summary, sort_keys=True)
    assert remote_summary["click_model"] == "sm" and remote_summary["group_bounds"] == [
        list(b) for b in BOUNDS
    ]
    assert {"delta_gr_noc90", "delta_hh_noc90", "sample_noc90"} <= set(remote_summary["statistics"])

    run = EvaluationRun.objects.get()
    assert run.state == "finished" and run.click_model == "sm", celery_worker.log()[-3000:]
    assert run.scored_async == 32  # every map and click of the run was computed in the worker


@pytest.mark.celery
@pytest.mark.one_backend
@pytest.mark.django_db(transaction=True)
def test_a_group_run_interrupted_by_a_client_crash_and_a_worker_restart_continues_with_the_same_clicks(
    groupset, eval_key, wsgi_transport, celery_worker, settings
):
    from benchmark.session import ClickSession
    from evaluation import services
    from evaluation.models import EvaluationRun

    settings.EVAL_GROUP_INLINE_MAX_PIXELS = 0  # the maps and clicks in the worker, which then restarts
    predict = GtDisks(groupset)
    config = {**GROUP, "group_bounds": [(0.0, 0.5), (0.5, 1.0)]}  # two groups keep the test short
    where = remote(eval_key, wsgi_transport, **config)
    crashed = ClickSession(**where)
    with crashed:
        for _ in range(3):  # G1 of the first instance, then one round into G2's trajectory
            assert crashed.next()
            sample, clicks, _ = crashed.get_clicks()
            crashed.submit_masks(predict(sample, clicks))
        assert crashed.next()
        crashed.get_clicks()  # ... and the client dies before submitting
    stored = EvaluationRun.objects.get(pk=crashed.run_id)
    assert stored.state == "awaiting_mask" and stored.units[stored.unit_index][1] == "G2"
    assert stored.clicker_state is not None and len(stored.clicks) == 2

    clear_sample_caches(services)  # the server restarts: nothing but the database is left ...
    celery_worker.restart()  # ... and so does the worker that computes the maps and clicks
    resumed_report, _ = run_session(predict, **where, resume=crashed.run_id)
    local_report, _ = run_session(predict, dataset=groupset, **config)  # uninterrupted

    pd.testing.assert_frame_equal(local_report.drop(columns=VOLATILE), resumed_report.drop(columns=VOLATILE))
    assert resumed_report["status"].eq("accepted").all() and len(resumed_report) == 4 * 2 * 2


@pytest.mark.django_db
def test_the_server_does_round_one_once_per_instance_and_gives_the_local_clicks(
    groupset, eval_key, wsgi_transport, settings
):
    """#15.6: the groups of an instance share round 1 (error region, deepest point, sorted weights) on the
    server as in ClickSession and the engine: the clicker's round-1 distance transform is looked up once per
    instance, not once per group. Scored in the request here, so this process does the work."""
    from benchmark import distance

    predict = GtDisks(groupset)
    config = {**GROUP, "click_model": "ud", "max_clicks": 1}  # ud: a map that needs no transform itself
    local_report, _ = run_session(predict, dataset=groupset, **config)
    distance.clear_cache()
    remote_report, _ = run_session(predict, **remote(eval_key, wsgi_transport, **config))
    assert distance.cache_stats() == (0, 4)  # (hits, misses): 4 instances x 4 groups, one transform each
    assert len(remote_report) == 4 * 4
    pd.testing.assert_frame_equal(local_report.drop(columns=VOLATILE), remote_report.drop(columns=VOLATILE))


BAD_BOUNDS = {
    "not a list": ({"group_bounds": "0-0.5,0.5-1"}, "group_bounds must be a list"),
    "empty": ({"group_bounds": []}, "group_bounds must be a list of 1 to 20"),
    "too many": ({"group_bounds": [[0, 0.04]] * 21}, "group_bounds must be a list of 1 to 20"),
    "low above high": ({"group_bounds": [[0, 0.5], [0.6, 0.5]]}, "group_bounds[1]=[0.6, 0.5]"),
    "low equals high": ({"group_bounds": [[0.5, 0.5]]}, "group_bounds[0]=[0.5, 0.5]"),
    "above one": ({"group_bounds": [[0.5, 1.5]]}, "group_bounds[0]=[0.5, 1.5]"),
    "negative": ({"group_bounds": [[-0.1, 0.5]]}, "group_bounds[0]=[-0.1, 0.5]"),
    "three numbers": ({"group_bounds": [[0, 0.5, 1]]}, "group_bounds[0]=[0, 0.5, 1]"),
    "a text": ({"group_bounds": [[0, "half"]]}, "group_bounds[0]=[0, 'half']"),
    "a boolean": ({"group_bounds": [[False, True]]}, "group_bounds[0]=[False, True]"),
    "a number": ({"group_bounds": [0.5]}, "group_bounds[0]=0.5"),
    "unknown click model": ({"click_model": "sam-clicks"}, "click_model='sam-clicks' is not served"),
    "checkpoint path": ({"click_model": "/etc/passwd"}, "click_model='/etc/passwd' is not served"),
}


@pytest.mark.django_db
def test_bad_group_bounds_or_click_model_are_a_400_naming_the_field_and_create_no_run(groupset, eval_key):
    from rest_framework.test import APIClient

    from evaluation.models import EvaluationRun

    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"EvalKey {eval_key}")
    for name, (config, words) in BAD_BOUNDS.items():
        body = {"dataset": "groupset", "clicker": "group", **config}
        response = api.post("/api/eval/runs/", body, format="json")
        assert response.status_code == 400, (name, response.content)
        assert response.json()["code"] == "invalid_config" and words in response.json()["message"], (
            name,
            response.json(),
        )
    response = api.post(
        "/api/eval/runs/", {"dataset": "groupset", "group_bounds": [[0, 1]]}, format="json"
    )  # the baseline clicker has no groups
    assert (
        response.status_code == 400
        and "group_bounds applies only to clicker='group'" in response.json()["message"]
    )
    assert not EvaluationRun.objects.exists()

    response = api.post("/api/eval/runs/", {"dataset": "groupset", "clicker": "group"}, format="json")
    assert response.status_code == 201, response.content  # the defaults: dt maps, ten groups of equal mass
    created = response.json()
    assert created["click_model"] == "dt" and created["samples"] == 4 * 10
    assert created["group_bounds"] == [[k / 10, (k + 1) / 10] for k in range(10)]


@pytest.mark.celery
@pytest.mark.one_backend
@pytest.mark.django_db(transaction=True)
def test_the_leaderboard_shows_delta_sb_gr_hh_of_a_method_with_group_and_baseline_runs(
    client, researcher, groupset, eval_key, wsgi_transport, celery_worker
):
    from benchmark.report import session_statistics, session_values

    predict = GtDisks(groupset)
    # four groups: ΔGR compares G1 with G4, ΔHH pairs G1 with G3 and G2 with G4
    group_report, _ = run_session(predict, **remote(eval_key, wsgi_transport, method="disks", **GROUP))
    client.force_login(researcher)
    page = client.get("/eval/leaderboard/").content.decode()
    assert "dt map, 4 groups" in page
    values = session_values(group_report, max_clicks=2)
    without_base = session_statistics(values)
    assert (
        f"{without_base['delta_gr_noc90']:.1f} %" in page
        and f"{without_base['delta_hh_noc90']:.1f} %" in page
    )
    assert "ΔSB needs a finished baseline run" in page

    base_report, _ = run_session(
        predict, **remote(eval_key, wsgi_transport, method="disks", clicker="baseline", max_clicks=2)
    )
    expected = session_statistics(values, session_values(base_report, max_clicks=2))
    page = client.get("/eval/leaderboard/").content.decode()
    for key in ("delta_sb_noc90", "delta_gr_noc90", "delta_hh_noc90"):
        assert np.isfinite(expected[key]) and f"{expected[key]:.1f} %" in page, key
        assert expected[key] != 0, key  # the disks segmenter tells clicks near the border from central ones
    assert "ΔSB needs" not in page
