from __future__ import annotations

import json

import numpy as np
import pytest

from benchmark.clickers import BaselineClicker
from benchmark.engine import run_trajectory
from benchmark.session import REPORT_COLUMNS, ClickSession, SessionStateError


def _run(sess: ClickSession, predictor, *, only_last=False):
    embedding = None
    seen = []
    while sess.next():
        sample, clicks, is_new = sess.get_clicks(only_last=only_last)
        if is_new:
            embedding = predictor.encode(sample.load_image())
        seen.append((sample.key, len(clicks), is_new))
        sess.submit_masks(predictor.predict(embedding, clicks).probabilities)
    return seen


def test_state_machine_errors(tiny_dataset):
    sess = ClickSession(dataset=tiny_dataset, max_clicks=1)
    with pytest.raises(SessionStateError, match="inside 'with ClickSession"):
        sess.next()
    with sess:
        with pytest.raises(SessionStateError, match="before next"):
            sess.get_clicks()
        with pytest.raises(SessionStateError, match="before get_clicks"):
            sess.submit_masks(np.zeros((16, 24), bool))
        with pytest.raises(SessionStateError, match="once next\\(\\) has returned False"):
            sess.get_global_summary()
        assert sess.next()
        sess.get_clicks()
        with pytest.raises(SessionStateError, match="called twice"):
            sess.get_clicks()
        with pytest.raises(SessionStateError, match="before submit_masks"):
            sess.next()
        with pytest.raises(ValueError, match=r"got shape \(3, 3\), expected .* \(16, 24\)"):
            sess.submit_masks(np.zeros((3, 3), bool))
        sess.submit_masks(np.zeros((16, 24), bool))
        assert sess.next()
        sess.get_clicks()
        sess.submit_masks(np.zeros((16, 24), bool))
        assert sess.next() is False
        assert sess.next() is False
        with pytest.raises(SessionStateError, match="after the session ended"):
            sess.get_clicks()
    with pytest.raises(SessionStateError, match="entered only once"):
        sess.__enter__()


def test_baseline_session_matches_engine_trajectory_and_reports_every_click(tiny_dataset, disk_predictor):
    with ClickSession(dataset=tiny_dataset, clicker="baseline", max_clicks=4) as sess:
        seen = _run(sess, disk_predictor)
    assert [n for _, n, _ in seen] == [1, 2, 3, 4] * 2
    assert [new for _, _, new in seen] == [True, False, False, False] * 2
    report = sess.get_report()
    assert tuple(report.columns) == REPORT_COLUMNS and len(report) == 8
    assert (report["status"] == "accepted").all()
    assert report["click_index"].tolist() == [1, 2, 3, 4] * 2
    for sample in tiny_dataset.samples:
        gt, ignore = sample.load_masks()
        image = sample.load_image()
        expected = run_trajectory(predictor=disk_predictor, embedding=disk_predictor.encode(image), image=image,
                                  gt=gt, ignore=ignore, clicker=BaselineClicker(), max_clicks=4, threshold=0.5)  # fmt: skip
        rows = report[report["image_stem"] == sample.key.image_stem]
        np.testing.assert_allclose(rows["iou"].to_numpy(), expected.ious)
        np.testing.assert_allclose(rows[["x", "y"]].to_numpy(), expected.clicks[:, :2])


def test_summary_numbers_for_perfect_and_empty_masks(tiny_dataset, tmp_path):
    with ClickSession(dataset=tiny_dataset, max_clicks=3, report_save_dir=tmp_path / "out") as sess:
        while sess.next():
            sample, _, _ = sess.get_clicks()
            gt, _ = sample.load_masks()
            # perfect on the first sample, empty on the second
            sess.submit_masks(gt if sample.key.image_stem == "left" else np.zeros_like(gt))
    summary = sess.get_global_summary(save_file=tmp_path / "summary.json")
    assert summary["noc"] == {"85": 2.0, "90": 2.0}  # (1 + 3) / 2
    assert summary["nof"] == {"85": 1, "90": 1}
    assert summary["miou_curve"] == [0.5, 0.5, 0.5]
    assert summary["iou_auc"] == pytest.approx(0.5)
    assert json.loads((tmp_path / "summary.json").read_text())["seed"] == 0
    assert (tmp_path / "out" / f"clicksession_{sess.session_id}.csv").is_file()
    # quality against the caller's time beside the per-click curve: the report's own timings, summed per sample
    report = sess.get_report()
    per_sample = report.groupby("sample_id")["timing_s"].apply(lambda t: np.cumsum(t.to_numpy()))
    expected = np.mean(np.stack(per_sample.to_list()), axis=0)
    assert summary["time_curve"]["seconds"] == pytest.approx([0.0, *expected])
    assert summary["time_curve"]["miou"] == [0.0, 0.5, 0.5, 0.5]
    span = expected[-1]
    area = expected[0] * 0.25 + (span - expected[0]) * 0.5
    assert summary["time_auc"] == pytest.approx(area / span)


