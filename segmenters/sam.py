"""Segment Anything (SAM) adapter: encode once per image, decode per click.

Preprocessing is upstream's (``segment_anything.utils.transforms.ResizeLongestSide`` + ``Sam.preprocess``),
as RClicks runs it (§7): resize the long side to ``image_size`` (1024) with
``new = int(old * 1024 / long + 0.5)`` using PIL's bilinear filter (upstream resizes a PIL image with
torchvision's ``resize``, which calls ``PIL.Image.resize(..., BILINEAR)``; PIL's bilinear filter widens
its support when shrinking, so OpenCV's resizes differ: on the 21 GrabCut images up to 1/255 enlarged to
1024 px, up to 35/255 shrunk to 256 px), normalise with the ImageNet
pixel mean/std (0..255 scale) in float32, pad bottom/right with zeros to a square. Clicks (x, y) are
scaled by new/old as floats. Each click runs the prompt encoder and mask decoder with all clicks so
far, ``multimask_output=True``; the mask with the highest predicted IoU is kept, and its
low-resolution logits come back as ``Prediction.logits`` to be passed as ``mask_input`` on the next
click. ``previous_logits=None`` starts a trajectory (the explicit reset the reference derived from
the number of points).

A stored mask (a box start, another model's round of a corrective campaign) goes in as ``mask_input`` through
:meth:`SamPredictor.prior_from_mask`: the mask resized into the model's input frame (long side ``image_size``,
zero padding bottom/right counted as background), area-averaged down to the low-res grid (4 x the patch grid,
256 for SAM's 1024) and turned into logits, ``log(p / (1 - p))`` clipped to +-``MASK_PRIOR_LOGIT``.

``segment-anything`` 1.0's package ``__init__`` imports torchvision; only its ``modeling``
subpackage is needed, so it is imported under a private parent module that does not run that
``__init__`` (see :func:`segmenters.upstream.import_isolated_subpackage`).
"""

from __future__ import annotations

import hashlib
import json
import types
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from segmenters.base import CheckpointError, Click, Embedding, Prediction, Predictor, SegmenterError
from segmenters.checkpoints import file_sha256, load_into_module, load_state_dict, resolve_checkpoint
from segmenters.devices import select_device
from segmenters.images import resized_long_side, validate_image
from segmenters.registry import register
from segmenters.upstream import import_isolated_subpackage

PIXEL_MEAN = np.array([123.675, 116.28, 103.53], np.float32)  # ImageNet mean, 0..255 RGB
PIXEL_STD = np.array([58.395, 57.12, 57.375], np.float32)
SAM_DOWNLOAD_HINT = "https://github.com/facebookresearch/segment-anything#model-checkpoints"
#: Largest magnitude of the logits a stored mask becomes as ``mask_input`` (SAM's own confident low-res
#: logits are of this order); a pixel wholly inside (outside) the mask gets +10 (-10).
MASK_PRIOR_LOGIT = 10.0


def low_res_mask_logits(
    mask: np.ndarray, *, content_hw: tuple[int, int], padded_side: int, low_res_side: int
) -> np.ndarray:
    """(1, 1, low_res_side, low_res_side) float32 logits of a bool (H, W) ``mask`` as a SAM-style ``mask_input``:
    the mask resized to ``content_hw`` (the image inside the model's square input), zero-padded bottom/right
    to ``padded_side``, area-averaged to ``low_res_side`` and turned into logits clipped to
    +-``MASK_PRIOR_LOGIT``."""
    import cv2

    content_h, content_w = content_hw
    frame = np.zeros((padded_side, padded_side), np.float32)
    frame[:content_h, :content_w] = cv2.resize(
        np.asarray(mask, np.float32), (content_w, content_h), interpolation=cv2.INTER_AREA
    )
    low = cv2.resize(frame, (low_res_side, low_res_side), interpolation=cv2.INTER_AREA)
    bound = 1.0 / (1.0 + np.exp(MASK_PRIOR_LOGIT))
    low = np.clip(low, bound, 1.0 - bound)
    return np.log(low / (1.0 - low)).astype(np.float32)[None, None]


@dataclass(frozen=True)
class SamArchitecture:
    """Hyper-parameters of a SAM model (the official ones are in :data:`SAM_VARIANTS`)."""

    encoder_embed_dim: int
    encoder_depth: int
    encoder_num_heads: int
    encoder_global_attn_indexes: tuple[int, ...]
    encoder_window_size: int = 14
    image_size: int = 1024  # model input side, pixels
    patch_size: int = 16
    prompt_embed_dim: int = 256
    decoder_depth: int = 2
    decoder_mlp_dim: int = 2048
    decoder_num_heads: int = 8
    iou_head_hidden_dim: int = 256
    default_checkpoint: str = ""

    def fingerprint(self) -> str:
        text = json.dumps(
            {k: v for k, v in asdict(self).items() if k != "default_checkpoint"}, sort_keys=True
        )
        return hashlib.sha256(text.encode()).hexdigest()[:12]


