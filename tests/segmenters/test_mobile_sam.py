"""MobileSAM adapter: clear error without the user's mobile_sam package; encoder swap path."""

from __future__ import annotations

import pytest
import torch

from segmenters.base import SegmenterError
from segmenters.mobile_sam import MOBILE_SAM_VARIANTS, mobile_sam_missing
from segmenters.registry import available_predictors, get_predictor
from segmenters.sam import build_sam_model

from .conftest import TINY_SAM


def test_without_mobile_sam_the_error_names_the_package_and_how_to_install():
    reason = mobile_sam_missing()
    assert reason is not None, "these tests expect no mobile_sam package in the project environment"
    assert (
        "mobile_sam" in reason and "pip install git+https://github.com/ChaoningZhang/MobileSAM.git" in reason
    )
    assert "mobile_sam" not in available_predictors()
    with pytest.raises(SegmenterError, match="mobile_sam"):
        get_predictor("mobile_sam", checkpoint="mobile_sam.pt")


def test_official_checkpoint_name():
    assert MOBILE_SAM_VARIANTS["vit_t"].default_checkpoint == "mobile_sam.pt"


def test_sam_decoder_accepts_a_replacement_image_encoder():
    # What MobileSAM does with TinyViT: any encoder producing (B, prompt_dim, S/16, S/16) features.
    encoder = torch.nn.Conv2d(3, TINY_SAM.prompt_embed_dim, kernel_size=16, stride=16)
    model = build_sam_model(TINY_SAM, image_encoder=encoder)
    assert model.image_encoder is encoder
    features = model.image_encoder(torch.zeros(1, 3, 128, 128))
    sparse, dense = model.prompt_encoder(
        points=(torch.tensor([[[5.0, 5.0]]]), torch.tensor([[1]])), boxes=None, masks=None
    )
    low_res, iou = model.mask_decoder(
        image_embeddings=features,
        image_pe=model.prompt_encoder.get_dense_pe(),
        sparse_prompt_embeddings=sparse,
        dense_prompt_embeddings=dense,
        multimask_output=True,
    )
    assert tuple(low_res.shape) == (1, 3, 32, 32) and tuple(iou.shape) == (1, 3)
