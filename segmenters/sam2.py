"""SAM 2 / SAM 2.1 adapter over the user's installed ``sam2`` package.

The ``sam2`` package needs torchvision and hydra-core, which this project's environment does not
install; a researcher installs it from https://github.com/facebookresearch/sam2 (``pip install -e .``
in a clone) together with them. The availability check imports the two modules building imports
(``sam2.build_sam``, ``sam2.sam2_image_predictor``), so ``sam2`` is listed only when they import; their
failures (a missing module, a checkpoint that does not fit) come as SegmenterError/CheckpointError. ``encode`` runs
``SAM2ImagePredictor.set_image`` once and keeps its feature dictionary; ``predict`` puts those
features back into the predictor and calls ``predict`` with all clicks so far, the previous
low-res logits as ``mask_input`` and ``multimask_output=False`` (RClicks protocol §7), threshold 0.5.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from segmenters.base import Click, Embedding, Prediction, Predictor, SegmenterError
from segmenters.checkpoints import file_sha256, load_into_module, load_state_dict, resolve_checkpoint
from segmenters.devices import select_device
from segmenters.images import validate_image
from segmenters.registry import register
from segmenters.upstream import import_upstream, install_hint, upstream_errors

SAM2_DOWNLOAD_HINT = "https://github.com/facebookresearch/sam2#download-checkpoints"

#: variant -> (config name inside the sam2 package, official checkpoint file name)
SAM2_VARIANTS: dict[str, tuple[str, str]] = {
    "sam2.1_hiera_t": ("configs/sam2.1/sam2.1_hiera_t.yaml", "sam2.1_hiera_tiny.pt"),
    "sam2.1_hiera_s": ("configs/sam2.1/sam2.1_hiera_s.yaml", "sam2.1_hiera_small.pt"),
    "sam2.1_hiera_b+": ("configs/sam2.1/sam2.1_hiera_b+.yaml", "sam2.1_hiera_base_plus.pt"),
    "sam2.1_hiera_l": ("configs/sam2.1/sam2.1_hiera_l.yaml", "sam2.1_hiera_large.pt"),
    "sam2_hiera_t": ("configs/sam2/sam2_hiera_t.yaml", "sam2_hiera_tiny.pt"),
    "sam2_hiera_s": ("configs/sam2/sam2_hiera_s.yaml", "sam2_hiera_small.pt"),
    "sam2_hiera_b+": ("configs/sam2/sam2_hiera_b+.yaml", "sam2_hiera_base_plus.pt"),
    "sam2_hiera_l": ("configs/sam2/sam2_hiera_l.yaml", "sam2_hiera_large.pt"),
}


SAM2_LABEL = "sam2 (SAM 2)"
#: The modules building a SAM 2 predictor imports (and the availability check imports).
SAM2_MODULES = ("sam2.build_sam", "sam2.sam2_image_predictor")


def sam2_missing() -> str | None:
    """None when the modules building SAM 2 imports can be imported here, else what to install."""
    if importlib.util.find_spec("sam2") is None:
        return (
            f"the 'sam2' package is not installed: {install_hint('sam2')} (it needs torchvision), then put e.g. "
            "sam2.1_hiera_large.pt in the checkpoint directory"
        )
    try:
        for module in SAM2_MODULES:
            import_upstream(module, package=SAM2_LABEL)
    except SegmenterError as error:
        return str(error)
    return None


@dataclass
class Sam2Payload:
    features: dict  # SAM2ImagePredictor._features: image_embed + high_res_feats tensors
    checkpoint_hash: str


@register("sam2", requirement=sam2_missing)
class Sam2Predictor(Predictor):
    """SAM 2 / 2.1 with a user-supplied checkpoint (variants in :data:`SAM2_VARIANTS`)."""

    name = "sam2"
    model_type = "sam2"
    threshold = 0.5
    variants = SAM2_VARIANTS

    def __init__(
        self,
        *,
        checkpoint: str | Path | None = None,
        variant: str = "sam2.1_hiera_l",
        config: str | None = None,
        checkpoint_dir: str | Path | None = None,
        device: str | None = None,
        multimask_output: bool = False,
    ) -> None:
        """
        Args:
          checkpoint: weights file (absolute, or relative to the checkpoint directory); None uses the
            variant's official file name there.
          variant: one of :data:`SAM2_VARIANTS`; picks the config and default file name.
          config: a sam2 config name to use instead of the variant's.
          checkpoint_dir: overrides ``$CLICKLAB_CHECKPOINT_DIR`` / var/checkpoints.
          device: "cpu", "cuda", ...; None picks CUDA when present.
          multimask_output: RClicks uses False for SAM 2.
        """
        if variant not in SAM2_VARIANTS:
            raise SegmenterError(f"unknown sam2 variant {variant!r}; choose one of {sorted(SAM2_VARIANTS)}")
        default_config, default_file = SAM2_VARIANTS[variant]
        self.variant = variant
        self.config = config or default_config
        self.multimask_output = bool(multimask_output)
        self.device = select_device(device)
        self.checkpoint_path = resolve_checkpoint(
            predictor_name=self.name,
            variant=variant,
            checkpoint=checkpoint,
            default_file_name=default_file,
            directory=checkpoint_dir,
            download_hint=SAM2_DOWNLOAD_HINT,
        )
        self._checkpoint_hash = file_sha256(self.checkpoint_path)
        build_sam2 = import_upstream(SAM2_MODULES[0], package=SAM2_LABEL).build_sam2
        image_predictor_class = import_upstream(SAM2_MODULES[1], package=SAM2_LABEL).SAM2ImagePredictor
        # Read the file first, as every adapter does (weights only; an unreadable or truncated file is a
        # CheckpointError naming it), then build the network without weights and load them strictly, as
        # upstream's build_sam2(config, ckpt_path) would (its _load_checkpoint: torch.load(...)["model"], then a
        # strict load_state_dict) but without its raw UnpicklingError / RuntimeError.
        state_dict = load_state_dict(self.checkpoint_path, predictor_name=self.name, variant=variant)
        with upstream_errors(package=SAM2_LABEL, doing=f"building {variant} from {self.config}"):
            model = build_sam2(self.config, None, device=str(self.device), mode="eval")
        load_into_module(
            model, state_dict, path=self.checkpoint_path, predictor_name=self.name, variant=variant
        )
        model = model.to(self.device).eval()
        with upstream_errors(package=SAM2_LABEL, doing="creating SAM2ImagePredictor"):
            self._image_predictor = image_predictor_class(model)

    @property
    def model_id(self) -> str:
        return f"sam2:{self.variant}:{self.config}:mm{int(self.multimask_output)}"

    @property
    def checkpoint_hash(self) -> str:
        return self._checkpoint_hash

    @property
    def image_encoder(self):
        return self._image_predictor.model.image_encoder

    def encode(self, image: np.ndarray) -> Embedding:
        import torch

        validate_image(image)
        with torch.inference_mode(), upstream_errors(package=SAM2_LABEL, doing="encoding the image"):
            self._image_predictor.set_image(image)
        features = self._image_predictor._features  # the predictor keeps its per-image state privately
        self._image_predictor.reset_predictor()
        nbytes = sum(
            tensor.numel() * tensor.element_size()
            for value in features.values()
            for tensor in (value if isinstance(value, list | tuple) else [value])
        )
        return Embedding(
            model_id=self.model_id,
            image_shape=(int(image.shape[0]), int(image.shape[1])),
            payload=Sam2Payload(features=features, checkpoint_hash=self._checkpoint_hash),
            nbytes=int(nbytes),
        )

    def predict(
        self, embedding: Embedding, clicks: Sequence[Click], previous_logits: Any = None
    ) -> Prediction:
        """All clicks so far; ``previous_logits``: previous Prediction.logits (1, 256, 256) or None."""
        import torch

        payload = embedding.payload
        if (
            embedding.model_id != self.model_id
            or not isinstance(payload, Sam2Payload)
            or (payload.checkpoint_hash != self._checkpoint_hash)
        ):
            raise SegmenterError(
                f"embedding was made by {embedding.model_id!r}, not by this predictor ({self.model_id!r}, "
                f"checkpoint {self.checkpoint_path}): encode the image with the predictor that predicts"
            )
        if not clicks:
            raise SegmenterError("predict() needs at least one click")
        coords = np.array([[click.x, click.y] for click in clicks], np.float32)
        labels = np.array([1 if click.is_positive else 0 for click in clicks], np.int32)
        mask_input = (
            None if previous_logits is None else np.asarray(previous_logits, np.float32).reshape(1, 256, 256)
        )
        predictor = self._image_predictor
        predictor._features = payload.features
        predictor._orig_hw = [tuple(embedding.image_shape)]
        predictor._is_image_set = True
        predictor._is_batch = False
        try:
            with torch.inference_mode(), upstream_errors(package=SAM2_LABEL, doing="decoding the clicks"):
                masks, scores, low_res = predictor.predict(
                    point_coords=coords,
                    point_labels=labels,
                    mask_input=mask_input,
                    multimask_output=self.multimask_output,
                    return_logits=True,
                )
        finally:
            predictor.reset_predictor()
        best = int(np.argmax(scores))
        probabilities = 1.0 / (1.0 + np.exp(-np.clip(masks[best].astype(np.float32), -50, 50)))
        return Prediction(
            probabilities=probabilities.astype(np.float32),
            logits=low_res[best : best + 1].astype(np.float32),
            extra={"predicted_iou": float(scores[best]), "mask_index": best},
        )
