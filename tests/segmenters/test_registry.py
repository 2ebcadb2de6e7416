"""Registry: names, availability, build errors."""

from __future__ import annotations

import pytest

from segmenters.base import Predictor, SegmenterError
from segmenters.embedded import EmbeddedPredictor
from segmenters.registry import (
    available_predictors,
    get_predictor,
    predictor_variants,
    register,
    registered_predictors,
    unavailable_reason,
)


def test_embedded_is_the_first_available_and_registered_name():
    assert available_predictors()[0] == "embedded"
    assert registered_predictors()[0] == "embedded"


def test_available_names_are_registered_and_can_run():
    available = available_predictors()
    assert set(available) <= set(registered_predictors())
    for name in available:
        assert unavailable_reason(name) is None


def test_every_adapter_of_the_brief_is_registered():
    assert {"embedded", "sam", "sam2", "mobile_sam", "ritm", "simpleclick"} <= set(registered_predictors())


def test_unavailable_predictor_names_what_to_install():
    for name in set(registered_predictors()) - set(available_predictors()):
        reason = unavailable_reason(name)
        assert reason and "install" in reason, f"{name}: {reason!r}"
        with pytest.raises(SegmenterError, match=f"predictor '{name}' cannot run here"):
            get_predictor(name)


def test_get_predictor_builds_with_options():
    predictor = get_predictor("embedded", grabcut_iterations=2)
    assert isinstance(predictor, EmbeddedPredictor)
    assert predictor.grabcut_iterations == 2


def test_unknown_name_lists_the_registered_ones():
    with pytest.raises(SegmenterError, match=r"unknown predictor 'nope'.*'embedded'"):
        get_predictor("nope")


def test_unknown_option_is_a_segmenter_error_naming_it():
    with pytest.raises(SegmenterError, match="no_such_option"):
        get_predictor("embedded", no_such_option=1)


def test_a_name_cannot_be_registered_twice_by_different_factories():
    class Other(Predictor):
        model_id = "other"

        def encode(self, image):
            raise NotImplementedError

        def predict(self, embedding, clicks, previous_logits=None):
            raise NotImplementedError

    with pytest.raises(SegmenterError, match="already registered"):
        register("embedded")(Other)


def test_variants_are_listed_default_first():
    assert predictor_variants("sam")[0] == "vit_b" and set(predictor_variants("sam")) == {
        "vit_b",
        "vit_h",
        "vit_l",
    }
    assert predictor_variants("sam2")[0] == "sam2.1_hiera_l" and "sam2_hiera_t" in predictor_variants("sam2")
    assert predictor_variants("simpleclick")[0] == "vit_xtiny"
    assert predictor_variants("ritm")[0] == "hrnet18_cocolvis"
    assert predictor_variants("mobile_sam") == ["vit_t"]
    assert predictor_variants("embedded") == []
