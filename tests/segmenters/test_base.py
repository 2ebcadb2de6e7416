"""The Predictor contract, checked on every predictor that can run here (incl. the tiny random SAM) and on
SimpleClick with a stand-in plain ViT (its upstream package is not installed here)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from segmenters.base import Click, Embedding, Prediction, Predictor
from segmenters.isegm import SimpleClickPredictor
from segmenters.registry import available_predictors, get_predictor, registered_predictors

from .conftest import TINY_SAM, square_scene
from .standins import TinyPlainVitModel

#: Adapters whose upstream package is not installed here, run on a stand-in network with the real
#: architecture's shape constraints (SimpleClick: a plain ViT that takes one input size only).
STAND_IN_BUILT = ["simpleclick"]


@pytest.fixture(
    params=available_predictors() + [n for n in STAND_IN_BUILT if n not in available_predictors()]
)
def predictor(request, tiny_sam_checkpoint) -> Predictor:
    name = request.param
    if name == "embedded":
        return get_predictor("embedded")
    if name == "sam":
        return get_predictor("sam", checkpoint=tiny_sam_checkpoint, architecture=TINY_SAM, device="cpu")
    if name == "simpleclick":
        torch.manual_seed(0)
        return SimpleClickPredictor(model=TinyPlainVitModel(img_size=64, patch_size=8), device="cpu")
    pytest.fail(
        f"predictor {name!r} can run here but the contract tests have no recipe to build it: add one to the "
        "'predictor' fixture of tests/segmenters/test_base.py (with a tiny random-initialised model)"
    )


def _trajectory(predictor: Predictor, embedding: Embedding, clicks: list[Click]) -> list[Prediction]:
    predictions, logits = [], None
    for count in range(1, len(clicks) + 1):
        prediction = predictor.predict(embedding, clicks[:count], logits)
        predictions.append(prediction)
        logits = prediction.logits
    return predictions


def test_names_and_threshold(predictor):
    assert predictor.name in registered_predictors()
    assert predictor.model_type
    assert predictor.threshold in (0.49, 0.5)
    assert predictor.model_id


@pytest.mark.parametrize("shape", [(37, 61), (61, 37), (48, 48)])
def test_output_shape_dtype_range_on_non_square_images(predictor, shape):
    image, _ = square_scene(*shape)
    embedding = predictor.encode(image)
    assert embedding.image_shape == shape and embedding.nbytes > 0
    for prediction in _trajectory(predictor, embedding, [Click(x=shape[1] // 3, y=shape[0] // 2)]):
        probabilities = prediction.probabilities
        assert probabilities.shape == shape and probabilities.dtype == np.float32
        assert np.isfinite(probabilities).all()
        assert probabilities.min() >= 0.0 and probabilities.max() <= 1.0
        mask = predictor.predict_mask(prediction)
        assert mask.dtype == bool and mask.shape == shape


def test_clicks_at_image_borders_and_corners(predictor):
    image, _ = square_scene(40, 70)
    height, width = 40, 70
    clicks = [
        Click(x=0, y=0),
        Click(x=width - 1, y=height - 1, is_positive=False),
        Click(x=width - 1, y=0),
        Click(x=0, y=height - 1, is_positive=False),
        Click(x=width / 2, y=0),
    ]
    for prediction in _trajectory(predictor, predictor.encode(image), clicks):
        assert prediction.probabilities.shape == (height, width)


def test_deterministic(predictor):
    image, _ = square_scene()
    clicks = [Click(x=30, y=30), Click(x=80, y=10, is_positive=False), Click(x=40, y=20)]
    first = _trajectory(predictor, predictor.encode(image), clicks)
    second = _trajectory(predictor, predictor.encode(image), clicks)
    for one, two in zip(first, second, strict=True):
        np.testing.assert_array_equal(one.probabilities, two.probabilities)


def test_previous_logits_are_accepted_and_returned(predictor):
    image, _ = square_scene()
    embedding = predictor.encode(image)
    predictions = _trajectory(predictor, embedding, [Click(x=30, y=30), Click(x=70, y=50, is_positive=False)])
    assert predictions[0].logits is not None
    assert predictions[1].probabilities.shape == (60, 90)


def test_encoder_runs_once_per_image_not_per_click(predictor):
    encoder = getattr(predictor, "image_encoder", None)
    if encoder is None:
        # Weight-free predictors: predict() only receives the embedding; reuse must give the same
        # result as a fresh encoding.
        image, _ = square_scene()
        shared = predictor.encode(image)
        clicks = [Click(x=30, y=30), Click(x=70, y=50, is_positive=False)]
        reused = _trajectory(predictor, shared, clicks)
        for count, prediction in enumerate(reused, start=1):
            fresh = predictor.predict(
                predictor.encode(image), clicks[:count], reused[count - 2].logits if count > 1 else None
            )
            np.testing.assert_array_equal(prediction.probabilities, fresh.probabilities)
        return
    calls = []
    handle = encoder.register_forward_hook(lambda module, inputs, output: calls.append(1))
    try:
        image, _ = square_scene()
        embedding = predictor.encode(image)
        assert len(calls) == 1
        _trajectory(predictor, embedding, [Click(x=30 + k, y=30, is_positive=k % 3 != 2) for k in range(6)])
        assert len(calls) == 1, "predict() ran the image encoder"
    finally:
        handle.remove()
