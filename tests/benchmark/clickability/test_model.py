"""The clickability network, its letterbox and checkpoints."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmark.clickability import load_click_model
from benchmark.clickability.model import (
    ClickabilityNet,
    Letterbox,
    TrainedClickModel,
    count_parameters,
    get_config,
    letterbox,
    load_checkpoint,
    save_checkpoint,
    unletterbox,
)


def test_segnext_b_has_the_papers_parameter_count():
    # Paper Table 5: 27.59 M. Ours: MSCAN-B + LightHam(512) + the conditioning branch.
    params = count_parameters(ClickabilityNet(get_config("segnext-b")))
    assert params == pytest.approx(27.6e6, rel=0.01)


def test_small_config_is_cpu_sized():
    assert count_parameters(ClickabilityNet(get_config("small"))) < 1_000_000


def test_unknown_config_lists_the_choices():
    with pytest.raises(ValueError, match="segnext-b"):
        get_config("huge")


def test_forward_gives_min_max_normalised_maps_at_input_size():
    torch.manual_seed(0)
    net = ClickabilityNet(get_config("small")).eval()
    image = torch.randn(2, 3, 64, 64)
    masks = torch.zeros(2, 2, 64, 64)
    masks[:, :, 16:48, 16:48] = 1.0
    with torch.inference_mode():
        out = net(image, masks)
    assert out.shape == (2, 1, 64, 64)
    for sample in out:
        assert float(sample.min()) == pytest.approx(0.0, abs=1e-6)
        assert float(sample.max()) == pytest.approx(1.0, abs=1e-6)


def test_masks_condition_the_output():
    torch.manual_seed(0)
    net = ClickabilityNet(get_config("small")).eval()
    image = torch.randn(1, 3, 64, 64)
    left, right = torch.zeros(1, 2, 64, 64), torch.zeros(1, 2, 64, 64)
    left[:, :, :, :20] = 1.0
    right[:, :, :, 44:] = 1.0
    with torch.inference_mode():
        assert not torch.allclose(net(image, left), net(image, right))


def test_letterbox_geometry_and_round_trip():
    box = Letterbox.for_shape(height=200, width=300, size=416)
    assert (box.new_w, box.new_h, box.left, box.top) == (416, 277, 0, 69)
    array = np.random.default_rng(0).random((200, 300)).astype(np.float32)
    canvas = letterbox(array, box)
    assert canvas.shape == (416, 416)
    assert canvas[:69].max() == 0.0 and canvas[69 + 277 :].max() == 0.0
    back = unletterbox(canvas, box, height=200, width=300)
    assert back.shape == (200, 300)
    smooth = np.tile(np.linspace(0, 1, 300, dtype=np.float32), (200, 1))
    np.testing.assert_allclose(
        unletterbox(letterbox(smooth, box), box, height=200, width=300), smooth, atol=0.01
    )


def _scene():
    rng = np.random.default_rng(1)
    image = rng.integers(0, 255, size=(48, 72, 3), dtype=np.uint8)
    gt = np.zeros((48, 72), dtype=bool)
    gt[10:40, 20:60] = True
    return image, gt


def test_checkpoint_round_trip_and_click_model_interface(tmp_path):
    torch.manual_seed(0)
    net = ClickabilityNet(get_config("small"))
    path = tmp_path / "best.pt"
    save_checkpoint(path, net=net, input_size=64, extra={"epoch": 3})
    restored, payload = load_checkpoint(path)
    assert payload["epoch"] == 3 and payload["input_size"] == 64
    image, gt = _scene()
    model = load_click_model(path)
    assert isinstance(model, TrainedClickModel)
    result = model.predict_map(image, gt, gt)
    assert result.shape == gt.shape and result.dtype == np.float32
    assert result[~gt].max() == 0.0 and result.max() > 0.0
    direct = TrainedClickModel(restored, input_size=64).predict_map(image, gt, gt)
    np.testing.assert_allclose(result, direct, atol=1e-6)
    raw = TrainedClickModel(restored, input_size=64, restrict_to_error=False).predict_map(image, gt, gt)
    assert raw[~gt].max() > 0.0
