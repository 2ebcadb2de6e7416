"""Device choice."""

from __future__ import annotations

import pytest
import torch

from segmenters.base import SegmenterError
from segmenters.devices import select_device


def test_auto_is_cuda_only_when_present():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert select_device(None).type == expected
    assert select_device("auto").type == expected
    assert select_device("cpu").type == "cpu"


def test_unknown_device_name_is_rejected():
    with pytest.raises(SegmenterError, match="'gpu0'"):
        select_device("gpu0")


def test_cuda_without_cuda_is_rejected():
    if torch.cuda.is_available():
        assert select_device("cuda").type == "cuda"
        return
    with pytest.raises(SegmenterError, match="CUDA is not available"):
        select_device("cuda")
