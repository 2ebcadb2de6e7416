"""Dataset layouts read as the RClicks/RITM loaders read them (benchmark/datasets.py)."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image as PILImage

from benchmark.datasets import (
    DatasetError,
    limited_size,
    open_dataset,
    validate_sample,
)


def _save(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    PILImage.fromarray(array).save(path)


def _image(h: int, w: int, value: int = 90) -> np.ndarray:
    rng = np.random.default_rng(value)
    return rng.integers(0, 255, (h, w, 3), dtype=np.uint8)


def test_grabcut_layout_ignore_band_and_object(tmp_path):
    mask = np.zeros((20, 30), np.uint8)
    mask[5:15, 5:20] = 255
    mask[4, 5:20] = 128
    mask[15, 5:20] = 128
    _save(tmp_path / "data_GT" / "cat.JPG", _image(20, 30))
    _save(tmp_path / "boundary_GT" / "cat.bmp", mask)
    dataset = open_dataset(tmp_path, "grabcut")
    assert dataset.name == "GrabCut"
    (sample,) = dataset.samples
    assert sample.key.image_stem == "cat" and sample.key.object_stem == ""
    obj, ignore = sample.load_masks()
    assert obj.sum() == 10 * 15
    assert ignore.sum() == 2 * 15
    assert not (obj & ignore).any()


def test_davis_any_channel_counts(tmp_path):
    mask = np.zeros((10, 10, 3), np.uint8)
    mask[2, 3, 2] = 1  # only the blue channel, value 1
    mask[5, 5, 0] = 7
    _save(tmp_path / "img" / "a.jpg", _image(10, 10))
    _save(tmp_path / "gt" / "a.png", mask)
    (sample,) = open_dataset(tmp_path, "davis").samples
    obj, ignore = sample.load_masks()
    assert sorted(zip(*np.nonzero(obj), strict=True)) == [(2, 3), (5, 5)]
    assert not ignore.any()


def test_coco_mval_is_named_coco(tmp_path):
    mask = np.zeros((10, 10), np.uint8)
    mask[1:4, 1:4] = 255
    _save(tmp_path / "img" / "baseball glove08_000000537827.jpg", _image(10, 10))
    _save(tmp_path / "gt" / "baseball glove08_000000537827.png", mask)
    dataset = open_dataset(tmp_path, "coco_mval")
    assert dataset.name == "COCO"
    assert dataset.samples[0].key.image_stem == "baseball glove08_000000537827"


def test_tetris_ids_from_rgb_and_several_instances(tmp_path):
    rgb = np.zeros((8, 8, 3), np.uint8)
    rgb[0:2, 0:2] = (1, 0, 0)  # id 1
    rgb[4:6, 4:6] = (4, 1, 0)  # id 4 + 256 = 260
    rgb[6:8, 0:2] = (0, 0, 1)  # id 65536
    _save(tmp_path / "images" / "scene.v2.jpg", _image(8, 8))
    _save(tmp_path / "masks" / "scene.v2.png", rgb)
    samples = open_dataset(tmp_path, "tetris").samples
    assert [s.key.object_stem for s in samples] == ["1", "260", "65536"]
    assert all(s.key.image_stem == "scene.v2" for s in samples)
    for sample in samples:
        obj, _ = sample.load_masks()
        assert obj.sum() == 4


def test_tetris_single_instance_has_empty_object_stem(tmp_path):
    rgb = np.zeros((8, 8, 3), np.uint8)
    rgb[2:4, 2:4] = (9, 0, 0)
    _save(tmp_path / "images" / "one.png", _image(8, 8))
    _save(tmp_path / "masks" / "one.png", rgb)
    (sample,) = open_dataset(tmp_path, "tetris").samples
    assert sample.key.object_stem == "" and sample.object_id == 9


def test_tetris_long_side_capped_at_2048_with_ids_resized_each(tmp_path):
    h, w = 1500, 4096
    rgb = np.zeros((h, w, 3), np.uint8)
    rgb[100:700, 200:1200] = (3, 0, 0)
    rgb[800:1400, 2000:4000] = (5, 0, 0)
    _save(tmp_path / "images" / "big.png", np.full((h, w, 3), 120, np.uint8))
    _save(tmp_path / "masks" / "big.png", rgb)
    samples = open_dataset(tmp_path, "tetris").samples
    assert limited_size(w, h, 2048) == (2048, 750)
    image = samples[0].load_image()
    assert image.shape == (750, 2048, 3)
    obj3, _ = samples[0].load_masks()
    obj5, _ = samples[1].load_masks()
    assert obj3.shape == (750, 2048)
    # each id resized on its own: areas scale by (2048/4096)*(750/1500) = 1/4, within a boundary pixel row
    assert abs(int(obj3.sum()) - 600 * 1000 // 4) < 2000
    assert abs(int(obj5.sum()) - 600 * 2000 // 4) < 3000
    assert not (obj3 & obj5).any()


def test_folder_layout_single_and_per_object_masks(tmp_path):
    one = np.zeros((10, 10), np.uint8)
    one[2:5, 2:5] = 255
    _save(tmp_path / "images" / "a b.c.jpg", _image(10, 10))
    _save(tmp_path / "masks" / "a b.c.png", one)
    _save(tmp_path / "images" / "two.png", _image(10, 10))
    _save(tmp_path / "masks" / "two_left.png", one)
    _save(tmp_path / "masks" / "two_right.png", one[:, ::-1])
    keys = [s.key for s in open_dataset(tmp_path, "folder", name="Mine").samples]
    assert [(k.dataset, k.image_stem, k.object_stem) for k in keys] == [
        ("Mine", "a b.c", ""),
        ("Mine", "two", "left"),
        ("Mine", "two", "right"),
    ]


def test_folder_exact_stem_wins_over_prefix(tmp_path):
    m = np.zeros((6, 6), np.uint8)
    m[1:3, 1:3] = 255
    for stem in ("cat", "cat_1"):
        _save(tmp_path / "images" / f"{stem}.jpg", _image(6, 6))
    _save(tmp_path / "masks" / "cat_1.png", m)
    _save(tmp_path / "masks" / "cat.png", m)
    keys = sorted((s.key.image_stem, s.key.object_stem) for s in open_dataset(tmp_path, "folder").samples)
    assert keys == [("cat", ""), ("cat_1", "")]


@pytest.mark.parametrize(
    "setup, expected",
    [
        ("missing_mask", "no mask with stem 'b'"),
        ("orphan_mask", "mask without an image"),
        ("non_image", "not an image file"),
        ("duplicate_stem", "also used by"),
        ("control_char", "unsafe stem"),
        ("backslash", "unsafe stem"),
        ("no_images_folder", "images folder is missing"),
    ],
)
def test_listing_errors_name_the_file(tmp_path, setup, expected):
    m = np.zeros((6, 6), np.uint8)
    m[1:3, 1:3] = 255
    _save(tmp_path / "data_GT" / "a.jpg", _image(6, 6))
    _save(tmp_path / "boundary_GT" / "a.bmp", m)
    if setup == "missing_mask":
        _save(tmp_path / "data_GT" / "b.jpg", _image(6, 6))
    elif setup == "orphan_mask":
        _save(tmp_path / "boundary_GT" / "zzz.bmp", m)
    elif setup == "non_image":
        (tmp_path / "data_GT" / "notes.txt").write_text("hello")
    elif setup == "duplicate_stem":
        _save(tmp_path / "data_GT" / "a.png", _image(6, 6))
    elif setup == "control_char":
        _save(tmp_path / "data_GT" / "bad\x07name.jpg", _image(6, 6))
    elif setup == "backslash":
        _save(tmp_path / "data_GT" / "bad\\name.jpg", _image(6, 6))
    elif setup == "no_images_folder":
        for p in (tmp_path / "data_GT").iterdir():
            p.unlink()
        (tmp_path / "data_GT").rmdir()
    with pytest.raises(DatasetError, match=expected) as info:
        open_dataset(tmp_path, "grabcut")
    assert str(tmp_path) in str(info.value)


def test_tetris_mask_without_object_is_refused(tmp_path):
    _save(tmp_path / "images" / "x.jpg", _image(6, 6))
    _save(tmp_path / "masks" / "x.png", np.zeros((6, 6, 3), np.uint8))
    with pytest.raises(DatasetError, match="x.png: the id-encoded mask has no object"):
        open_dataset(tmp_path, "tetris")


def test_validate_sample_size_mismatch_and_empty_mask(tmp_path):
    _save(tmp_path / "data_GT" / "a.jpg", _image(6, 8))
    _save(tmp_path / "boundary_GT" / "a.bmp", np.zeros((6, 7), np.uint8))
    (sample,) = open_dataset(tmp_path, "grabcut").samples
    with pytest.raises(DatasetError, match=r"a.bmp: mask is 7x6 but image a.jpg is 8x6"):
        validate_sample(sample)
    _save(tmp_path / "boundary_GT" / "a.bmp", np.zeros((6, 8), np.uint8))
    with pytest.raises(DatasetError, match="a.bmp: empty mask"):
        validate_sample(sample)


def test_validate_sample_truncated_and_fake_image(tmp_path):
    m = np.zeros((40, 40), np.uint8)
    m[5:9, 5:9] = 255
    _save(tmp_path / "data_GT" / "t.jpg", _image(40, 40))
    _save(tmp_path / "boundary_GT" / "t.bmp", m)
    data = (tmp_path / "data_GT" / "t.jpg").read_bytes()
    (tmp_path / "data_GT" / "t.jpg").write_bytes(data[: len(data) // 2])
    (sample,) = open_dataset(tmp_path, "grabcut").samples
    with pytest.raises(DatasetError, match="t.jpg: unreadable or truncated image"):
        validate_sample(sample)
    (tmp_path / "data_GT" / "t.jpg").write_bytes(b"this is not a jpeg at all")
    with pytest.raises(DatasetError, match="t.jpg: not a readable image"):
        validate_sample(sample)


def test_decompression_bomb_is_refused(tmp_path, monkeypatch):
    m = np.zeros((60, 60), np.uint8)
    m[5:9, 5:9] = 255
    _save(tmp_path / "data_GT" / "bomb.png", _image(60, 60))
    _save(tmp_path / "boundary_GT" / "bomb.bmp", m)
    # Pillow's own limit is the configuration knob (not our code): lower it so a small file exceeds it.
    monkeypatch.setattr(PILImage, "MAX_IMAGE_PIXELS", 1000)
    (sample,) = open_dataset(tmp_path, "grabcut").samples
    with pytest.raises(DatasetError, match="bomb.png: image too large to load safely"):
        validate_sample(sample)


def test_images_are_rgb_like_opencv_reads_them(tmp_path):
    image = _image(5, 7)
    _save(tmp_path / "img" / "c.png", image)
    m = np.zeros((5, 7), np.uint8)
    m[0, 0] = 255
    _save(tmp_path / "gt" / "c.png", m)
    (sample,) = open_dataset(tmp_path, "davis").samples
    loaded = sample.load_image()
    assert loaded.dtype == np.uint8 and loaded.shape == (5, 7, 3)
    np.testing.assert_array_equal(
        loaded, cv2.cvtColor(cv2.imread(str(tmp_path / "img" / "c.png")), cv2.COLOR_BGR2RGB)
    )
    np.testing.assert_array_equal(loaded, image)


@pytest.mark.dataset
def test_shared_grabcut_reads_21_instances_with_ignore_bands(grabcut_root):
    dataset = open_dataset(grabcut_root, "grabcut")
    assert len(dataset) == 21
    stems = {s.key.image_stem for s in dataset.samples}
    assert {"scissors", "fullmoon", "106024"} <= stems
    with_band = 0
    for sample in dataset.samples:
        checked = validate_sample(sample)
        assert checked.object_mask.any()
        assert checked.object_mask.shape == (checked.height, checked.width)
        with_band += bool(checked.ignore_mask.any())
    assert with_band == 16