def test_late_submission_gets_a_status_and_ends_the_sample(tiny_dataset):
    with ClickSession(dataset=tiny_dataset, max_clicks=3, max_time_s=1e-9) as sess:
        statuses = []
        while sess.next():
            sample, _, _ = sess.get_clicks()
            statuses.append(sess.submit_masks(np.zeros(sample.load_masks()[0].shape, bool)).status)
    assert statuses == ["timed_out", "timed_out"]  # one interaction per sample, then it moves on
    report = sess.get_report()
    assert report["status"].tolist() == ["timed_out", "timed_out"] and report["iou"].isna().all()
    summary = sess.get_global_summary()
    assert summary["timed_out"] == 2 and summary["miou_curve"] == [0.0, 0.0, 0.0]


def _uniform_map(image, gt, error):
    return error.astype(float)


def test_group_session_is_seeded_and_reproducible(tiny_dataset, disk_predictor):
    def report(seed):
        with ClickSession(dataset=tiny_dataset, clicker="group", map_fn=_uniform_map, max_clicks=3,
                          group_bounds=((0.0, 0.5), (0.5, 1.0)), seed=seed, shuffle=True) as sess:  # fmt: skip
            _run(sess, disk_predictor)
        return sess.get_report(), sess.get_global_summary()

    first, summary = report(7)
    again, _ = report(7)
    other, _ = report(8)
    assert first[["image_stem", "group", "x", "y"]].equals(again[["image_stem", "group", "x", "y"]])
    assert not first[["image_stem", "group", "x", "y"]].equals(other[["image_stem", "group", "x", "y"]])
    assert sorted(set(first["group"])) == ["G1", "G2"] and set(summary["groups"]) == {"G1", "G2"}
    assert len(first) == 2 * 2 * 3


def test_group_session_does_round_one_once_per_instance_not_per_group(tiny_dataset, disk_predictor):
    """#15.6: round 1 (error region, deepest point, sorted weights) is the same for every group of an
    instance, so the session does it once per instance, as the engine does: the clicker's round-1
    distance transform is looked up once per instance (a further group would look it up again)."""
    from benchmark import distance

    bounds = tuple((k / 5, (k + 1) / 5) for k in range(5))
    distance.clear_cache()
    with ClickSession(dataset=tiny_dataset, clicker="group", map_fn=_uniform_map, max_clicks=1,
                      group_bounds=bounds) as sess:  # fmt: skip
        _run(sess, disk_predictor)
    assert len(sess.get_report()) == 2 * 5
    assert distance.cache_stats() == (0, 2)  # (hits, misses): one transform per instance, no lookup per group


def test_group_session_by_click_model_name_records_it_and_the_statistics(tiny_dataset, disk_predictor):
    from benchmark.clickability import load_click_model

    def report(**where):
        with ClickSession(dataset=tiny_dataset, clicker="group", max_clicks=2, seed=3, **where) as sess:
            _run(sess, disk_predictor)
        return sess.get_report(), sess.get_global_summary()

    by_name, summary = report(click_model="dt")
    by_function, _ = report(map_fn=load_click_model("dt"))
    assert by_name[["sample_id", "group", "x", "y", "iou"]].equals(
        by_function[["sample_id", "group", "x", "y", "iou"]]
    )
    assert summary["click_model"] == "dt" and len(summary["group_bounds"]) == 10
    assert {"sample_noc90", "delta_gr_noc90", "delta_hh_noc90", "delta_gr_auc"} <= set(summary["statistics"])
    with pytest.raises(ValueError, match="not both"):
        ClickSession(dataset=tiny_dataset, clicker="group", click_model="dt", map_fn=_uniform_map)


def test_replay_and_annotator_sessions(tiny_dataset, disk_predictor):
    left, right = (s.key for s in tiny_dataset.samples)
    real = {left: np.array([[5.0, 6.0], [6.0, 7.0]]), right: np.array([[15.0, 8.0]])}
    with ClickSession(dataset=tiny_dataset, clicker="replay", real_clicks=real) as sess:
        seen = _run(sess, disk_predictor)
    assert [n for _, n, _ in seen] == [1, 1, 1]
    assert sess.get_report()[["x", "y"]].to_numpy().tolist() == [[5.0, 6.0], [6.0, 7.0], [15.0, 8.0]]
    options = {"noise_sigma_px": 0.0, "clicks_per_round": 2}
    with ClickSession(
        dataset=tiny_dataset, clicker="annotator", annotator_options=options, max_clicks=4
    ) as sess:
        seen = _run(sess, disk_predictor, only_last=True)
    assert all(n <= 2 for _, n, _ in seen)
    report = sess.get_report()
    assert report.groupby("image_stem")["click_index"].max().le(4).all()
    assert (report.groupby(["image_stem", "round"]).size() <= 2).all()