SAM_VARIANTS: dict[str, SamArchitecture] = {
    "vit_h": SamArchitecture(1280, 32, 16, (7, 15, 23, 31), default_checkpoint="sam_vit_h_4b8939.pth"),
    "vit_l": SamArchitecture(1024, 24, 16, (5, 11, 17, 23), default_checkpoint="sam_vit_l_0b3195.pth"),
    "vit_b": SamArchitecture(768, 12, 12, (2, 5, 8, 11), default_checkpoint="sam_vit_b_01ec64.pth"),
}
_EMBED_DIM_TO_VARIANT = {arch.encoder_embed_dim: name for name, arch in SAM_VARIANTS.items()}


def sam_modeling_missing() -> str | None:
    """None when ``segment_anything.modeling`` can be imported here, else what to install."""
    try:
        import_sam_modeling()
    except SegmenterError as error:
        return str(error)
    return None


def import_sam_modeling() -> types.ModuleType:
    """``segment_anything.modeling`` without running ``segment_anything/__init__`` (needs torchvision).

    Loaded as ``_clicklab_segment_anything.modeling``; the real name ``segment_anything`` is left
    untouched for code that has torchvision. Raises SegmenterError when the package is missing.
    """
    return import_isolated_subpackage("segment_anything", "modeling", label="segment-anything")


def resize_longest_side(image: np.ndarray, long_side_px: int) -> np.ndarray:
    """``image`` (H, W, 3) uint8 resized so its long side is ``long_side_px``, as upstream's
    ``ResizeLongestSide.apply_image``: ``int(old * long_side / long + 0.5)``, PIL bilinear."""
    new_h, new_w = resized_long_side(image.shape[0], image.shape[1], long_side_px)
    return np.array(Image.fromarray(image).resize((new_w, new_h), Image.Resampling.BILINEAR))


def build_sam_model(architecture: SamArchitecture, *, image_encoder=None):
    """A randomly initialised ``Sam`` module of ``architecture`` (weights come from a checkpoint).

    ``image_encoder``: an alternative encoder module (e.g. MobileSAM's TinyViT) producing
    (B, prompt_embed_dim, image_size/patch, image_size/patch) features.
    """
    import torch

    modeling = import_sam_modeling()
    grid = architecture.image_size // architecture.patch_size
    if image_encoder is None:
        image_encoder = modeling.ImageEncoderViT(
            depth=architecture.encoder_depth,
            embed_dim=architecture.encoder_embed_dim,
            img_size=architecture.image_size,
            mlp_ratio=4,
            norm_layer=partial(torch.nn.LayerNorm, eps=1e-6),
            num_heads=architecture.encoder_num_heads,
            patch_size=architecture.patch_size,
            qkv_bias=True,
            use_rel_pos=True,
            global_attn_indexes=architecture.encoder_global_attn_indexes,
            window_size=architecture.encoder_window_size,
            out_chans=architecture.prompt_embed_dim,
        )
    model = modeling.Sam(
        image_encoder=image_encoder,
        prompt_encoder=modeling.PromptEncoder(
            embed_dim=architecture.prompt_embed_dim,
            image_embedding_size=(grid, grid),
            input_image_size=(architecture.image_size, architecture.image_size),
            mask_in_chans=16,
        ),
        mask_decoder=modeling.MaskDecoder(
            num_multimask_outputs=3,
            transformer=modeling.TwoWayTransformer(
                depth=architecture.decoder_depth,
                embedding_dim=architecture.prompt_embed_dim,
                mlp_dim=architecture.decoder_mlp_dim,
                num_heads=architecture.decoder_num_heads,
            ),
            transformer_dim=architecture.prompt_embed_dim,
            iou_head_depth=3,
            iou_head_hidden_dim=architecture.iou_head_hidden_dim,
        ),
        pixel_mean=PIXEL_MEAN.tolist(),
        pixel_std=PIXEL_STD.tolist(),
    )
    return model.eval()


@dataclass
class SamPayload:
    features: Any  # torch.Tensor (1, C, g, g) on the predictor's device
    input_size: tuple[int, int]  # (h, w) of the resized image before padding
    checkpoint_hash: str  # weights that made ``features``


