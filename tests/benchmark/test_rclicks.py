from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from benchmark.datasets import SampleKey, open_dataset
from benchmark.rclicks import (
    CLICKS_COLUMNS,
    ClicksFileError,
    error_mask,
    group_tasks,
    read_clicks_csv,
)


def _write_grabcut(root: Path, stems_sizes: dict[str, tuple[int, int]]) -> None:
    """A GrabCut-layout folder: object = a centred rectangle (255), a 1-px ignore ring (128)."""
    (root / "data_GT").mkdir(parents=True)
    (root / "boundary_GT").mkdir()
    for stem, (width, height) in stems_sizes.items():
        Image.fromarray(np.full((height, width, 3), 90, np.uint8)).save(root / "data_GT" / f"{stem}.png")
        mask = np.zeros((height, width), np.uint8)
        mask[2 : height - 2, 2 : width - 2] = 128
        mask[3 : height - 3, 3 : width - 3] = 255
        Image.fromarray(mask).save(root / "boundary_GT" / f"{stem}.bmp")


def _rows(rows: list[dict]) -> str:
    frame = pd.DataFrame(rows, columns=list(CLICKS_COLUMNS))
    return frame.to_csv(index=False)


def _row(**kw) -> dict:
    base = dict(
        dataset="GrabCut",
        image_stem="img",
        object_stem="",
        model_type="",
        click_type="first",
        full_stem="img",
        device="pc",
        x=0,
        y=0,
        w=20,
        h=10,
    )
    base.update(kw)
    return base


def test_read_keeps_empty_strings_and_int_coordinates(tmp_path):
    path = tmp_path / "clicks.csv"
    path.write_text(_rows([_row(x=3, y=4), _row(device="mobile", x=5, y=6)]))
    frame = read_clicks_csv(path)
    assert frame["object_stem"].tolist() == ["", ""]
    assert frame["model_type"].tolist() == ["", ""]
    assert frame["x"].dtype == np.int64 and frame["x"].tolist() == [3, 5]
    mobile = read_clicks_csv(path, device="mobile")
    assert mobile["y"].tolist() == [6]


def test_read_names_a_missing_column(tmp_path):
    path = tmp_path / "clicks.csv"
    pd.DataFrame([_row()]).drop(columns=["device"]).to_csv(path, index=False)
    with pytest.raises(ClicksFileError, match=r"clicks.csv lacks the column\(s\) \['device'\]"):
        read_clicks_csv(path)


def test_read_rejects_non_integer_coordinate_and_bad_device_argument(tmp_path):
    path = tmp_path / "clicks.csv"
    path.write_text(_rows([_row(x="3.5")]))
    with pytest.raises(ClicksFileError, match="column 'x' holds '3.5'"):
        read_clicks_csv(path)
    with pytest.raises(ValueError, match="device='tablet'"):
        read_clicks_csv(path, device="tablet")


def test_group_tasks_uses_columns_not_full_stem_surgery_and_rescales(tmp_path):
    # Image stem "x_sample" contains "_sam", which the reference's string cutting would break.
    root = tmp_path / "GrabCut"
    _write_grabcut(root, {"x_sample": (40, 20), "other": (10, 10)})
    dataset = open_dataset(root, "grabcut")
    path = tmp_path / "clicks.csv"
    path.write_text(
        _rows(
            [
                _row(image_stem="x_sample", full_stem="x_sample", x=10, y=5, w=20, h=10),
                _row(image_stem="x_sample", full_stem="x_sample", x=25, y=9, w=20, h=10, device="mobile"),
                _row(
                    image_stem="x_sample",
                    full_stem="x_sample_sam_fn_pc_3",
                    model_type="sam",
                    click_type="fn",
                    x=1,
                    y=1,
                    w=40,
                    h=20,
                ),
                _row(dataset="Berkeley", image_stem="x_sample", full_stem="x_sample"),
            ]
        )
    )
    tasks = group_tasks(read_clicks_csv(path), dataset)
    assert [t.full_stem for t in tasks] == ["x_sample", "x_sample_sam_fn_pc_3"]
    first = tasks[0]
    assert first.key == SampleKey("GrabCut", "x_sample", "")
    # (10, 5) in a 20x10 frame -> (20, 10) in the 40x20 image; x=25 is clipped to w-1=19 first.
    np.testing.assert_allclose(first.clicks_xy, [[20.0, 10.0], [38.0, 18.0]])
    assert first.devices.tolist() == ["pc", "mobile"]
    assert tasks[1].click_type == "fn" and tasks[1].model_type == "sam"
    np.testing.assert_allclose(tasks[1].clicks_xy, [[1.0, 1.0]])