@pytest.mark.dataset
def test_readme_example_session_and_benchmark_run_agree_on_grabcut(grabcut_root, tmp_path):
    """#15.2: the README loop hands back the previous logits as the engine does, so the numbers match
    (without ``sess.previous_logits`` the per-click IoUs differ on these instances)."""
    from benchmark.cli import main
    from benchmark.datasets import open_dataset
    from benchmark.engine import load_results
    from segmenters.registry import get_predictor

    options = {"work_long_side_px": 96}
    argv = ["run", "--method", "embedded", "--dataset", str(grabcut_root), "--groups", "0", "--max-clicks", "3",
            "--limit", "3", "--option", "work_long_side_px=96", "--out", str(tmp_path), "--heatmaps", "0",
            "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    engine = {r.key: r.base_iou for r in load_results(tmp_path / "embedded" / "GrabCut")}
    engine_summary = json.loads((tmp_path / "embedded" / "GrabCut" / "summary.json").read_text())

    dataset = open_dataset(grabcut_root, "grabcut")
    predictor = get_predictor("embedded", **options)
    # the README example, verbatim but for the dataset slice
    with ClickSession(dataset=dataset.samples[:3], clicker="baseline", max_clicks=3, seed=0) as sess:
        while sess.next():
            sample, clicks, is_new = sess.get_clicks(only_last=False)
            if is_new:
                embedding = predictor.encode(sample.load_image())
            prediction = predictor.predict(embedding, clicks, sess.previous_logits)
            result = sess.submit_masks(prediction)  # or probabilities / a bool mask (+ logits=...)
    report = sess.get_report()
    summary = sess.get_global_summary()
    assert len(engine) == 3
    for key, ious in engine.items():
        rows = report[report["image_stem"] == key.image_stem]
        assert rows["iou"].tolist() == ious.tolist()  # exact, click by click
    assert summary["noc"]["90"] == engine_summary["base_noc90"]
    assert summary["noc"]["85"] == engine_summary["base_noc85"]
    assert summary["miou_curve"] == engine_summary["curve_base"]
    assert result.status == "accepted"


def test_previous_logits_follow_the_submissions(tiny_dataset, disk_predictor):
    with ClickSession(dataset=tiny_dataset, max_clicks=2) as sess:
        handed = []
        while sess.next():
            sample, clicks, _ = sess.get_clicks()
            handed.append(sess.previous_logits)
            prediction = disk_predictor.predict(disk_predictor.encode(sample.load_image()), clicks)
            if len(clicks) == 1:
                sess.submit_masks(prediction)
            else:
                sess.submit_masks(prediction.probabilities, logits="mine")
    assert handed[0] is None and handed[2] is None  # a sample's first round
    assert handed[1].dtype == bool and handed[1].any()  # Prediction.logits of round 1 (the disk's bool map)


@pytest.mark.dataset
def test_group_session_and_engine_give_the_same_clicks_and_ious_on_grabcut(grabcut_root):
    """The session's clicking groups are the engine's trajectories: same streams, shared round 1, clicks and IoUs."""
    from benchmark.clickability import load_click_model
    from benchmark.datasets import open_dataset
    from benchmark.engine import EngineConfig, evaluate_instance
    from segmenters.registry import get_predictor

    samples = open_dataset(grabcut_root, "grabcut").samples[:2]
    predictor = get_predictor("embedded", work_long_side_px=96)
    config = EngineConfig(max_clicks=3, run_base=False, run_user=False)
    map_fn = load_click_model("dt")
    engine = {s.key: evaluate_instance(predictor=predictor, sample=s, config=config, method="embedded",
                                       map_fn=map_fn) for s in samples}  # fmt: skip
    with ClickSession(dataset=samples, clicker="group", click_model="dt", max_clicks=3, seed=config.seed,
                      threshold=predictor.threshold) as sess:  # fmt: skip
        while sess.next():
            sample, clicks, is_new = sess.get_clicks()
            if is_new:
                embedding = predictor.encode(sample.load_image())
            sess.submit_masks(predictor.predict(embedding, clicks, sess.previous_logits))
    report = sess.get_report()
    assert len(report) == 2 * 10 * 3
    for key, result in engine.items():
        for g in range(10):
            rows = report[(report["image_stem"] == key.image_stem) & (report["group"] == f"G{g + 1}")]
            clicks = result.group_clicks[g, 0]
            assert rows["x"].tolist() == clicks[:, 0].tolist() and rows["y"].tolist() == clicks[:, 1].tolist()
            assert rows["is_positive"].tolist() == (clicks[:, 2] == 1).tolist()
            assert rows["iou"].tolist() == result.group_iou[g, 0].tolist()
