"""RITM/SimpleClick adapter: click encoding, zoom-in geometry and flip TTA, on stand-in networks.

The ``isegm`` package (RITM/SimpleClick clones) is not installable from PyPI, so the predictor is
driven with ``model=`` (or with a stand-in clone on ``sys.path``): small networks following the isegm
interface whose output is a known function of the clicks, which lets the tests check where the clicks
end up after zoom and flip. SimpleClick's stand-in is a tiny plain ViT with a fixed patch grid
(``standins.TinyPlainVitModel``), so it fails on any input size but its own, as the real one does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib

import numpy as np
import pytest
import torch

from segmenters.base import CheckpointError, Click, SegmenterError
from segmenters.isegm import (
    IsegmState,
    RitmPredictor,
    SimpleClickPredictor,
    ZoomIn,
    box_holds_positive_clicks,
    box_iou,
    checkpoint_architecture,
    encode_points,
    expand_box,
    fit_position_embedding,
    isegm_missing,
    ritm_missing,
    simpleclick_missing,
)
from segmenters.provenance import predictor_provenance
from segmenters.registry import available_predictors, get_predictor

from .conftest import square_scene
from .standins import (
    PLAINVIT_MODEL,
    RITM_SERIALIZATION,
    TinyPlainVitModel,
    isegm_checkpoint,
    isegm_clone,
)


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


def test_after_an_empty_prediction_the_whole_image_prediction_is_squeezed_into_the_kept_box():
    # Upstream's ZoomIn: click 3 follows an empty prediction, so no new box can be made; the whole image goes
    # to the network, and the inverse transform still uses the object ROI of click 2, squeezing the
    # whole-image prediction into it. The box is kept for the next click.
    image, _ = square_scene(300, 600)
    predictor = _ritm(zoom_in_target_size_px=400)
    embedding = predictor.encode(image)
    clicks = [Click(x=100, y=100), Click(x=100, y=100, is_positive=False), Click(x=450, y=250)]
    first = predictor.predict(embedding, clicks[:1])
    second = predictor.predict(embedding, clicks[:2], first.logits)
    kept = second.extra["zoom_box"]
    assert kept is not None and not predictor.predict_mask(second).any(), "click 2 must leave nothing"
    third = predictor.predict(embedding, clicks, second.logits)
    assert third.extra["zoom_box"] is None and third.extra["roi"] == kept == third.logits.object_box
    assert predictor.net.seen_shapes[-1] == (2, 4, 300, 600)  # the whole image went in
    # what the network said about the whole image, computed without zoom from the same inputs
    plain = _ritm(zoom_in_target_size_px=0)
    whole = plain.predict(plain.encode(image), clicks, second.probabilities).probabilities
    assert whole[250, 450] > 0.49  # the new click's disk, far outside the kept box
    height, width = kept[1] - kept[0] + 1, kept[3] - kept[2] + 1
    squeezed = torch.nn.functional.interpolate(
        torch.from_numpy(whole)[None, None], size=(height, width), mode="bilinear", align_corners=True
    )[0, 0].numpy()
    expected = np.zeros_like(whole)
    expected[kept[0] : kept[1] + 1, kept[2] : kept[3] + 1] = squeezed
    np.testing.assert_allclose(third.probabilities, expected, atol=1e-5)
    ours, theirs = predictor.predict_mask(third), whole > predictor.threshold
    assert theirs.any() and ours.any() and not (ours & theirs).any()  # IoU 0, as measured against upstream


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


# --------------------------------------------------------------------------------------------------
# SimpleClick: a plain ViT with a fixed patch grid (the stand-in has upstream's shape constraint)


def _simpleclick(**options) -> SimpleClickPredictor:
    torch.manual_seed(0)
    return SimpleClickPredictor(model=TinyPlainVitModel(img_size=64, patch_size=8), device="cpu", **options)


@pytest.mark.parametrize("shape", [(60, 90), (90, 60), (37, 61)])
def test_simpleclick_runs_a_fixed_grid_vit_on_images_that_are_not_its_square(shape):
    # A real plain ViT fails on any input but its own size (RuntimeError: The size of tensor a (77) must
    # match the size of tensor b (64)); every input must be resized to the fixed square, from click 1.
    height, width = shape
    image, _ = square_scene(height, width)
    predictor = _simpleclick()
    embedding = predictor.encode(image)
    clicks = [
        Click(x=width * 0.3, y=height * 0.5),
        Click(x=width * 0.7, y=height * 0.5, is_positive=False),
        Click(x=width * 0.35, y=height * 0.4),
    ]
    logits = None
    for count in range(1, len(clicks) + 1):
        prediction = predictor.predict(embedding, clicks[:count], logits)
        logits = prediction.logits
        assert predictor.net.seen_shapes[-1] == (2, 4, 64, 64)  # flip pair, RGB + previous, the square
        assert prediction.probabilities.shape == shape
    mask = predictor.predict_mask(prediction)
    assert mask[int(height * 0.5), int(width * 0.3)] and not mask[int(height * 0.5), int(width * 0.7)]


def test_simpleclick_first_click_is_the_whole_image_resized_to_the_square():
    image, _ = square_scene(60, 90)
    predictor = _simpleclick()
    prediction = predictor.predict(predictor.encode(image), [Click(x=30, y=20)])
    assert prediction.extra["zoom_box"] == (0, 59, 0, 89)  # skip_clicks=-1: zoomed from the first click
    original, mirrored = predictor.net.seen_points[-1]
    # (y, x) scaled by 64/60 and 64/90 into the square; the mirror of x in the 64 px wide input.
    np.testing.assert_allclose(original[0], [20 * 64 / 60, 30 * 64 / 90, 0], rtol=1e-6)
    np.testing.assert_allclose(mirrored[0], [20 * 64 / 60, 64 - 30 * 64 / 90 - 1, 0], rtol=1e-6)
    assert predictor.zoom_in.square and predictor.zoom_in.target_size_px == 64
    assert predictor.model_id.endswith("zoom64x64s-1:flip1:limNone")


def test_simpleclick_later_clicks_zoom_into_the_object_at_the_fixed_square():
    image, _ = square_scene(300, 400)
    predictor = _simpleclick(zoom_in_target_size_px=64)
    embedding = predictor.encode(image)
    first = predictor.predict(embedding, [Click(x=100, y=100)])
    second = predictor.predict(
        embedding, [Click(x=100, y=100), Click(x=125, y=100, is_positive=False)], first.logits
    )
    box = second.extra["zoom_box"]
    assert box != (0, 299, 0, 399) and box[0] <= 100 < box[1] and box[2] <= 100 < box[3]
    assert predictor.net.seen_shapes[-1] == (2, 4, 64, 64)  # the object box, not its aspect, at 64 x 64
    mask = predictor.predict_mask(second)
    # The 200 px box is resized to 64 px: the negative click is 8 px from the positive one in the square.
    assert mask[100, 100] and mask[100, 75] and not mask[100, 125], (
        "the negative click stays where it was made after zoom and flip"
    )


def test_position_embedding_is_interpolated_for_another_square():
    torch.manual_seed(0)
    net = TinyPlainVitModel(img_size=64, patch_size=8)
    with torch.no_grad():
        net.backbone.pos_embed[:, 0] = 7.0  # class token: must be kept as it is
        net.backbone.pos_embed[:, 1:] = 0.25  # a constant grid stays constant under bicubic resizing
    predictor = SimpleClickPredictor(model=net, device="cpu", zoom_in_target_size_px=96)  # DAVIS-like 672/448
    assert net.backbone.patch_embed.grid_size == (12, 12) and predictor.grid.input_size == (96, 96)
    position = net.backbone.pos_embed.detach()
    assert tuple(position.shape) == (1, 1 + 144, 16)
    assert torch.all(position[:, 0] == 7.0)
    torch.testing.assert_close(position[:, 1:], torch.full((1, 144, 16), 0.25))
    image, _ = square_scene(50, 70)
    predictor.predict(predictor.encode(image), [Click(x=20, y=20)])
    assert net.seen_shapes[-1] == (2, 4, 96, 96)


def test_interpolating_to_the_same_grid_changes_nothing():
    torch.manual_seed(0)
    net = TinyPlainVitModel(img_size=64, patch_size=8)
    before = net.backbone.pos_embed.detach().clone()
    fit_position_embedding(net, side_px=64)
    assert torch.equal(net.backbone.pos_embed.detach(), before)


def test_square_that_is_not_a_multiple_of_the_patch_is_refused():
    with pytest.raises(SegmenterError, match=r"100 px is not a multiple of the network's 8x8 px patches"):
        _simpleclick(zoom_in_target_size_px=100)
    # 72 px = a 9x9 grid: upstream's backbone cannot cut it into 2x2 windows (it would fail on every click).
    with pytest.raises(SegmenterError, match=r"72 px gives a 9x9 token grid.*use a multiple of 16 px"):
        _simpleclick(zoom_in_target_size_px=72)
    with pytest.raises(SegmenterError, match="fixed patch grid"):
        _simpleclick(zoom_in_target_size_px=0)


def test_a_fixed_grid_vit_is_refused_by_the_aspect_keeping_zoom_of_ritm():
    with pytest.raises(SegmenterError, match=r"plain ViT with a fixed 8x8 patch grid.*fixed-square zoom-in"):
        RitmPredictor(model=TinyPlainVitModel(img_size=64, patch_size=8), device="cpu")


def test_a_runtime_error_inside_the_network_is_a_segmenter_error():
    # An itermask checkpoint run by a network built without the previous-mask channel: torch raises a
    # real RuntimeError in the coordinate patch embedding (expects 2 channels, gets 3).
    torch.manual_seed(0)
    net = TinyPlainVitModel(img_size=64, patch_size=8, coord_chans=2)
    predictor = SimpleClickPredictor(model=net, device="cpu")
    image, _ = square_scene(40, 50)
    with pytest.raises(
        SegmenterError, match=r"running the network on a \(2, 4, 64, 64\) input failed with RuntimeError"
    ) as caught:
        predictor.predict(predictor.encode(image), [Click(x=10, y=10)])
    assert "clone matches the checkpoint" in str(caught.value)
    assert isinstance(caught.value.__cause__, RuntimeError)


def test_zoom_box_keeps_upstream_half_open_bounds():
    # isegm's check_object_roi counts the box's last row/column as outside: a positive click there forces
    # a new box.
    box = (10, 50, 20, 60)
    assert box_holds_positive_clicks(box, [Click(x=20, y=10), Click(x=59.5, y=49.5)])
    assert not box_holds_positive_clicks(box, [Click(x=30, y=50)])
    assert not box_holds_positive_clicks(box, [Click(x=60, y=30)])
    assert box_holds_positive_clicks(box, [Click(x=60, y=50, is_positive=False)])


# --------------------------------------------------------------------------------------------------
# The user's clone: what building imports, and its failures as SegmenterError


# SimpleClick's model module imports its head, which imports timm and mmcv (isegm/model/modeling/
# swin_transformer.py); neither is installed here.
PLAINVIT_MODEL_WITH_MMCV_HEAD = """
    from mmcv.cnn import ConvModule

    from tests.segmenters.standins import TinyPlainVitModel as PlainVitModel
