"""RITM/SimpleClick adapter: click encoding, zoom-in geometry and flip TTA, on a stand-in network.

The ``isegm`` package (RITM/SimpleClick clones) is not installable from PyPI, so the predictor is
driven with ``model=``: a small network following the isegm interface whose output is a known
function of the clicks, which lets the tests check where the clicks end up after zoom and flip.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from segmenters.base import Click, SegmenterError
from segmenters.isegm import (
    IsegmState,
    RitmPredictor,
    SimpleClickPredictor,
    ZoomIn,
    box_iou,
    encode_points,
    expand_box,
    isegm_missing,
)
from segmenters.registry import get_predictor

from .conftest import square_scene


class ClickDiskNet(torch.nn.Module):
    """isegm-style stand-in: logits = +8 within 6 input px of a positive click, -8 near a negative one,
    -4 elsewhere, plus 12 * (previous probability - 0.5); output at half resolution."""

    with_prev_mask = True

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(1))
        self.seen_points: list[np.ndarray] = []
        self.seen_shapes: list[tuple[int, ...]] = []

    def forward(self, image, points):
        self.seen_points.append(points.cpu().numpy())
        self.seen_shapes.append(tuple(image.shape))
        batch, _, height, width = image.shape
        rows = torch.arange(height, dtype=torch.float32)[:, None]
        cols = torch.arange(width, dtype=torch.float32)[None, :]
        logits = torch.full((batch, 1, height, width), -4.0)
        half = points.shape[1] // 2
        for item in range(batch):
            for index, (row, col, order) in enumerate(points[item].tolist()):
                if order < 0:
                    continue
                near = (rows - row) ** 2 + (cols - col) ** 2 <= 36.0
                logits[item, 0][near] = 8.0 if index < half else -8.0
        logits = logits + 12.0 * (image[:, 3:4] - 0.5) * self.scale
        return {"instances": torch.nn.functional.avg_pool2d(logits, 2)}


def _ritm(**options) -> RitmPredictor:
    return RitmPredictor(model=ClickDiskNet(), device="cpu", **options)


def test_points_are_padded_positive_and_negative_lists_of_y_x_index():
    points = encode_points([[(10.0, 20.0, True), (5.0, 6.0, False), (7.0, 8.0, True)]])
    np.testing.assert_array_equal(points[0], [[10, 20, 0], [7, 8, 2], [5, 6, 1], [-1, -1, -1]])
    batch = encode_points([[(1.0, 1.0, True)], [(2.0, 2.0, False), (3.0, 3.0, False), (4.0, 4.0, False)]])
    assert batch.shape == (2, 6, 3)
    np.testing.assert_array_equal(batch[0, :, 2], [0, -1, -1, -1, -1, -1])
    limited = encode_points([[(1.0, 1.0, True), (2.0, 2.0, True), (3.0, 3.0, False)]], clicks_limit=2)
    np.testing.assert_array_equal(limited[0], [[1, 1, 0], [2, 2, 1], [-1, -1, -1], [-1, -1, -1]])


def test_no_clicks_still_give_one_padding_pair():
    np.testing.assert_array_equal(encode_points([[]]), [[[-1, -1, -1], [-1, -1, -1]]])


def test_expand_box_by_hand():
    # rows 100..139 (40 px) -> 1.4 * 40 = 56 < 200 -> 200 around centre 119.5: round(19.5)=20, round(219.5)=220
    # cols 50..349 (300 px) -> 420 around centre 199.5: round(-10.5)=-10 -> clamp 0, round(409.5)=410 -> clamp 399
    box = expand_box((100, 139, 50, 349), expansion_ratio=1.4, min_crop_size_px=200, height=480, width=400)
    assert box == (20, 220, 0, 399)


def test_box_iou_by_hand():
    assert box_iou((0, 9, 0, 9), (5, 14, 0, 9)) == pytest.approx(50 / 150)


def test_zoom_box_is_kept_while_it_holds_the_clicks_and_overlaps():
    zoom = ZoomIn(target_size_px=400, skip_clicks=1, min_crop_size_px=20)
    probabilities = np.zeros((100, 100), np.float32)
    probabilities[40:60, 40:60] = 0.9
    clicks = [Click(x=50, y=50), Click(x=45, y=45)]
    assert zoom.choose_box(clicks=clicks[:1], previous=None, height=100, width=100) is None
    box = zoom.choose_box(clicks=clicks, previous=IsegmState(probabilities, None), height=100, width=100)
    assert box == (36, 64, 36, 64)  # 20 px * 1.4 = 28 around 49.5
    kept = (30, 70, 30, 70)
    assert (
        zoom.choose_box(clicks=clicks, previous=IsegmState(probabilities, kept), height=100, width=100)
        == kept
    )
    far = clicks + [Click(x=90, y=90)]  # a positive click outside the kept box forces a new one
    assert (
        zoom.choose_box(clicks=far, previous=IsegmState(probabilities, kept), height=100, width=100) != kept
    )


def test_first_click_runs_on_the_whole_image_and_lands_on_the_click():
    image, _ = square_scene(80, 120)
    predictor = _ritm()
    prediction = predictor.predict(predictor.encode(image), [Click(x=30, y=40)])
    assert prediction.extra["zoom_box"] is None
    assert predictor.net.seen_shapes[-1] == (2, 4, 80, 120)  # flip doubles the batch; 4th channel = prev
    mask = predictor.predict_mask(prediction)
    assert mask[40, 30] and not mask[40, 90]
    assert predictor.threshold == 0.49


def test_zoomed_second_click_is_mapped_back_to_image_coordinates():
    image, _ = square_scene(300, 400)
    predictor = _ritm(zoom_in_target_size_px=400)
    embedding = predictor.encode(image)
    first = predictor.predict(embedding, [Click(x=100, y=100)])
    second = predictor.predict(
        embedding, [Click(x=100, y=100), Click(x=110, y=100, is_positive=False)], first.logits
    )
    box = second.extra["zoom_box"]
    assert box is not None and box[0] <= 100 <= box[1]
    assert predictor.net.seen_shapes[-1][2:] == predictor.zoom_in.crop_size(box)
    mask = predictor.predict_mask(second)
    assert not mask[100, 110], "the negative click must stay at its place after zoom and flip"
    assert mask[100, 100] and mask[100, 98] and not mask[100, 92]


def test_flip_tta_mirrors_clicks_consistently():
    image, _ = square_scene(50, 80)
    with_flip = _ritm(with_flip=True, zoom_in_target_size_px=0)
    without = _ritm(with_flip=False, zoom_in_target_size_px=0)
    clicks = [Click(x=10, y=20), Click(x=60, y=30, is_positive=False)]
    flipped = with_flip.predict(with_flip.encode(image), clicks).probabilities
    plain = without.predict(without.encode(image), clicks).probabilities
    np.testing.assert_allclose(flipped, plain, atol=1e-5)
    original, mirrored = with_flip.net.seen_points[-1]
    assert original.tolist() == [[20, 10, 0], [30, 60, 1]]
    assert mirrored.tolist() == [[20, 80 - 10 - 1, 0], [30, 80 - 60 - 1, 1]]


def test_previous_probabilities_are_the_fourth_channel():
    image, _ = square_scene(50, 80)
    predictor = _ritm(zoom_in_target_size_px=0)
    previous = np.zeros((50, 80), np.float32)
    previous[:, 60:] = 1.0  # the stand-in net keeps what the previous mask says
    prediction = predictor.predict(predictor.encode(image), [Click(x=10, y=10)], previous)
    mask = predictor.predict_mask(prediction)
    assert mask[25, 70] and mask[10, 10] and not mask[25, 40]


def test_wrong_previous_shape_is_rejected():
    image, _ = square_scene(50, 80)
    predictor = _ritm()
    with pytest.raises(SegmenterError, match=r"\(5, 5\).*\(50, 80\)"):
        predictor.predict(predictor.encode(image), [Click(x=1, y=1)], np.zeros((5, 5), np.float32))


def test_model_types_match_rclicks_tokens():
    assert RitmPredictor.model_type == "ritm" and SimpleClickPredictor.model_type == "simple"
    assert RitmPredictor.threshold == SimpleClickPredictor.threshold == 0.49


def test_checkpoint_loading_without_isegm_says_what_to_install(tmp_path):
    assert isegm_missing() is not None, "these tests expect no isegm package in the project environment"
    with pytest.raises(SegmenterError, match="isegm.*clone"):
        get_predictor("ritm", checkpoint=tmp_path / "coco_lvis_h18_itermask.pth")
    with pytest.raises(SegmenterError, match="isegm.*clone"):
        SimpleClickPredictor(checkpoint=tmp_path / "cocolvis_vit_base.pth", device="cpu")
