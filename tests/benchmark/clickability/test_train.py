"""Training of the clickability model: loss, metrics, schedule, split files, loop and CLI."""

from __future__ import annotations

import csv
import math

import cv2
import numpy as np
import pytest
import torch

from benchmark.clickability import load_click_model
from benchmark.clickability.maps import clickability_map
from benchmark.clickability.train import (
    TrainSettings,
    kld_loss,
    lr_factor,
    main,
    make_example,
    read_split_file,
    similarity,
    split_stems,
    train_click_model,
)
from benchmark.rclicks import CLICKS_COLUMNS


def test_kld_loss_by_hand():
    target = torch.tensor([0.5, 0.5]).view(1, 1, 1, 2)
    pred = torch.tensor([1.0, 3.0]).view(1, 1, 1, 2)  # normalised to 0.25 / 0.75
    expected = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)
    assert float(kld_loss(pred, target)) == pytest.approx(expected, rel=1e-6)
    assert float(kld_loss(target * 7, target)) == pytest.approx(0.0, abs=1e-7)


def test_similarity_by_hand():
    # prediction min-max -> [0, 1] -> sum-normalised [0, 1]; target [0.5, 0.5]: intersection 0.5
    assert similarity(np.array([2.0, 5.0]), np.array([1.0, 1.0])) == pytest.approx(0.5)
    assert similarity(np.array([0.0, 1.0, 3.0]), np.array([0.0, 1.0, 3.0])) == pytest.approx(1.0)


def test_lr_schedule_warms_up_from_zero_then_cosine_to_zero():
    total, warmup = 100, 10
    assert lr_factor(0, total_steps=total, warmup_steps=warmup) == 0.0
    assert lr_factor(5, total_steps=total, warmup_steps=warmup) == pytest.approx(0.5)
    assert lr_factor(10, total_steps=total, warmup_steps=warmup) == pytest.approx(1.0)
    assert lr_factor(55, total_steps=total, warmup_steps=warmup) == pytest.approx(0.5)
    assert lr_factor(99, total_steps=total, warmup_steps=warmup) < 0.001
    assert lr_factor(3, total_steps=total, warmup_steps=0) < 1.0


def test_split_file_without_final_newline(tmp_path):
    path = tmp_path / "val.txt"
    path.write_bytes(b"alpha\r\nbeta gamma\n\ndelta")  # CRLF, a blank line, no final newline
    assert read_split_file(path) == ["alpha", "beta gamma", "delta"]
    with pytest.raises(ValueError, match="does not exist"):
        read_split_file(tmp_path / "missing.txt")


def test_seeded_split_by_stem():
    stems = [f"img{i}" for i in range(10)]
    train, val = split_stems(stems, val_fraction=0.2, seed=1)
    assert len(val) == 2 and set(train) | set(val) == set(stems) and not set(train) & set(val)
    assert split_stems(stems, val_fraction=0.2, seed=1) == (train, val)
    assert split_stems(stems, val_fraction=0.2, seed=2) != (train, val)


def _synthetic_example(seed: int, size: int = 64):
    rng = np.random.default_rng(seed)
    height, width = 48, 64
    image = rng.integers(0, 255, size=(height, width, 3), dtype=np.uint8)
    gt = np.zeros((height, width), dtype=bool)
    top, left = rng.integers(4, 16), rng.integers(4, 24)
    gt[top : top + 24, left : left + 32] = True
    # people click near the top-left quarter of the object in this synthetic study
    clicks = np.array([[left + 8, top + 6]]) + rng.normal(0, 2, size=(20, 2))
    image[gt] = image[gt] // 2 + 100
    target = clickability_map(clicks, error_mask=gt, sigma=20)
    return make_example(
        image=image, gt_mask=gt, error_mask=gt, target_map=target, size=size, task_id=f"s/{seed}"
    )