"""

# RITM's click-map code written for NumPy < 1.24.
HRNET_MODEL_WITH_NP_INT = """
    import numpy as np
    import torch


    class HRNetModel(torch.nn.Module):
        with_prev_mask = True

        def __init__(self, width=4):
            super().__init__()
            self.conv = torch.nn.Conv2d(4, 1, 1)

        def forward(self, image, points):
            radius = np.int(5)
            return {"instances": self.conv(image) * radius}
"""


def test_simpleclick_checkpoint_from_a_clone_runs_on_any_image_size(installed_package, tmp_path):
    isegm_clone(installed_package, PLAINVIT_MODEL, module="is_plainvit_model")
    assert simpleclick_missing() is None and "simpleclick" in available_predictors()
    torch.manual_seed(3)
    params = {"img_size": 64, "patch_size": 8}
    path = tmp_path / "cocolvis_vit_xtiny.pth"
    isegm_checkpoint(path, "isegm.model.is_plainvit_model.PlainVitModel", params, TinyPlainVitModel(**params))
    predictor = get_predictor("simpleclick", checkpoint=path, device="cpu")
    image, _ = square_scene(48, 80)
    prediction = predictor.predict(predictor.encode(image), [Click(x=20, y=24)])
    assert predictor.net.seen_shapes[-1] == (2, 4, 64, 64) and prediction.probabilities.shape == (48, 80)
    assert predictor.predict_mask(prediction)[24, 20]
    record = predictor_provenance(predictor)
    assert record.checkpoint_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    # named like the xtiny release, but the file holds a 16-wide, 2-deep ViT: its provenance says so
    assert (record.predictor, record.model_type, record.variant) == (
        "simpleclick",
        "simple",
        "custom-vit16x2p8",
    )


def test_simpleclick_clone_without_mmcv_is_unavailable_and_says_what_to_install(installed_package, tmp_path):
    isegm_clone(installed_package, PLAINVIT_MODEL_WITH_MMCV_HEAD, module="is_plainvit_model")
    reason = simpleclick_missing()
    assert reason and "'mmcv'" in reason and "install mmcv" in reason and "is_plainvit_model.py" in reason
    assert "simpleclick" not in available_predictors()
    path = tmp_path / "cocolvis_vit_base.pth"
    path.write_bytes(b"never read: the code is missing first")
    with pytest.raises(SegmenterError, match=r"predictor 'simpleclick' cannot run here: .*'mmcv'"):
        get_predictor("simpleclick", checkpoint=path, variant="vit_base")


def test_ritm_clone_using_np_int_fails_with_a_segmenter_error_naming_the_fix(installed_package, tmp_path):
    isegm_clone(
        installed_package, HRNET_MODEL_WITH_NP_INT, module="is_hrnet_model", serialization=RITM_SERIALIZATION
    )
    assert ritm_missing() is None and "ritm" in available_predictors()
    path = tmp_path / "coco_lvis_h18_itermask.pth"
    module = importlib.import_module("isegm.model.is_hrnet_model")
    isegm_checkpoint(path, "isegm.model.is_hrnet_model.HRNetModel", {"width": 4}, module.HRNetModel())
    predictor = get_predictor("ritm", checkpoint=path, device="cpu")
    image, _ = square_scene(30, 40)
    with pytest.raises(SegmenterError) as caught:
        predictor.predict(predictor.encode(image), [Click(x=5, y=5)])
    message = str(caught.value)
    assert "RITM clone (isegm)" in message and "np.int" in message and "NumPy" in message
    assert "is_hrnet_model.py" in message and "replace np.int with int" in message
    assert isinstance(caught.value.__cause__, AttributeError)


def test_no_other_input_size_ever_reaches_a_fixed_grid_vit():
    # Were the zoom-in ever changed to keep the aspect ratio, the adapter refuses before PyTorch's bare
    # "size of tensor a must match" error deep inside the network.
    predictor = _simpleclick()
    predictor.zoom_in = dataclasses.replace(predictor.zoom_in, square=False)
    image, _ = square_scene(60, 90)
    with pytest.raises(
        SegmenterError, match=r"refusing to run a plain ViT with a 8x8 patch grid on a 43x64 input"
    ):
        predictor.predict(predictor.encode(image), [Click(x=30, y=30)])
    assert predictor.net.seen_shapes == []


# An RITM HRNet model as SimpleClick's clone ships it: RITM trained it with use_rgb_conv=True (RITM's default,
# so the saved config does not name it), SimpleClick's ISModel defaults to False.
HRNET_MODEL_IN_A_SIMPLECLICK_CLONE = """
    import torch


    class HRNetModel(torch.nn.Module):
        with_prev_mask = True

        def __init__(self, width=4, use_rgb_conv=False):
            super().__init__()
            self.maps_transform = torch.nn.Conv2d(3, 4, 1) if use_rgb_conv else torch.nn.Identity()
            self.conv = torch.nn.Conv2d(4, 1, 1)

        def forward(self, image, points):
            return {"instances": self.conv(image)}
