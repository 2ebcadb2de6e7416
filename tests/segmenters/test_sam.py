"""SAM adapter on a tiny random-initialised SAM: preprocessing, decoding, state handling."""

from __future__ import annotations

import importlib
import sys
import types

import numpy as np
import pytest
import torch
from PIL import Image

from segmenters.base import Click, SegmenterError
from segmenters.registry import get_predictor
from segmenters.sam import PIXEL_MEAN, PIXEL_STD, SAM_VARIANTS, import_sam_modeling, resize_longest_side

from .conftest import TINY_SAM, square_scene


@pytest.fixture(scope="module")
def sam(tiny_sam_checkpoint):
    return get_predictor("sam", checkpoint=tiny_sam_checkpoint, architecture=TINY_SAM, device="cpu")


def test_modeling_imports_without_the_package_init_and_without_torchvision():
    modeling = import_sam_modeling()
    assert hasattr(modeling, "Sam") and hasattr(modeling, "ImageEncoderViT")
    assert "torchvision" not in sys.modules
    # The real package name stays free for code that has torchvision.
    assert "segment_anything" not in sys.modules


def test_official_variants_and_file_names():
    assert {name: arch.default_checkpoint for name, arch in SAM_VARIANTS.items()} == {
        "vit_h": "sam_vit_h_4b8939.pth",
        "vit_l": "sam_vit_l_0b3195.pth",
        "vit_b": "sam_vit_b_01ec64.pth",
    }


def test_preprocess_resizes_the_long_side_normalises_and_pads(sam):
    image = np.full((50, 80, 3), (10, 200, 30), np.uint8)
    tensor, (new_h, new_w) = sam.preprocess(image)
    # long side 80 -> 128: h = int(50 * 128 / 80 + 0.5) = 80
    assert (new_h, new_w) == (80, 128)
    assert tuple(tensor.shape) == (1, 3, 128, 128)
    expected = (np.array([10, 200, 30], np.float32) - PIXEL_MEAN) / PIXEL_STD
    np.testing.assert_allclose(tensor[0, :, 40, 64].numpy(), expected, rtol=1e-5)
    assert torch.count_nonzero(tensor[0, :, 80:, :]) == 0


def test_predict_matches_the_libraries_own_forward(sam):
    # Sam.forward normalises and pads with its own buffers and runs everything per call: feeding it
    # our resized image must give the same low-res logits, choice and mask as encode-once + predict.
    image, _ = square_scene(150, 200)  # shrinks to 96 x 128
    embedding = sam.encode(image)
    clicks = [Click(x=70, y=75, is_positive=True), Click(x=180, y=5, is_positive=False)]
    ours = sam.predict(embedding, clicks)

    new_h, new_w = embedding.payload.input_size
    resized = resize_longest_side(image, 128)
    assert (new_h, new_w) == (96, 128)
    scale = torch.tensor([new_w / 200, new_h / 150])
    coords = torch.tensor([[[70.0, 75.0], [180.0, 5.0]]]) * scale
    with torch.inference_mode():
        outputs = sam.model(
            [
                {
                    "image": torch.from_numpy(resized).permute(2, 0, 1).float(),
                    "original_size": (150, 200),
                    "point_coords": coords,
                    "point_labels": torch.tensor([[1, 0]]),
                }
            ],
            multimask_output=True,
        )[0]
    best = int(torch.argmax(outputs["iou_predictions"][0]))
    assert ours.extra["mask_index"] == best
    np.testing.assert_allclose(ours.logits, outputs["low_res_logits"][:, best : best + 1].numpy(), atol=1e-4)
    agreement = (ours.probabilities > 0.5) == outputs["masks"][0, best].numpy()
    assert agreement.mean() > 0.999


def test_previous_logits_are_fed_back_as_mask_input(sam):
    image, _ = square_scene()
    embedding = sam.encode(image)
    clicks = [Click(x=30, y=30), Click(x=60, y=40)]
    first = sam.predict(embedding, clicks[:1])
    fresh = sam.predict(embedding, clicks)
    chained = sam.predict(embedding, clicks, first.logits)
    assert not np.allclose(fresh.logits, chained.logits)
    # A 2-click trajectory with a negative second click keeps its memory (no reference heuristic reset).
    negative = [Click(x=30, y=30), Click(x=60, y=40, is_positive=False)]
    assert not np.allclose(
        sam.predict(embedding, negative, first.logits).logits, sam.predict(embedding, negative).logits
    )


