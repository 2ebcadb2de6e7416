"""The RClicks full_stem grammar (protocol §1.1)."""

from __future__ import annotations

import pytest

from benchmark.stems import FullStemError, full_stem_build, full_stem_check


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"image_stem": "tennis"}, "tennis"),
        ({"image_stem": "cake07_000000504711"}, "cake07_000000504711"),
        ({"image_stem": "baseball glove08_000000537827"}, "baseball glove08_000000537827"),
        ({"image_stem": "133", "object_stem": "4"}, "133_______4"),
        ({"image_stem": "person7", "click_type": "fn", "model_type": "mivos"}, "person7_mivos_fn"),
        (
            {
                "image_stem": "llama",
                "click_type": "fn",
                "model_type": "ritm",
                "source_device": "mobile",
                "source_index": 20,
            },
            "llama_ritm_fn_mobile_20",
        ),
        (
            {
                "image_stem": "153093",
                "click_type": "fn",
                "model_type": "simple",
                "source_device": "pc",
                "source_index": 20,
            },
            "153093_simple_fn_pc_20",
        ),
        (
            {
                "image_stem": "133",
                "object_stem": "12",
                "click_type": "fp",
                "model_type": "sam",
                "source_device": "pc",
                "source_index": 0,
            },
            "133_______12_sam_fp_pc_0",
        ),
    ],
)
def test_build_matches_the_published_examples(kwargs, expected):
    assert full_stem_build(**kwargs) == expected


def test_object_separator_is_exactly_seven_underscores():
    stem = full_stem_build(image_stem="a", object_stem="3")
    assert stem[1:-1] == "_" * 7


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"image_stem": ""}, "image_stem is empty"),
        ({"image_stem": "a", "click_type": "second"}, "click_type 'second'"),
        ({"image_stem": "a", "model_type": "sam"}, "first click has no previous mask"),
        ({"image_stem": "a", "click_type": "fn"}, "model_type ''"),
        ({"image_stem": "a", "click_type": "fn", "model_type": "my_model"}, "without underscores"),
        ({"image_stem": "a", "click_type": "fp", "model_type": "sam", "source_device": "pc"}, "give both"),
        (
            {
                "image_stem": "a",
                "click_type": "fp",
                "model_type": "sam",
                "source_device": "tablet",
                "source_index": 1,
            },
            "give both",
        ),
    ],
)
def test_build_refuses_what_rclicks_cannot_express(kwargs, message):
    with pytest.raises(FullStemError, match=message):
        full_stem_build(**kwargs)


def test_check_names_the_row_and_the_expected_stem():
    fields = dict(
        image_stem="x_sample",
        object_stem="",
        click_type="fn",
        model_type="sam",
        source_device="pc",
        source_index=2,
    )
    full_stem_check(full_stem="x_sample_sam_fn_pc_2", what="target 5", **fields)
    with pytest.raises(
        FullStemError, match=r"target 5: full_stem 'x_sample_sam_fn' .* expected 'x_sample_sam_fn_pc_2'"
    ):
        full_stem_check(full_stem="x_sample_sam_fn", what="target 5", **fields)
