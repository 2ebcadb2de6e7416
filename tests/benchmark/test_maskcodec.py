"""Mask codec of the remote session: PNG and COCO RLE round trips, and clear errors on bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pycocotools import mask as coco_mask

from benchmark.maskcodec import (
    MaskFormatError,
    counts_to_string,
    decode_png,
    decode_rle,
    encode_png,
    encode_rle,
    rle_counts,
    string_to_counts,
)


def test_round_trips_and_the_coco_string_format():
    rng = np.random.default_rng(3)
    for shape in ((1, 1), (5, 7), (40, 33)):
        for mask in (rng.random(shape) < 0.4, np.ones(shape, bool), np.zeros(shape, bool)):
            assert np.array_equal(decode_png(encode_png(mask), shape=shape), mask)
            for compressed in (True, False):
                assert np.array_equal(decode_rle(encode_rle(mask, compressed=compressed), shape=shape), mask)
    # column-major runs starting with zeros, as COCO: [[0, 1], [1, 1]] -> 0s: (0,0); 1s: (1,0),(0,1),(1,1)
    assert rle_counts(np.array([[0, 1], [1, 1]], bool)) == [1, 3]
    assert rle_counts(np.array([[1, 0]], bool)) == [0, 1, 1]
    counts = [5, 300, 2, 70000, 1]
    assert string_to_counts(counts_to_string(counts)) == counts


@pytest.mark.parametrize(
    ("rle", "words"),
    [
        ({"size": [2, 2], "counts": [1, 2]}, "covers 3 pixels"),
        ({"size": [3, 2], "counts": [6]}, "must be [2, 2]"),
        ({"size": [2, 2], "counts": "\x7f"}, "not a COCO RLE string"),
        ({"size": [2, 2], "counts": "a"}, "truncated"),
        ({"size": [2, 2], "counts": [True, 3]}, "list of integers"),
        ({"size": "2x2", "counts": [4]}, "[H, W]"),
        ([4], "must be an object"),
    ],
)
def test_bad_rle_is_refused_with_a_reason(rle, words):
    with pytest.raises(MaskFormatError, match=None) as caught:
        decode_rle(rle, shape=(2, 2))
    assert words in str(caught.value)


def test_bad_png_is_refused_with_a_reason():
    with pytest.raises(MaskFormatError, match="not a readable PNG"):
        decode_png(b"\x89PNG\r\n\x1a\n garbage", shape=(2, 2))
    with pytest.raises(MaskFormatError, match="is 3x2 .* must be 2x2"):
        decode_png(encode_png(np.zeros((2, 3), bool)), shape=(2, 2))


# --- byte-identical to pycocotools (the reason to keep our codec is in benchmark/maskcodec.py's docstring) ---


@st.composite
def _masks(draw):
    height = draw(st.integers(1, 40))
    width = draw(st.integers(1, 40))
    kind = draw(st.sampled_from(["noise", "blob", "full", "empty"]))
    if kind == "full":
        return np.ones((height, width), bool)
    if kind == "empty":
        return np.zeros((height, width), bool)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if kind == "noise":
        return rng.random((height, width)) < draw(st.floats(0.0, 1.0))
    top, left = rng.integers(0, height), rng.integers(0, width)  # one rectangle: long runs
    mask = np.zeros((height, width), bool)
    mask[top : rng.integers(top, height) + 1, left : rng.integers(left, width) + 1] = True
    return mask


@settings(max_examples=300, deadline=None)
@given(_masks())
def test_our_rle_is_byte_identical_to_pycocotools_both_ways(mask):
    coco = coco_mask.encode(np.asfortranarray(mask.astype(np.uint8)))
    ours = encode_rle(mask)
    assert ours["size"] == [int(v) for v in coco["size"]]
    assert ours["counts"].encode() == coco["counts"]  # the compressed string, byte for byte
    # pycocotools' own string decodes to the mask with ours, and ours with pycocotools'
    assert np.array_equal(
        decode_rle({"size": ours["size"], "counts": coco["counts"].decode()}, shape=mask.shape), mask
    )
    assert np.array_equal(
        coco_mask.decode({"size": coco["size"], "counts": ours["counts"].encode()}).astype(bool), mask
    )
    # the run lengths (the uncompressed form) are pycocotools' too
    from_counts = coco_mask.frPyObjects({"size": ours["size"], "counts": rle_counts(mask)}, *mask.shape)
    assert from_counts["counts"] == coco["counts"]