"""

# RITM's hrnet_ocr.py builds its last layer with np.int(np.sum(...)): under NumPy >= 1.24 building fails.
HRNET_MODEL_WITH_NP_INT_IN_INIT = """
    import numpy as np
    import torch


    class HRNetModel(torch.nn.Module):
        def __init__(self, width=4):
            super().__init__()
            last_inp_channels = np.int(np.sum([width, width]))
            self.conv = torch.nn.Conv2d(4, last_inp_channels, 1)
"""


def test_an_ritm_checkpoint_in_a_simpleclick_clone_is_built_as_upstream_evaluates_it(
    installed_package, tmp_path
):
    isegm_clone(installed_package, HRNET_MODEL_IN_A_SIMPLECLICK_CLONE, module="is_hrnet_model")
    module = importlib.import_module("isegm.model.is_hrnet_model")
    torch.manual_seed(5)
    trained = module.HRNetModel(width=4, use_rgb_conv=True)
    path = tmp_path / "coco_lvis_h18_itermask.pth"
    isegm_checkpoint(path, "isegm.model.is_hrnet_model.HRNetModel", {"width": 4}, trained)
    predictor = get_predictor("ritm", checkpoint=path, device="cpu")
    # eval_ritm=True: the click-map transform exists and holds the file's weights (not silently dropped).
    assert isinstance(predictor.net.maps_transform, torch.nn.Conv2d)
    torch.testing.assert_close(predictor.net.maps_transform.weight, trained.maps_transform.weight)


def test_ritm_clone_using_np_int_while_building_fails_with_a_segmenter_error(installed_package, tmp_path):
    isegm_clone(
        installed_package,
        HRNET_MODEL_WITH_NP_INT_IN_INIT,
        module="is_hrnet_model",
        serialization=RITM_SERIALIZATION,
    )
    assert "ritm" in available_predictors()  # importing works; building the network is what fails
    path = tmp_path / "coco_lvis_h18_itermask.pth"
    torch.save(
        {
            "config": {"class": "isegm.model.is_hrnet_model.HRNetModel", "params": {"width": 4}},
            "state_dict": {},
        },
        path,
    )
    with pytest.raises(SegmenterError) as caught:
        get_predictor("ritm", checkpoint=path, device="cpu")
    message = str(caught.value)
    assert "building the network of coco_lvis_h18_itermask.pth" in message
    assert "np.int" in message and "is_hrnet_model.py" in message and "replace np.int with int" in message


def test_a_checkpoint_the_clone_cannot_build_is_a_segmenter_error_naming_the_mismatch(
    installed_package, tmp_path
):
    # A checkpoint saved by another release: its config names a parameter this clone's class does not take;
    # SimpleClick's load_model asserts on it (a bare AssertionError would crash a next-round build).
    isegm_clone(installed_package, PLAINVIT_MODEL, module="is_plainvit_model")
    params = {"img_size": 64, "patch_size": 8}
    path = tmp_path / "cocolvis_vit_xtiny.pth"
    isegm_checkpoint(
        path,
        "isegm.model.is_plainvit_model.PlainVitModel",
        {**params, "random_split": False},
        TinyPlainVitModel(**params),
    )
    with pytest.raises(SegmenterError) as caught:
        get_predictor("simpleclick", checkpoint=path, device="cpu")
    message = str(caught.value)
    assert message.startswith(
        "SimpleClick clone (isegm): building the network of cocolvis_vit_xtiny.pth failed with AssertionError"
    )
    assert "serialization.py" in message and "The clone does not match the checkpoint" in message
    assert isinstance(caught.value.__cause__, AssertionError)


def test_a_simpleclick_clone_beside_mmcv_2_names_mmcv_1(installed_package):
    # mmcv 2 has mmcv.cnn.ConvModule but no longer mmcv.utils.get_logger, which SimpleClick's head helpers
    # (modeling/swin_transformer_helper/logger.py) import.
    installed_package(
        {
            "mmcv/__init__.py": "__version__ = '2.2.0'\n",
            "mmcv/cnn.py": "ConvModule = object\n",
            "mmcv/utils.py": "",
        }
    )
    isegm_clone(
        installed_package,
        "from mmcv.cnn import ConvModule\nfrom mmcv.utils import get_logger\n",
        module="is_plainvit_model",
    )
    reason = simpleclick_missing()
    assert reason and "cannot import name 'get_logger' from 'mmcv.utils'" in reason
    assert "the installed mmcv is not the release SimpleClick clone (isegm) was written for" in reason
    assert "install mmcv 1.x" in reason and "is_plainvit_model.py:2" in reason
    assert "simpleclick" not in available_predictors()


# --------------------------------------------------------------------------------------------------
# The variant is the architecture the file holds


# RITM's HRNetModel as far as the adapter reads it: its width (and ``small``) build layers of that width.
HRNET_MODEL_WITH_WIDTH = """
    import torch


    class HRNetModel(torch.nn.Module):
        with_prev_mask = True

        def __init__(self, width=18, small=False):
            super().__init__()
            self.conv = torch.nn.Conv2d(4, width, 1)
            self.head = torch.nn.Conv2d(width, 1, 1)

        def forward(self, image, points):
            return {"instances": self.head(self.conv(image))}