def test_previous_logits_of_the_wrong_shape_are_rejected(sam):
    image, _ = square_scene()
    with pytest.raises(SegmenterError, match=r"\(1, 1, 32, 32\)"):
        sam.predict(sam.encode(image), [Click(x=3, y=3)], np.zeros((60, 90), np.float32))


def test_embedding_of_another_checkpoint_is_rejected(sam, other_tiny_sam_checkpoint):
    other = get_predictor("sam", checkpoint=other_tiny_sam_checkpoint, architecture=TINY_SAM, device="cpu")
    image, _ = square_scene()
    with pytest.raises(SegmenterError, match="encode the image with the predictor that predicts"):
        sam.predict(other.encode(image), [Click(x=3, y=3)])


def test_predict_without_clicks_is_an_error(sam):
    image, _ = square_scene()
    with pytest.raises(SegmenterError, match="at least one click"):
        sam.predict(sam.encode(image), [])


def test_unknown_variant_lists_the_known_ones(tiny_sam_checkpoint):
    with pytest.raises(SegmenterError, match=r"unknown sam variant 'vit_x'.*vit_b"):
        get_predictor("sam", checkpoint=tiny_sam_checkpoint, variant="vit_x")


def test_model_runs_under_inference_mode(sam):
    image, _ = square_scene()
    embedding = sam.encode(image)
    assert embedding.payload.features.is_inference()
    assert not embedding.payload.features.requires_grad


# --------------------------------------------------------------------------------------------------
# Preprocessing identical to upstream segment_anything (ResizeLongestSide + Sam.preprocess)


@pytest.fixture
def upstream_transforms(monkeypatch):
    """``segment_anything.utils.transforms`` (the installed segment-anything 1.0) for the comparison.

    It imports ``resize`` and ``to_pil_image`` from torchvision, which must not be installed here (it
    breaks this torch build). For a uint8 HWC array and a PIL image those two are, in torchvision's
    code, ``Image.fromarray(array, mode="RGB")`` and ``image.resize((w, h), Image.BILINEAR)``
    (``torchvision/transforms/functional.py`` -> ``_functional_pil.resize``); the stand-in module below
    is exactly that PIL path and nothing else.
    """
    functional = types.ModuleType("torchvision.transforms.functional")
    functional.to_pil_image = lambda array: Image.fromarray(array, mode="RGB")
    functional.resize = lambda image, size: image.resize((size[1], size[0]), Image.BILINEAR)
    transforms = types.ModuleType("torchvision.transforms")
    transforms.functional = functional
    torchvision = types.ModuleType("torchvision")
    torchvision.transforms = transforms
    for name, module in (
        ("torchvision", torchvision),
        ("torchvision.transforms", transforms),
        ("torchvision.transforms.functional", functional),
    ):
        monkeypatch.setitem(sys.modules, name, module)
    import_sam_modeling()  # creates the private parent the utils subpackage is loaded under
    name = "_clicklab_segment_anything.utils.transforms"
    yield importlib.import_module(name)
    for loaded in ("_clicklab_segment_anything.utils", name):
        sys.modules.pop(loaded, None)


@pytest.mark.parametrize("shape", [(150, 200), (61, 37), (333, 500), (128, 128)])
def test_preprocessing_is_upstream_resize_longest_side_and_sam_preprocess_exactly(
    sam, upstream_transforms, shape
):
    # A noisy, detailed image: shrinking it is where PIL's bilinear and OpenCV's filters differ most.
    rng = np.random.default_rng(11)
    image = rng.integers(0, 256, size=(*shape, 3), dtype=np.uint8)
    image[: shape[0] // 2] = np.clip(image[: shape[0] // 2].astype(int) // 4 + 100, 0, 255).astype(np.uint8)
    upstream = upstream_transforms.ResizeLongestSide(128)
    expected_resized = upstream.apply_image(image)
    np.testing.assert_array_equal(resize_longest_side(image, 128), expected_resized)
    ours, (new_h, new_w) = sam.preprocess(image)
    assert (new_h, new_w) == expected_resized.shape[:2]
    with torch.inference_mode():
        expected = sam.model.preprocess(torch.as_tensor(expected_resized).permute(2, 0, 1).contiguous()[None])
    assert torch.equal(ours, expected)
    clicks = np.array([[5.0, 7.0], [shape[1] - 1.0, shape[0] - 1.0]])
    scaled = upstream.apply_coords(clicks, shape)
    np.testing.assert_array_equal(scaled[:, 0], clicks[:, 0] * (new_w / shape[1]))
    np.testing.assert_array_equal(scaled[:, 1], clicks[:, 1] * (new_h / shape[0]))