def test_group_tasks_drops_unknown_images_with_a_warning(tmp_path, caplog):
    root = tmp_path / "GrabCut"
    _write_grabcut(root, {"img": (20, 10)})
    path = tmp_path / "clicks.csv"
    path.write_text(_rows([_row(), _row(image_stem="missing", full_stem="missing")]))
    with caplog.at_level(logging.WARNING):
        tasks = group_tasks(read_clicks_csv(path), open_dataset(root, "grabcut"))
    assert [t.full_stem for t in tasks] == ["img"]
    assert "missing" in caplog.text


def test_group_tasks_rejects_inconsistent_full_stem_and_missing_prev_mask(tmp_path):
    root = tmp_path / "GrabCut"
    _write_grabcut(root, {"img": (20, 10)})
    dataset = open_dataset(root, "grabcut")
    path = tmp_path / "clicks.csv"
    path.write_text(_rows([_row(), _row(click_type="fn", model_type="ritm")]))
    with pytest.raises(ClicksFileError, match="full_stem 'img' disagree"):
        group_tasks(read_clicks_csv(path), dataset)
    path.write_text(_rows([_row(click_type="fn", model_type="ritm", full_stem="img_ritm_fn")]))
    with pytest.raises(ClicksFileError, match=r"img_ritm_fn.png is missing"):
        group_tasks(read_clicks_csv(path), dataset, prev_masks_dir=tmp_path)


def test_error_masks_first_fn_fp_exclude_ignore(tmp_path):
    root = tmp_path / "GrabCut"
    _write_grabcut(root, {"img": (20, 10)})
    dataset = open_dataset(root, "grabcut")
    sample = dataset.samples[0]
    obj, ignore = sample.load_masks()
    prev = np.zeros((10, 20), np.uint8)
    prev[:, :10] = 255  # left half predicted as object
    prev_dir = tmp_path / "prev"
    prev_dir.mkdir()
    Image.fromarray(prev).save(prev_dir / "img_ritm_fn.png")
    Image.fromarray(prev).save(prev_dir / "img_ritm_fp.png")
    path = tmp_path / "clicks.csv"
    path.write_text(
        _rows(
            [
                _row(),
                _row(click_type="fn", model_type="ritm", full_stem="img_ritm_fn"),
                _row(click_type="fp", model_type="ritm", full_stem="img_ritm_fp"),
            ]
        )
    )
    first, fn, fp = group_tasks(read_clicks_csv(path), dataset, prev_masks_dir=prev_dir)
    np.testing.assert_array_equal(error_mask(first, sample, None), obj)
    expected_fn = obj.copy()
    expected_fn[:, :10] = False
    np.testing.assert_array_equal(error_mask(fn, sample, prev_dir), expected_fn)
    got_fp = error_mask(fp, sample, prev_dir)
    # Left half minus the object and minus the 128 ring: rows 0-1 and 8-9 plus columns 0-1.
    assert not (got_fp & ignore).any() and not (got_fp & obj).any()
    assert got_fp.sum() == (10 * 10) - int((obj[:, :10] | ignore[:, :10]).sum())
    with pytest.raises(ClicksFileError, match="pass prev_masks_dir"):
        error_mask(fn, sample, None)


def test_prev_mask_of_wrong_size_is_rejected(tmp_path):
    root = tmp_path / "GrabCut"
    _write_grabcut(root, {"img": (20, 10)})
    dataset = open_dataset(root, "grabcut")
    prev_dir = tmp_path / "prev"
    prev_dir.mkdir()
    Image.fromarray(np.zeros((5, 5), np.uint8)).save(prev_dir / "img_ritm_fn.png")
    path = tmp_path / "clicks.csv"
    path.write_text(_rows([_row(click_type="fn", model_type="ritm", full_stem="img_ritm_fn")]))
    (task,) = group_tasks(read_clicks_csv(path), dataset)
    with pytest.raises(ClicksFileError, match="is 5x5 .* loaded image is 20x10"):
        error_mask(task, dataset.samples[0], prev_dir)


def test_single_object_tetris_image_matches_an_explicit_object_stem(tmp_path):
    root = tmp_path / "TETRIS"
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    Image.fromarray(np.full((10, 20, 3), 50, np.uint8)).save(root / "images" / "t1.png")
    ids = np.zeros((10, 20, 3), np.uint8)
    ids[2:8, 3:9] = (7, 1, 0)  # id 7 + 256 * 1 = 263
    Image.fromarray(ids).save(root / "masks" / "t1.png")
    dataset = open_dataset(root, "tetris")
    assert dataset.samples[0].key == SampleKey("TETRIS", "t1", "")
    path = tmp_path / "clicks.csv"
    path.write_text(
        _rows([_row(dataset="TETRIS", image_stem="t1", object_stem="263", full_stem="t1_______263")])
    )
    (task,) = group_tasks(read_clicks_csv(path), dataset)
    assert task.key == SampleKey("TETRIS", "t1", "")
