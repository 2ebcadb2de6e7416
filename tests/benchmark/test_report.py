from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchmark.datasets import SampleKey
from benchmark.engine import InstanceResult
from benchmark.report import session_statistics, session_values, summarize, table, to_markdown, write_report


def _result(stem, base, groups, user=()):
    groups = np.asarray(groups, float)[:, None, :]  # (G, S=1, C)
    return InstanceResult(
        key=SampleKey("GrabCut", stem, ""),
        method="m",
        model_id="m",
        config_json="{}",
        base_iou=np.asarray(base, float),
        base_seconds=np.full(len(base), 0.1),
        group_iou=groups,
        group_seconds=np.full(groups.shape, 0.3),
        user_iou=np.asarray(user, float),
    )


def test_summary_by_hand():
    # C = 3 clicks, G = 2 groups.
    a = _result("a", [0.5, 0.95, 0.95], [[0.2, 0.5, 0.92], [0.91, 0.95, 0.97]], user=[0.6, 0.8])
    b = _result("b", [0.91, 0.95, 0.95], [[0.3, 0.4, 0.5], [0.95, 0.95, 0.95]])
    row = summarize([a, b])
    # NoC@90 with max 3 clicks: base a=2, b=1; groups a=(3, 1), b=(3, 1)
    assert row["base_noc90"] == pytest.approx(1.5)
    assert row["sample_noc90"] == pytest.approx(2.0)
    assert row["sample_noc90_std"] == pytest.approx(1.0)
    assert row["delta_sb_noc90"] == pytest.approx(100 * ((2 - 2) / 2 + (2 - 1) / 1) / 2)
    assert row["delta_gr_noc90"] == pytest.approx(200.0)
    assert row["delta_hh_noc90"] == pytest.approx(200.0)  # G=2: the pair is (G1, G2)
    # NoF@90: base none; G1 both instances at NoC == 3 (a reaches 0.92 at click 3, still a failure)
    assert row["base_nof90"] == 0 and row["sample_nof90"] == 1.0
    assert row["base_auc"] == pytest.approx(((0.25 + 0.95 + 0.475) / 2 + (0.455 + 0.95 + 0.475) / 2) / 2)
    assert row["base_iou1"] == pytest.approx(0.705)
    assert row["user_iou1"] == pytest.approx(0.7) and row["user_instances"] == 1
    assert row["seconds_per_click"] == pytest.approx((6 * 0.1 + 12 * 0.3) / 18)
    np.testing.assert_allclose(row["curve_groups"][0], [0.25, 0.45, 0.71])


def test_float_quirk_counts_ious_that_round_to_090_in_float32():
    exact = _result("a", [0.9, 0.9, 0.9], [[0.9, 0.9, 0.9], [0.9, 0.9, 0.9]])
    assert summarize([exact])["base_noc90"] == 1
    assert summarize([exact], ritm_float_quirk=True)["base_noc90"] == 1
    below = _result("b", [0.89999996] * 3, [[0.89999996] * 3] * 2)
    assert summarize([below])["base_noc90"] == 3
    assert summarize([below], ritm_float_quirk=True)["base_noc90"] == 1


def test_table_markdown_and_files(tmp_path):
    row = summarize([_result("a", [0.5, 0.95, 0.95], [[0.2, 0.5, 0.92], [0.91, 0.95, 0.97]])])
    frame = table([row])
    text = to_markdown(frame)
    assert text.splitlines()[0].startswith("| Method | Dataset | Instances | Base NoC@90 |")
    assert "| m | GrabCut | 1 | 2.000 |" in text
    csv_path, md_path = write_report([row], tmp_path)
    assert csv_path.read_text().startswith("Method,Dataset,Instances,Base NoC@90")
    assert md_path.read_text() == text


def test_checkpoint_column_names_the_hashes_marks_weight_free_and_leaves_older_summaries_empty(tmp_path):
    row = summarize([_result("a", [0.5, 0.95, 0.95], [[0.2, 0.5, 0.92], [0.91, 0.95, 0.97]])])
    rows = [
        {**row, "method": "weighted", "checkpoint_sha256": ["c" * 64]},
        {**row, "method": "weight-free", "checkpoint_sha256": [""]},
        {**row, "method": "older-run"},  # a summary.json written before the hash was recorded
    ]
    csv_path, md_path = write_report(rows, tmp_path)
    frame = pd.read_csv(csv_path)
    assert frame.columns[-1] == "Checkpoint sha256"
    cells = dict(zip(frame["Method"], frame["Checkpoint sha256"]))
    assert cells["weighted"] == "c" * 64 and cells["weight-free"] == "-" and pd.isna(cells["older-run"])
    lines = md_path.read_text().splitlines()
    assert lines[0].endswith("| Checkpoint sha256 |")
    assert [line.rsplit("|", 2)[1].strip() for line in lines[2:]] == ["–", "-", "c" * 64]  # sorted by method


def _session_rows(stem, group, ious):
    return [
        {"sample_id": stem, "group": group, "click_index": k + 1, "iou": value}
        for k, value in enumerate(ious)
    ]


def test_session_values_and_statistics_match_summarize_by_hand():
    import pandas as pd

    # the instances of test_summary_by_hand as ClickSession reports (groups out of order, as a shuffle gives)
    groups = pd.DataFrame(
        _session_rows("b", "G2", [0.95, 0.95, 0.95]) + _session_rows("a", "G1", [0.2, 0.5, 0.92])
        + _session_rows("a", "G2", [0.91, 0.95, 0.97]) + _session_rows("b", "G1", [0.3, 0.4, 0.5])
    )  # fmt: skip
    base = pd.DataFrame(
        _session_rows("a", "base", [0.5, 0.95, 0.95]) + _session_rows("b", "base", [0.91, 0.95])
    )
    values = session_values(groups, max_clicks=3)
    assert values["sample_ids"] == ["a", "b"] and values["groups"] == ["G1", "G2"]
    assert values["noc"]["90"] == [[3, 1], [3, 1]] and values["noc"]["85"] == [[3, 1], [3, 1]]
    base_values = session_values(base, max_clicks=3)  # b stopped at click 2: 0.95 carried forward
    assert base_values["noc"]["90"] == [[2], [1]]
    row = session_statistics(values, base_values)
    assert row["delta_sb_noc90"] == pytest.approx(50.0)
    assert row["delta_gr_noc90"] == pytest.approx(200.0) and row["delta_hh_noc90"] == pytest.approx(200.0)
    assert row["base_nof90"] == 0 and row["sample_nof90"] == 1.0
    reference = summarize([
        _result("a", [0.5, 0.95, 0.95], [[0.2, 0.5, 0.92], [0.91, 0.95, 0.97]]),
        _result("b", [0.91, 0.95, 0.95], [[0.3, 0.4, 0.5], [0.95, 0.95, 0.95]]),
    ])  # fmt: skip
    for key, value in row.items():
        if key not in ("instances", "groups"):
            assert value == pytest.approx(reference[key]), key
    assert "delta_sb_noc90" not in session_statistics(values)
    with pytest.raises(ValueError, match="different instances"):
        session_statistics(values, session_values(base[base["sample_id"] == "a"], max_clicks=3))
