"""The ClickModel interface: loading by name or checkpoint, and use by the engine's clickers."""

from __future__ import annotations

import numpy as np
import pytest

from benchmark.clickability import ClickModel, load_click_model
from benchmark.clickers import GroupClicker


def test_bad_checkpoint_and_unknown_name_say_what_to_do(tmp_path):
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="train-clickability|retrain"):
        load_click_model(junk)
    with pytest.raises(ValueError, match="neither a known name"):
        load_click_model("nonexistent-model")


@pytest.mark.parametrize(
    "name,expected", [("uniform", "ud"), ("UD", "ud"), ("dt", "dt"), ("sm", "sm"), ("si", "si")]
)
def test_load_click_model_by_name(name, expected):
    assert load_click_model(name).name == expected


@pytest.mark.parametrize("name", ["ud", "dt", "sm", "si"])
def test_engine_group_clicker_samples_inside_the_error_region(name):
    model = load_click_model(name)
    assert isinstance(model, ClickModel)
    rng = np.random.default_rng(0)
    image = rng.integers(0, 255, size=(40, 50, 3), dtype=np.uint8)
    gt = np.zeros((40, 50), dtype=bool)
    gt[10:30, 15:40] = True
    clicker = GroupClicker(map_fn=model, low=0.9, high=1.0, rng=rng)
    clicker.start(image=image, gt=gt, ignore=np.zeros_like(gt))
    (click,) = clicker.next_clicks(np.zeros_like(gt))
    assert click.is_positive and gt[int(click.y), int(click.x)]