def _sam_requirement() -> str | None:
    return sam_modeling_missing()


@register("sam", requirement=_sam_requirement)
class SamPredictor(Predictor):
    """SAM with a user-supplied checkpoint (``variant`` vit_h / vit_l / vit_b)."""

    name = "sam"
    model_type = "sam"
    threshold = 0.5
    variants = SAM_VARIANTS
    download_hint = SAM_DOWNLOAD_HINT

    def __init__(
        self,
        *,
        checkpoint: str | Path | None = None,
        variant: str = "vit_b",
        architecture: SamArchitecture | None = None,
        checkpoint_dir: str | Path | None = None,
        device: str | None = None,
        multimask_output: bool = True,
    ) -> None:
        """
        Args:
          checkpoint: path of the weights (absolute, or relative to the checkpoint directory); None
            uses the variant's official file name there.
          variant: official architecture name (``vit_h``, ``vit_l``, ``vit_b``).
          architecture: explicit hyper-parameters instead of a named variant (tests, custom models).
          checkpoint_dir: overrides ``$CLICKLAB_CHECKPOINT_DIR`` / var/checkpoints.
          device: "cpu", "cuda", ... ; None picks CUDA when present.
          multimask_output: decode 3 candidates and keep the best predicted IoU (RClicks: True).
        """
        if architecture is None:
            if variant not in self.variants:
                raise SegmenterError(
                    f"unknown {self.name} variant {variant!r}; choose one of {sorted(self.variants)}"
                )
            architecture = self.variants[variant]
        else:
            variant = f"custom-{architecture.fingerprint()}" if variant not in self.variants else variant
        self.variant = variant
        self.architecture = architecture
        self.multimask_output = bool(multimask_output)
        self.device = select_device(device)
        self.checkpoint_path = resolve_checkpoint(
            predictor_name=self.name,
            variant=variant,
            checkpoint=checkpoint,
            default_file_name=architecture.default_checkpoint or f"{self.name}_{variant}.pth",
            directory=checkpoint_dir,
            download_hint=self.download_hint,
        )
        self._checkpoint_hash = file_sha256(self.checkpoint_path)
        self.model = self._load_model()

    # -- construction ------------------------------------------------------------------------------

    def _build_model(self):
        return build_sam_model(self.architecture)

    def _load_model(self):
        state_dict = load_state_dict(self.checkpoint_path, predictor_name=self.name, variant=self.variant)
        model = self._build_model()
        try:
            load_into_module(
                model, state_dict, path=self.checkpoint_path, predictor_name=self.name, variant=self.variant
            )
        except CheckpointError as error:
            guess = self._guess_variant(state_dict)
            if guess:
                raise CheckpointError(f"{error} The file looks like variant {guess!r}.") from None
            raise
        return model.to(self.device).eval()

    @staticmethod
    def _guess_variant(state_dict: dict) -> str | None:
        weight = state_dict.get("image_encoder.patch_embed.proj.weight")
        return None if weight is None else _EMBED_DIM_TO_VARIANT.get(int(weight.shape[0]))

    @property
    def model_id(self) -> str:
        return f"{self.name}:{self.variant}:{self.architecture.fingerprint()}:mm{int(self.multimask_output)}"

    @property
    def checkpoint_hash(self) -> str:
        return self._checkpoint_hash

    @property
    def image_encoder(self):
        """The encoder module (exposed so callers can count its forward calls with a hook)."""
        return self.model.image_encoder

    # -- encode / predict --------------------------------------------------------------------------

    def preprocess(self, image: np.ndarray):
        """(1, 3, S, S) float32 tensor: resized long side S, ImageNet-normalised, zero-padded; and (h, w)."""
        import torch

        validate_image(image)
        side = self.architecture.image_size
        resized = resize_longest_side(image, side)
        new_h, new_w = resized.shape[:2]
        normalised = (resized.astype(np.float32) - PIXEL_MEAN) / PIXEL_STD
        padded = np.zeros((side, side, 3), np.float32)
        padded[:new_h, :new_w] = normalised
        tensor = torch.from_numpy(padded.transpose(2, 0, 1)).unsqueeze(0)
        return tensor.to(self.device), (new_h, new_w)

    def encode(self, image: np.ndarray) -> Embedding:
        """Run the image encoder once. ``image``: (H, W, 3) uint8 RGB."""
        import torch

        tensor, input_size = self.preprocess(image)
        with torch.inference_mode():
            features = self._encode_features(tensor)
        payload = SamPayload(features=features, input_size=input_size, checkpoint_hash=self.checkpoint_hash)
        return Embedding(
            model_id=self.model_id,
            image_shape=(int(image.shape[0]), int(image.shape[1])),
            payload=payload,
            nbytes=int(features.numel() * features.element_size()),
        )

    def _encode_features(self, tensor):
        """The image encoder's features of the preprocessed (1, 3, S, S) tensor (under inference mode)."""
        return self.model.image_encoder(tensor)

    def predict(
        self, embedding: Embedding, clicks: Sequence[Click], previous_logits: Any = None
    ) -> Prediction:
        """Decode all ``clicks`` so far; ``previous_logits`` = the previous Prediction.logits or None.

        Returns probabilities (H, W) float32 = sigmoid of the upsampled best logits, ``logits`` =
        that mask's low-res logits (1, 1, 4g, 4g) float32 numpy, ``extra`` = predicted IoU and index.
        """
        import torch
        import torch.nn.functional as functional

        payload = self._payload(embedding)
        if not clicks:
            raise SegmenterError("predict() needs at least one click")
        height, width = embedding.image_shape
        new_h, new_w = payload.input_size
        coords = np.array(
            [[click.x * (new_w / width), click.y * (new_h / height)] for click in clicks], np.float32
        )
        labels = np.array([1 if click.is_positive else 0 for click in clicks], np.int64)
        with torch.inference_mode():
            points = (
                torch.from_numpy(coords)[None].to(self.device),
                torch.from_numpy(labels)[None].to(self.device),
            )
            mask_input = self._mask_input(previous_logits)
            sparse, dense = self.model.prompt_encoder(points=points, boxes=None, masks=mask_input)
            low_res, iou_predictions = self._decode(payload.features, sparse, dense)
            best = int(torch.argmax(iou_predictions[0]))
            best_low = low_res[:, best : best + 1]
            side = self.architecture.image_size
            upsampled = functional.interpolate(best_low, (side, side), mode="bilinear", align_corners=False)
            upsampled = upsampled[..., :new_h, :new_w]
            full = functional.interpolate(upsampled, (height, width), mode="bilinear", align_corners=False)
            probabilities = torch.sigmoid(full)[0, 0].float().cpu().numpy()
            logits = best_low.float().cpu().numpy()
            predicted_iou = float(iou_predictions[0, best])
        return Prediction(
            probabilities=probabilities.astype(np.float32, copy=False),
            logits=logits,
            extra={"predicted_iou": predicted_iou, "mask_index": best},
        )

    def prior_from_mask(self, embedding: Embedding, mask: np.ndarray) -> np.ndarray:
        """``mask_input`` low-res logits (1, 1, 4g, 4g) of a stored bool (H, W) mask (module docstring)."""
        mask = super().prior_from_mask(embedding, mask)
        side = self.architecture.image_size
        return low_res_mask_logits(
            mask,
            content_hw=self._payload(embedding).input_size,
            padded_side=side,
            low_res_side=4 * (side // self.architecture.patch_size),
        )

    def _decode(self, features, sparse, dense):
        return self.model.mask_decoder(
            image_embeddings=features,
            image_pe=self.model.prompt_encoder.get_dense_pe(),
            sparse_prompt_embeddings=sparse,
            dense_prompt_embeddings=dense,
            multimask_output=self.multimask_output,
        )

    def _mask_input(self, previous_logits: Any):
        import torch

        if previous_logits is None:
            return None
        side = 4 * (self.architecture.image_size // self.architecture.patch_size)
        tensor = torch.as_tensor(
            np.asarray(previous_logits, np.float32)
            if not torch.is_tensor(previous_logits)
            else previous_logits
        )
        if tensor.ndim == 2:
            tensor = tensor[None, None]
        if tuple(tensor.shape) != (1, 1, side, side):
            raise SegmenterError(
                f"previous_logits has shape {tuple(tensor.shape)}; {self.name} expects its own low-res logits "
                f"(1, 1, {side}, {side}) from the previous Prediction.logits, or None at a trajectory start"
            )
        return tensor.to(self.device, torch.float32)

    def _payload(self, embedding: Embedding) -> SamPayload:
        if (
            embedding.model_id != self.model_id
            or not isinstance(embedding.payload, SamPayload)
            or embedding.payload.checkpoint_hash != self.checkpoint_hash
        ):
            raise SegmenterError(
                f"embedding was made by {embedding.model_id!r}, not by this predictor ({self.model_id!r}, "
                f"checkpoint {self.checkpoint_path}): encode the image with the predictor that predicts"
            )
        return embedding.payload
