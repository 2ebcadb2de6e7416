"""Corrective rounds (issue 34, seed 001's Mb+c): ``Predictor.correct`` takes the image, the mask the worker
corrected and every click so far; the previous mask reaches each model as its own prior input (the embedded
segmenter: the mask itself; SAM: low-res ``mask_input`` logits; RITM / SimpleClick: the previous-mask
channel). The models are tiny random-initialised configurations of the real architectures."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from segmenters.base import Click, SegmenterError
from segmenters.isegm import IsegmState, RitmPredictor, SimpleClickPredictor
from segmenters.registry import get_predictor
from segmenters.sam import MASK_PRIOR_LOGIT, low_res_mask_logits

from .conftest import TINY_SAM, square_scene
from .standins import TinyPlainVitModel
from .test_isegm import ClickDiskNet


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum() / (a | b).sum())


def _two_rectangles():
    """The orange rectangle of ``square_scene`` and a second one of its colour to the right (not the object)."""
    image, gt = square_scene(height=80, width=160)
    blob = np.zeros_like(gt)
    blob[25:55, 110:145] = True
    noise = np.random.default_rng(4).normal(0, 8, (int(blob.sum()), 3))
    image[blob] = np.clip(image[gt].mean(axis=0) + noise, 0, 255).astype(np.uint8)
    return image, gt, blob


def test_embedded_round_removes_the_clicked_error_and_leaves_the_rest_of_the_mask_alone():
    image, gt, blob = _two_rectangles()
    previous = gt | blob
    previous[20:24, 40:50] = False  # a notch in the object that this round does not touch
    predictor = get_predictor("embedded")
    embedding = predictor.encode(image)
    clicks = [Click(x=127.0, y=40.0, is_positive=False)]
    mask = predictor.predict_mask(predictor.correct(embedding, clicks, new_clicks=1, previous_mask=previous))
    assert mask[blob].mean() < 0.05, "the negative click at the blob's centre removes the blob"
    far = np.zeros_like(gt)
    far[:, :90] = True  # well outside the click's zone
    assert np.array_equal(mask[far], previous[far]), "parts the worker did not click stay as they were"
    assert _iou(mask, gt) > _iou(previous, gt) + 0.2


def test_embedded_round_adds_a_missed_part_and_keeps_every_earlier_click():
    image, gt = square_scene(height=80, width=160)
    previous = gt.copy()
    previous[:, 55:80] = False  # the right part of the object was missed
    predictor = get_predictor("embedded")
    embedding = predictor.encode(image)
    earlier = Click(x=40.0, y=40.0, is_positive=True)
    clicks = [earlier, Click(x=67.0, y=40.0, is_positive=True)]
    mask = predictor.predict_mask(predictor.correct(embedding, clicks, new_clicks=1, previous_mask=previous))
    assert _iou(mask, gt) > 0.9 > _iou(previous, gt)
    again = predictor.predict_mask(predictor.correct(embedding, clicks, new_clicks=1, previous_mask=previous))
    assert np.array_equal(mask, again), "the same round gives the same mask"


def test_embedded_round_without_a_previous_mask_is_a_prediction_of_all_clicks():
    image, _ = square_scene()
    predictor = get_predictor("embedded")
    embedding = predictor.encode(image)
    clicks = [Click(x=30, y=30)]
    corrected = predictor.correct(embedding, clicks, new_clicks=1, previous_mask=None)
    assert np.array_equal(
        predictor.predict_mask(corrected), predictor.predict_mask(predictor.predict(embedding, clicks))
    )
    with pytest.raises(SegmenterError, match="new_clicks=2 must be between 1 and the 1 click"):
        predictor.correct(embedding, clicks, new_clicks=2, previous_mask=None)
    assert not predictor.needs_anchor_click


# --------------------------------------------------------------------------------------------------
# SAM: the previous mask as mask_input


@pytest.fixture(scope="module")
def sam(tiny_sam_checkpoint):
    return get_predictor("sam", checkpoint=tiny_sam_checkpoint, architecture=TINY_SAM, device="cpu")


def test_sam_prior_is_the_mask_in_the_models_padded_low_res_frame(sam):
    image, _ = square_scene(50, 80)  # long side 80 -> 128: the image fills 80 x 128 of the 128 x 128 input
    embedding = sam.encode(image)
    mask = np.zeros((50, 80), bool)
    mask[:, :40] = True  # the left half
    prior = sam.prior_from_mask(embedding, mask)
    assert prior.shape == (1, 1, 32, 32) and prior.dtype == np.float32  # 4 x the 8 x 8 patch grid
    low = prior[0, 0]
    # 32 low-res cells span the 128 px input: the image is rows 0-19, its left half columns 0-15
    assert (low[:20, :15] == pytest.approx(MASK_PRIOR_LOGIT)) and (
        low[:20, 17:] == pytest.approx(-MASK_PRIOR_LOGIT)
    )
    assert low[21:, :] == pytest.approx(-MASK_PRIOR_LOGIT), "the zero padding is background"
    with pytest.raises(SegmenterError, match=r"\(5, 5\).*\(50, 80\)"):
        sam.prior_from_mask(embedding, np.zeros((5, 5), bool))


def test_sam_round_gives_the_previous_mask_as_mask_input_then_chains_its_own_logits(sam):
    image, gt = square_scene()
    embedding = sam.encode(image)
    seen: list = []
    hook = sam.model.prompt_encoder.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(kwargs["masks"]), with_kwargs=True
    )
    clicks = [Click(x=30, y=30), Click(x=60, y=40, is_positive=False), Click(x=40, y=25)]
    try:
        corrected = sam.correct(embedding, clicks, new_clicks=2, previous_mask=gt)
    finally:
        hook.remove()
    prior = sam.prior_from_mask(embedding, gt)
    assert len(seen) == 2, "one decoder run per new click"
    np.testing.assert_array_equal(seen[0].cpu().numpy(), prior)
    chained = sam.predict(embedding, clicks, sam.predict(embedding, clicks[:2], prior).logits)
    np.testing.assert_allclose(corrected.logits, chained.logits, atol=1e-6)
    without = sam.predict(embedding, clicks, sam.predict(embedding, clicks[:2]).logits)
    assert not np.allclose(corrected.logits, without.logits), "the prior changes what the model says"


def test_low_res_logits_of_a_stretched_square_frame():
    mask = np.zeros((40, 100), bool)
    mask[:20] = True  # the top half, stretched into SAM 2's square input
    low = low_res_mask_logits(mask, content_hw=(16, 16), padded_side=16, low_res_side=16)[0, 0]
    assert (low[:7] > 9).all() and (low[9:] < -9).all()


# --------------------------------------------------------------------------------------------------
# RITM and SimpleClick: the previous mask as the prev-mask channel


def test_ritm_round_puts_the_previous_mask_in_its_fourth_channel():
    image, _ = square_scene(50, 80)
    predictor = RitmPredictor(model=ClickDiskNet(), device="cpu", zoom_in_target_size_px=0, with_flip=False)
    previous = np.zeros((50, 80), bool)
    previous[:, 60:] = True  # the stand-in keeps what the previous mask says
    seen: list = []
    hook = predictor.net.register_forward_pre_hook(lambda module, args: seen.append(args[0][:, 3].clone()))
    try:
        embedding = predictor.encode(image)
        prior = predictor.prior_from_mask(embedding, previous)
        mask = predictor.predict_mask(
            predictor.correct(embedding, [Click(x=10, y=10)], new_clicks=1, previous_mask=previous)
        )
    finally:
        hook.remove()
    assert isinstance(prior, IsegmState) and prior.object_box is None
    np.testing.assert_array_equal(seen[0][0].numpy(), previous.astype(np.float32))
    assert mask[25, 70] and mask[10, 10] and not mask[25, 40]


def test_simpleclick_round_zooms_to_the_previous_mask_and_takes_it_as_the_prev_channel():
    torch.manual_seed(0)
    image, _ = square_scene(300, 400)
    predictor = SimpleClickPredictor(model=TinyPlainVitModel(img_size=64, patch_size=8), device="cpu")
    previous = np.zeros((300, 400), bool)
    previous[120:180, 150:210] = True
    embedding = predictor.encode(image)
    clicks = [Click(x=160, y=150), Click(x=205, y=150, is_positive=False)]
    prediction = predictor.correct(embedding, clicks, new_clicks=1, previous_mask=previous)
    top, bottom, left, right = prediction.extra["zoom_box"]
    assert bottom - top < 250 and right - left < 250, (
        "the previous mask's box (expanded to 200 px), not the image"
    )
    assert top <= 120 and bottom >= 179 and left <= 150 and right >= 209
    assert predictor.net.seen_shapes[-1] == (2, 4, 64, 64)
    without = predictor.correct(embedding, clicks, new_clicks=1, previous_mask=None)
    assert not np.allclose(prediction.probabilities, without.probabilities), "the prev-mask channel is used"