def test_a_few_iterations_lower_the_loss():
    train = [_synthetic_example(seed) for seed in range(4)]
    settings = TrainSettings(input_size=64, epochs=25, batch_size=4, lr=0.005, warmup_fraction=0.0, seed=0)
    result = train_click_model(train, [], settings=settings, out_dir=None)
    losses = result.iteration_losses
    assert len(losses) == 25
    assert np.mean(losses[-5:]) < 0.8 * losses[0]


def test_training_writes_epoch_and_best_checkpoints(tmp_path):
    train = [_synthetic_example(seed) for seed in range(3)]
    val = [_synthetic_example(seed) for seed in (10, 11)]
    settings = TrainSettings(input_size=64, epochs=3, batch_size=3, lr=0.005, seed=0)
    result = train_click_model(train, val, settings=settings, out_dir=tmp_path)
    assert [p.name for p in sorted(tmp_path.glob("epoch_*.pt"))] == ["epoch_1.pt", "epoch_2.pt", "epoch_3.pt"]
    best_sim = max(r.val_sim for r in result.history)
    assert result.history[result.best_epoch - 1].val_sim == best_sim
    assert torch.load(tmp_path / "best.pt", weights_only=True)["epoch"] == result.best_epoch
    with open(tmp_path / "history.csv") as handle:
        assert len(list(csv.DictReader(handle))) == 3


def test_examples_must_match_the_input_size():
    with pytest.raises(ValueError, match="input_size"):
        train_click_model(
            [_synthetic_example(0, size=64)], [], settings=TrainSettings(input_size=96), out_dir=None
        )


def write_synthetic_grabcut_study(root, *, n_images: int = 4, clicks_per_device: int = 12, seed: int = 0):
    """A GrabCut-layout folder (data_GT/, boundary_GT/) and a first-round clicks CSV; returns the CSV path."""
    rng = np.random.default_rng(seed)
    (root / "data_GT").mkdir(parents=True)
    (root / "boundary_GT").mkdir()
    rows = []
    for index in range(n_images):
        stem = f"img{index}"
        height, width = 60, 80
        image = rng.integers(0, 255, size=(height, width, 3), dtype=np.uint8)
        mask = np.zeros((height, width), dtype=np.uint8)
        mask[15:45, 20:64] = 255
        mask[14, 20:64] = 128  # an ignore band row
        cv2.imwrite(str(root / "data_GT" / f"{stem}.png"), image)
        cv2.imwrite(str(root / "boundary_GT" / f"{stem}.bmp"), mask)
        for device in ("pc", "mobile"):
            for x, y in np.array([30, 25]) + rng.normal(0, 3, size=(clicks_per_device, 2)):
                rows.append(["GrabCut", stem, "", "", "first", stem, device, int(x), int(y), width, height])
    csv_path = root / "clicks.csv"
    with open(csv_path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(CLICKS_COLUMNS)
        writer.writerows(rows)
    return csv_path


def test_cli_trains_from_a_clicks_csv_and_dataset_folder(tmp_path, capsys):
    data = tmp_path / "GrabCut"
    clicks = write_synthetic_grabcut_study(data)
    out = tmp_path / "run"
    split = tmp_path / "val.txt"
    split.write_text("img3")  # no final newline
    train_split = tmp_path / "train.txt"
    train_split.write_text("img0\nimg1\nimg2\n")
    code = main(
        [
            "--clicks", str(clicks), "--dataset", str(data), "--out", str(out), "--input-size", "64",
            "--epochs", "2", "--batch-size", "2", "--lr", "0.005", "--cache-dir", str(tmp_path / "maps"),
            "--train-split", str(train_split), "--val-split", str(split),
        ]
    )  # fmt: skip
    assert code == 0
    assert (out / "best.pt").is_file() and (out / "epoch_2.pt").is_file()
    assert len(list((tmp_path / "maps").rglob("*.npy"))) == 4
    assert "best epoch" in capsys.readouterr().out
    model = load_click_model(out / "best.pt")
    image = np.zeros((60, 80, 3), dtype=np.uint8)
    gt = np.zeros((60, 80), dtype=bool)
    gt[15:45, 20:64] = True
    assert model.predict_map(image, gt, gt).shape == (60, 80)
