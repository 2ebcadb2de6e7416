"""MobileSAM adapter: the user's installed ``mobile_sam`` TinyViT encoder + SAM's prompt encoder/decoder.

MobileSAM is not on PyPI (install it from https://github.com/ChaoningZhang/MobileSAM with
``pip install git+https://github.com/ChaoningZhang/MobileSAM.git``). Only its TinyViT image encoder is
taken from that package; the prompt encoder, mask decoder, preprocessing and the per-click loop are the
SAM adapter's (same protocol: long side 1024 with PIL bilinear, ImageNet mean/std, pad, multimask with
best predicted IoU, low-res logits fed back, threshold 0.5). Unlike the reference, no throw-away ViT-L
is built first.

``mobile_sam/__init__.py`` imports its predictor, which imports torchvision; the encoder lives in
``mobile_sam.modeling``, whose TinyViT module imports timm. The adapter imports ``mobile_sam.modeling``
without the package ``__init__`` (as for segment-anything), and the availability check imports exactly
that, so ``available_predictors()`` lists ``mobile_sam`` only when building it can work (timm present).
"""

from __future__ import annotations

import types
from pathlib import Path

from segmenters.base import SegmenterError
from segmenters.registry import register
from segmenters.sam import SamArchitecture, SamPredictor, build_sam_model, sam_modeling_missing
from segmenters.upstream import import_isolated_subpackage, upstream_errors

MOBILE_SAM_LABEL = "mobile_sam (MobileSAM)"
MOBILE_SAM_DOWNLOAD_HINT = "https://github.com/ChaoningZhang/MobileSAM/raw/master/weights/mobile_sam.pt"

#: Encoder fields of SamArchitecture are unused here (TinyViT replaces the ViT); the rest is SAM's.
MOBILE_SAM_VARIANTS = {
    "vit_t": SamArchitecture(
        encoder_embed_dim=320,
        encoder_depth=10,
        encoder_num_heads=10,
        encoder_global_attn_indexes=(),
        default_checkpoint="mobile_sam.pt",
    )
}


def import_mobile_sam_modeling() -> types.ModuleType:
    """``mobile_sam.modeling`` without running ``mobile_sam/__init__`` (which needs torchvision)."""
    return import_isolated_subpackage("mobile_sam", "modeling", label=MOBILE_SAM_LABEL)


def mobile_sam_missing() -> str | None:
    """None when MobileSAM can be built here (the modules building imports, import), else what to install."""
    sam_missing = sam_modeling_missing()
    if sam_missing:
        return sam_missing
    try:
        import_mobile_sam_modeling()
    except SegmenterError as error:
        return f"{error} Then put mobile_sam.pt in the checkpoint directory."
    return None


def build_tiny_vit_encoder(image_size: int = 1024):
    """MobileSAM's TinyViT-5M image encoder from the installed ``mobile_sam`` package."""
    modeling = import_mobile_sam_modeling()
    with upstream_errors(package=MOBILE_SAM_LABEL, doing="building the TinyViT encoder"):
        return modeling.TinyViT(
            img_size=image_size,
            in_chans=3,
            num_classes=1000,
            embed_dims=[64, 128, 160, 320],
            depths=[2, 2, 6, 2],
            num_heads=[2, 4, 5, 10],
            window_sizes=[7, 7, 14, 7],
            mlp_ratio=4.0,
            drop_rate=0.0,
            drop_path_rate=0.0,
            use_checkpoint=False,
            mbconv_expand_ratio=4.0,
            local_conv_size=3,
            layer_lr_decay=0.8,
        )


@register("mobile_sam", requirement=mobile_sam_missing)
class MobileSamPredictor(SamPredictor):
    """MobileSAM (``variant="vit_t"``, checkpoint ``mobile_sam.pt``)."""

    name = "mobile_sam"
    model_type = "mobile_sam"
    threshold = 0.5
    variants = MOBILE_SAM_VARIANTS
    download_hint = MOBILE_SAM_DOWNLOAD_HINT

    def __init__(
        self,
        *,
        checkpoint: str | Path | None = None,
        variant: str = "vit_t",
        checkpoint_dir: str | Path | None = None,
        device: str | None = None,
        multimask_output: bool = True,
    ) -> None:
        """Options as :class:`~segmenters.sam.SamPredictor` (``variant`` is ``vit_t``)."""
        super().__init__(
            checkpoint=checkpoint,
            variant=variant,
            checkpoint_dir=checkpoint_dir,
            device=device,
            multimask_output=multimask_output,
        )

    def _build_model(self):
        return build_sam_model(
            self.architecture, image_encoder=build_tiny_vit_encoder(self.architecture.image_size)
        )

    def _encode_features(self, tensor):
        # The encoder is the user's mobile_sam code: its failures (a NumPy alias, a shape its release does
        # not take) are reported as SegmenterError, not as a bare error in a next-round build.
        with upstream_errors(
            package=MOBILE_SAM_LABEL,
            doing=f"encoding a {tuple(tensor.shape)} image with TinyViT",
            fix="Check that the installed mobile_sam is the release mobile_sam.pt was published with.",
        ):
            return super()._encode_features(tensor)

    @staticmethod
    def _guess_variant(state_dict: dict) -> str | None:
        return None