"""


def _hrnet_checkpoint(installed_package, path, **params):
    isegm_clone(
        installed_package, HRNET_MODEL_WITH_WIDTH, module="is_hrnet_model", serialization=RITM_SERIALIZATION
    )
    module = importlib.import_module("isegm.model.is_hrnet_model")
    isegm_checkpoint(path, "isegm.model.is_hrnet_model.HRNetModel", params, module.HRNetModel(**params))
    return path


def test_an_ritm_checkpoint_under_another_variant_is_refused_naming_the_variant_it_holds(
    installed_package, tmp_path
):
    path = _hrnet_checkpoint(installed_package, tmp_path / "coco_lvis_h18_itermask.pth", width=32)
    with pytest.raises(CheckpointError) as caught:
        get_predictor("ritm", checkpoint=path, variant="hrnet18_cocolvis", device="cpu")
    message = str(caught.value)
    assert (
        str(path) in message
        and "holds a hrnet32 network, not the hrnet18 of ritm variant 'hrnet18_cocolvis'" in message
    )
    assert "pass variant 'hrnet32_cocolvis'" in message
    # without a variant, the one the file holds; every mask's provenance records it
    predictor = get_predictor("ritm", checkpoint=path, device="cpu")
    assert predictor.architecture == "hrnet32"
    record = predictor_provenance(predictor)
    assert record.variant == "hrnet32_cocolvis" and record.model_id.startswith("ritm:hrnet32_cocolvis:")
    assert (
        get_predictor("ritm", checkpoint=path, variant="hrnet32_cocolvis", device="cpu").variant
        == "hrnet32_cocolvis"
    )


def test_ritm_variants_of_one_architecture_are_both_accepted_and_small_is_told_apart(
    installed_package, tmp_path
):
    path = _hrnet_checkpoint(installed_package, tmp_path / "sbd_h18_itermask.pth", width=18)
    assert (
        get_predictor("ritm", checkpoint=path, variant="hrnet18_sbd", device="cpu").variant == "hrnet18_sbd"
    )
    assert (
        get_predictor("ritm", checkpoint=path, device="cpu").variant == "hrnet18_cocolvis"
    )  # the default fits
    small = _hrnet_checkpoint(
        installed_package, tmp_path / "coco_lvis_h18s_itermask.pth", width=18, small=True
    )
    assert get_predictor("ritm", checkpoint=small, device="cpu").variant == "hrnet18s_cocolvis"
    with pytest.raises(CheckpointError, match="holds a hrnet18s network.*pass variant 'hrnet18s_cocolvis'"):
        get_predictor("ritm", checkpoint=small, variant="hrnet18_cocolvis", device="cpu")
    odd = _hrnet_checkpoint(installed_package, tmp_path / "h64.pth", width=64)
    assert get_predictor("ritm", checkpoint=odd, device="cpu").variant == "custom-hrnet64"
    with pytest.raises(CheckpointError, match="no ritm variant has it: leave the variant out"):
        get_predictor("ritm", checkpoint=odd, variant="hrnet32_cocolvis", device="cpu")


def test_a_simpleclick_checkpoint_under_another_variant_is_refused(installed_package, tmp_path):
    # SimpleClick's ViT-xTiny shape (160 wide, 8 blocks, 16 px patches) on a 64 px square, random weights
    isegm_clone(installed_package, PLAINVIT_MODEL, module="is_plainvit_model")
    torch.manual_seed(2)
    params = {"img_size": 64, "patch_size": 16, "embed_dim": 160, "depth": 8}
    path = tmp_path / "cocolvis_vit_base.pth"
    isegm_checkpoint(path, "isegm.model.is_plainvit_model.PlainVitModel", params, TinyPlainVitModel(**params))
    with pytest.raises(CheckpointError, match=r"holds a vit160x8p16 network, not the vit768x12p16 of simpleclick "
                                              r"variant 'vit_base': pass variant 'vit_xtiny'"):  # fmt: skip
        get_predictor("simpleclick", checkpoint=path, variant="vit_base", device="cpu")
    predictor = get_predictor("simpleclick", checkpoint=path, device="cpu")
    assert predictor_provenance(predictor).variant == "vit_xtiny"


def test_the_architecture_is_read_from_upstreams_saved_config():
    # upstream's serialize() saves every parameter as {"type", "value", "specified"}
    def saved(**params):
        return {
            name: {"type": "builtin", "value": value, "specified": True} for name, value in params.items()
        }

    hrnet = "isegm.model.is_hrnet_model.HRNetModel"
    assert (
        checkpoint_architecture({"class": hrnet, "params": saved(width=18, small=True, ocr_width=48)}, {})
        == "hrnet18s"
    )
    assert checkpoint_architecture({"class": hrnet, "params": saved(width=32, small=False)}, {}) == "hrnet32"
    other = {"class": "isegm.model.is_segformer_model.SegformerModel", "params": saved(type="b0")}
    assert checkpoint_architecture(other, {}) == "SegformerModel"
