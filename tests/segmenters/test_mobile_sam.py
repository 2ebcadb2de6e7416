"""MobileSAM adapter: clear errors without the user's mobile_sam package or its timm; encoder swap path."""

from __future__ import annotations

import importlib
import sys

import pytest
import torch

from segmenters.base import Click, SegmenterError
from segmenters.mobile_sam import MOBILE_SAM_VARIANTS, import_mobile_sam_modeling, mobile_sam_missing
from segmenters.registry import available_predictors, get_predictor
from segmenters.sam import build_sam_model

from .conftest import TINY_SAM, square_scene


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


# --------------------------------------------------------------------------------------------------
# The user's mobile_sam package: what building imports, and nothing more


# Upstream's layout: the package __init__ imports the predictor, whose transforms import torchvision;
# the TinyViT module of ``mobile_sam.modeling`` imports timm. Neither is installed here.
MOBILE_SAM_INIT = """
    from .predictor import SamPredictor
"""
MOBILE_SAM_PREDICTOR = """
    from torchvision.transforms.functional import resize, to_pil_image
"""
MODELING_INIT = """
    from .tiny_vit_sam import TinyViT
"""
TINY_VIT_WITH_TIMM = """
    from timm.models.layers import DropPath as TimmDropPath, to_2tuple, trunc_normal_
"""
# A TinyViT stand-in with the real encoder's contract: (B, 3, S, S) -> (B, 256, S/16, S/16), S = img_size
# only (the real one's layers are built for one input resolution and fail on any other).
TINY_VIT_STANDIN = """
    import torch


    class TinyViT(torch.nn.Module):
        def __init__(self, img_size=1024, **options):
            super().__init__()
            self.img_size = img_size
            self.proj = torch.nn.Conv2d(3, 256, kernel_size=16, stride=16)

        def forward(self, x):
            side = self.img_size // 16
            return self.proj(x).flatten(2).view(x.shape[0], 256, side, side)
"""


def _mobile_sam(installed_package, tiny_vit_source: str) -> None:
    installed_package(
        {
            "mobile_sam/__init__.py": MOBILE_SAM_INIT,
            "mobile_sam/predictor.py": MOBILE_SAM_PREDICTOR,
            "mobile_sam/modeling/__init__.py": MODELING_INIT,
            "mobile_sam/modeling/tiny_vit_sam.py": tiny_vit_source,
        }
    )


def test_installed_mobile_sam_without_timm_is_not_available_and_names_timm(installed_package):
    _mobile_sam(installed_package, TINY_VIT_WITH_TIMM)
    reason = mobile_sam_missing()
    assert reason and "'timm'" in reason and "pip install timm" in reason and "tiny_vit_sam.py" in reason
    assert "mobile_sam" not in available_predictors()
    with pytest.raises(SegmenterError, match=r"predictor 'mobile_sam' cannot run here: .*'timm'"):
        get_predictor("mobile_sam", checkpoint="mobile_sam.pt")


def test_mobile_sam_builds_from_its_modeling_package_without_torchvision(installed_package, tmp_path):
    _mobile_sam(installed_package, TINY_VIT_STANDIN)
    assert mobile_sam_missing() is None and "mobile_sam" in available_predictors()
    assert "torchvision" not in sys.modules  # the package __init__ (which needs it) never ran
    torch.manual_seed(0)
    modeling = importlib.import_module("_clicklab_mobile_sam.modeling")
    architecture = MOBILE_SAM_VARIANTS["vit_t"]
    path = tmp_path / "mobile_sam.pt"
    torch.save(build_sam_model(architecture, image_encoder=modeling.TinyViT()).state_dict(), path)
    predictor = get_predictor("mobile_sam", checkpoint=path, device="cpu")
    image, _ = square_scene(48, 64)
    prediction = predictor.predict(predictor.encode(image), [Click(x=20, y=24)])
    assert prediction.probabilities.shape == (48, 64) and prediction.logits.shape == (1, 1, 256, 256)
    assert "torchvision" not in sys.modules and "mobile_sam" not in sys.modules


# timm imports torchvision (timm.data's transforms). A torchvision built for another torch is installed but
# fails while importing, as the real one does beside this torch ("operator torchvision::nms does not exist",
# raised from torchvision/_meta_registrations.py).
TIMM_PACKAGE = {
    "timm/__init__.py": "from . import data\n",
    "timm/data.py": "from torchvision import transforms\n",
    "timm/models/__init__.py": "",
    "timm/models/layers.py": "DropPath = to_2tuple = trunc_normal_ = None\n",
}
MISMATCHED_TORCHVISION = {
    "torchvision/__init__.py": "from . import _meta_registrations\n",
    "torchvision/_meta_registrations.py": 'raise RuntimeError("operator torchvision::nms does not exist")\n',
}


def test_timm_without_torchvision_makes_mobile_sam_unavailable_naming_torchvision(installed_package):
    _mobile_sam(installed_package, TINY_VIT_WITH_TIMM)
    installed_package(TIMM_PACKAGE)
    reason = mobile_sam_missing()
    assert reason and "needs the module 'torchvision'" in reason and "timm/data.py" in reason
    assert "torchvision release built for your torch" in reason
    assert "mobile_sam" not in available_predictors()


def test_a_torchvision_built_for_another_torch_is_named_with_the_fix(installed_package):
    _mobile_sam(installed_package, TINY_VIT_WITH_TIMM)
    installed_package({**TIMM_PACKAGE, **MISMATCHED_TORCHVISION})
    reason = mobile_sam_missing()
    assert (
        reason and "failed in torchvision (RuntimeError: operator torchvision::nms does not exist)" in reason
    )
    assert (
        "_meta_registrations.py" in reason and f"not built for the torch here ({torch.__version__})" in reason
    )
    assert "install the torchvision release made for this torch" in reason
    assert "mobile_sam" not in available_predictors()
    with pytest.raises(SegmenterError, match=r"predictor 'mobile_sam' cannot run here: .*torchvision"):
        get_predictor("mobile_sam", checkpoint="mobile_sam.pt")


# A mobile_sam release whose encoder uses a NumPy alias removed in 1.24 in its forward pass.
TINY_VIT_WITH_NP_FLOAT_IN_FORWARD = """
    import numpy as np
    import torch


    class TinyViT(torch.nn.Module):
        def __init__(self, img_size=1024, **options):
            super().__init__()
            self.img_size = img_size
            self.proj = torch.nn.Conv2d(3, 256, kernel_size=16, stride=16)

        def forward(self, x):
            return self.proj(x) * np.float(1.0)
"""


def test_a_failing_encoder_of_the_installed_mobile_sam_is_a_segmenter_error(installed_package, tmp_path):
    _mobile_sam(installed_package, TINY_VIT_WITH_NP_FLOAT_IN_FORWARD)
    modeling = import_mobile_sam_modeling()
    path = tmp_path / "mobile_sam.pt"
    architecture = MOBILE_SAM_VARIANTS["vit_t"]
    torch.save(build_sam_model(architecture, image_encoder=modeling.TinyViT()).state_dict(), path)
    predictor = get_predictor("mobile_sam", checkpoint=path, device="cpu")
    image, _ = square_scene(48, 64)
    with pytest.raises(SegmenterError) as caught:
        predictor.encode(image)
    message = str(caught.value)
    assert message.startswith(
        "mobile_sam (MobileSAM): encoding a (1, 3, 1024, 1024) image with TinyViT failed"
    )
    assert "np.float" in message and "tiny_vit_sam.py" in message and "replace np.float with float" in message
