"""RITM and SimpleClick adapters (``isegm`` click-map models) with the RClicks evaluation transforms.

Neither architecture is on PyPI: a researcher clones RITM (https://github.com/SamsungLabs/ritm_interactive_segmentation)
or SimpleClick (https://github.com/uncbiag/SimpleClick) and puts the clone on ``PYTHONPATH`` (both
provide the ``isegm`` package). The adapter uses that package only to build the network from the
checkpoint's config; the per-click loop is ours and follows the protocol (§7, session-and-eval §2):

* ``encode`` only converts the image to a (1, 3, H, W) float tensor in [0, 1]: these networks take
  the clicks as input maps, so the whole network runs on every click (nothing else can be cached).
* Clicks go in as two lists, positives and negatives, of (y, x, index), each padded with
  (-1, -1, -1) to a common length; index = 0-based global click order.
* The previous probabilities are the 4th input channel for ``with_prev_mask`` (itermask) models.
* Zoom-in, RITM (``skip_clicks=1``; -1 for TETRIS): from the second click the input is cropped to
  the previous mask's box plus the positive clicks, expanded 1.4x, at least 200 px, resized to a long
  side of 400 (600 for DAVIS) keeping the aspect ratio; the box is kept while it holds every positive
  click (``rmin <= y < rmax``, ``cmin <= x < cmax`` as upstream) and its IoU with the new box is at
  least 0.5. After an empty prediction there is no new box: the whole image goes to the network and, as
  upstream's ``ZoomIn`` (it keeps its object ROI and inverts the transform with it), the whole-image
  prediction is squeezed into the kept box and pasted there; the box stays for the next click. This is
  upstream's behaviour, kept on purpose so NoC stays comparable with published RITM numbers.
* Zoom-in, SimpleClick (upstream's evaluation: ``skip_clicks=-1``, ``target_size=(448, 448)``, 672 for
  DAVIS): from the first click (the whole image at click 1) the zoom region is resized to the fixed
  square, whatever its aspect ratio. A plain ViT has a fixed patch grid (28x28 for the 448 models): the
  square must be a multiple of twice the patch size (SimpleClick attends within 2x2 windows of the grid),
  and when it differs from the network's own input size
  the position embedding is interpolated (bicubic, as upstream's ``interpolate_pos_embed_inference``).
  No other input size ever reaches the network.
* Horizontal-flip TTA: the batch holds the image and its mirror; the two logit maps are averaged,
  then a sigmoid. Threshold 0.49.

Failures of the user's clone (a missing ``mmcv``/``timm``, ``np.int`` under NumPy 2, a shape mismatch
in its forward pass) are raised as :class:`~segmenters.base.SegmenterError` naming the fix
(:mod:`segmenters.upstream`).

``Prediction.logits`` is an :class:`IsegmState` (full-size probabilities and the zoom box) to
pass back as ``previous_logits``; a plain (H, W) probability array is accepted too.

Variants and what the file holds: a checkpoint's architecture is read from the file
(:func:`checkpoint_architecture`: RITM's HRNet width and ``small`` from the saved config, a plain ViT's
embedding width, depth and patch size from its weights). A variant named by the caller must be that
architecture (``hrnet18_cocolvis`` and ``hrnet18_sbd`` share one; they differ in training data only),
else the checkpoint is refused naming the variant that fits; with no variant named, the variant is the
one the file holds (``custom-<architecture>`` when no variant has it). So ``variant`` in every mask's
provenance is the architecture of the weights that made it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from segmenters.base import CheckpointError, Click, Embedding, Prediction, Predictor, SegmenterError
from segmenters.checkpoints import file_sha256, resolve_checkpoint
from segmenters.devices import select_device
from segmenters.images import validate_image
from segmenters.registry import register
from segmenters.upstream import explain, import_upstream, install_hint, upstream_errors

Box = tuple[int, int, int, int]  # (row_min, row_max, col_min, col_max), inclusive

RITM_DOWNLOAD_HINT = "https://github.com/SamsungLabs/ritm_interactive_segmentation#pretrained-models"
SIMPLECLICK_DOWNLOAD_HINT = "https://github.com/uncbiag/SimpleClick#download"

RITM_VARIANTS = {
    "hrnet18_cocolvis": "coco_lvis_h18_itermask.pth",
    "hrnet18s_cocolvis": "coco_lvis_h18s_itermask.pth",
    "hrnet32_cocolvis": "coco_lvis_h32_itermask.pth",
    "hrnet18_sbd": "sbd_h18_itermask.pth",
}
SIMPLECLICK_VARIANTS = {
    "vit_xtiny": "cocolvis_vit_xtiny.pth",
    "vit_base": "cocolvis_vit_base.pth",
    "vit_large": "cocolvis_vit_large.pth",
    "vit_huge": "cocolvis_vit_huge.pth",
}
#: SimpleClick's evaluation square (upstream ``--eval-mode cvpr``: 448, 672 for DAVIS) when the network
#: does not say its own input size.
SIMPLECLICK_SQUARE_PX = 448

#: The architecture each variant's checkpoint holds (:func:`checkpoint_architecture`). RITM's HRNet: width and
#: ``small`` (h18s: small=True); hrnet18_cocolvis and hrnet18_sbd differ only in their training data.
RITM_ARCHITECTURES = {
    "hrnet18_cocolvis": "hrnet18",
    "hrnet18s_cocolvis": "hrnet18s",
    "hrnet32_cocolvis": "hrnet32",
    "hrnet18_sbd": "hrnet18",
}
#: SimpleClick's plain ViTs: embedding width x depth / patch size (upstream models/iter_mask/plainvit_*).
SIMPLECLICK_ARCHITECTURES = {
    "vit_xtiny": "vit160x8p16",
    "vit_base": "vit768x12p16",
    "vit_large": "vit1024x24p16",
    "vit_huge": "vit1280x32p14",
}
_BLOCK_KEY = re.compile(r"^backbone\.blocks\.(\d+)\.")


def _config_value(params: Mapping, name: str, default: Any = None) -> Any:
    """A parameter of an isegm config: saved as ``{"type", "value", "specified"}`` by upstream's ``serialize``
    (or as the plain value)."""
    value = params.get(name, default)
    return value.get("value", default) if isinstance(value, dict) and "value" in value else value


def checkpoint_architecture(config: Any, state_dict: Mapping[str, Any]) -> str:
    """The architecture an isegm checkpoint holds: ``hrnet<width>[s]`` for RITM's ``HRNetModel`` (from the saved
    config: ``width``, ``small``), ``vit<width>x<depth>p<patch>`` for a plain ViT (from its weights:
    ``backbone.patch_embed.proj.weight`` and the ``backbone.blocks.<i>`` count), else the model class's name."""
    class_path = str(config.get("class", "")) if isinstance(config, dict) else ""
    params = config.get("params", {}) if isinstance(config, dict) else {}
    class_name = class_path.rsplit(".", 1)[-1] or "unknown"
    patch = state_dict.get("backbone.patch_embed.proj.weight")
    if patch is not None and getattr(patch, "ndim", 0) == 4:
        depth = 1 + max((int(m.group(1)) for k in state_dict if (m := _BLOCK_KEY.match(k))), default=-1)
        return f"vit{int(patch.shape[0])}x{depth}p{int(patch.shape[2])}"
    if class_name == "HRNetModel" and isinstance(params, dict) and _config_value(params, "width") is not None:
        small = bool(_config_value(params, "small", False))
        return f"hrnet{int(_config_value(params, 'width'))}{'s' if small else ''}"
    return class_name


#: Modules building a checkpoint imports: the config loader, and the model class of the architecture
#: (its module pulls the architecture's dependencies, e.g. SimpleClick's head imports timm and mmcv).
SERIALIZATION_MODULE = "isegm.utils.serialization"
RITM_MODEL_MODULE = "isegm.model.is_hrnet_model"
SIMPLECLICK_MODEL_MODULE = "isegm.model.is_plainvit_model"


def isegm_missing() -> str | None:
    """None when an ``isegm`` package (RITM or SimpleClick clone) can be found, else what to do."""
    if importlib.util.find_spec("isegm") is None:
        return (
            f"the 'isegm' package is not installed (RITM/SimpleClick are not on PyPI): {install_hint('isegm')}; "
            "or, with a network you built yourself, construct segmenters.isegm.RitmPredictor(model=...) or "
            "SimpleClickPredictor(model=...) directly"
        )
    return None


def _clone_missing(model_module: str, label: str) -> str | None:
    """None when the clone's config loader and ``model_module`` import, else why not and what to do."""
    missing = isegm_missing()
    if missing:
        return missing
    try:
        import_upstream(SERIALIZATION_MODULE, package=label)
        import_upstream(model_module, package=label)
    except SegmenterError as error:
        return str(error)
    return None


def ritm_missing() -> str | None:
    """None when RITM checkpoints can be built here (what building imports, imports)."""
    return _clone_missing(RITM_MODEL_MODULE, "RITM clone (isegm)")


def simpleclick_missing() -> str | None:
    """None when SimpleClick checkpoints can be built here (its plain-ViT model module imports)."""
    return _clone_missing(SIMPLECLICK_MODEL_MODULE, "SimpleClick clone (isegm)")


CLONE_MISMATCH_FIX = (
    "The clone does not match the checkpoint: RITM checkpoints (e.g. coco_lvis_h18_itermask.pth) need an RITM "
    "or SimpleClick clone, SimpleClick ones (cocolvis_vit_*.pth) a SimpleClick clone, at the release the "
    "checkpoint was published with (segmenters/README.md)."
)


def build_from_config(load_model, config: dict, *, eval_ritm: bool):
    """The network of a checkpoint's ``config``, built by the clone's ``isegm.utils.serialization.load_model``.

    RITM's ``load_model(config, **kwargs)`` builds any of its models as saved. SimpleClick's
    ``load_model(config, eval_ritm, **kwargs)`` needs to be told when the config is an RITM model's: its
    ``ISModel`` defaults to ``use_rgb_conv=False`` where RITM's defaulted to True, so an RITM checkpoint
    built with ``eval_ritm=False`` would lack the click-map transform whose weights the file holds (and
    ``strict=False`` loading would drop them silently). ``eval_ritm`` is passed exactly when the clone's
    ``load_model`` takes it, as upstream's evaluation script does (``--eval-ritm``).
    """
    parameters: Mapping[str, inspect.Parameter]
    try:
        parameters = inspect.signature(load_model).parameters
    except (TypeError, ValueError):  # a builtin or C callable: call it as RITM's
        parameters = {}
    if "eval_ritm" in parameters:
        return load_model(config, eval_ritm=eval_ritm)
    return load_model(config)


# -- click encoding and zoom-in geometry (pure numpy) -----------------------------------------------


def encode_points(
    clicks_per_item: Sequence[Sequence[tuple[float, float, bool]]], *, clicks_limit: int | None = None
):
    """(B, 2N, 3) float32 array: per item N positive then N negative (y, x, index), padded with -1.

    ``clicks_per_item``: per batch item, the clicks in order as (y, x, is_positive).
    N = the largest count of either polarity over the batch (at least 1), after truncating each
    item to its first ``clicks_limit`` clicks.
    """
    items = [
        list(clicks)[:clicks_limit] if clicks_limit is not None else list(clicks)
        for clicks in clicks_per_item
    ]
    counts = [sum(1 for c in clicks if c[2]) for clicks in items] + [
        sum(1 for c in clicks if not c[2]) for clicks in items
    ]
    width = max(1, max(counts, default=0))
    encoded = []
    for clicks in items:
        positives = [(y, x, index) for index, (y, x, positive) in enumerate(clicks) if positive]
        negatives = [(y, x, index) for index, (y, x, positive) in enumerate(clicks) if not positive]
        padding = (-1.0, -1.0, -1.0)
        encoded.append(
            positives
            + [padding] * (width - len(positives))
            + negatives
            + [padding] * (width - len(negatives))
        )
    return np.asarray(encoded, np.float32).reshape(len(items), 2 * width, 3)


def mask_box(mask: np.ndarray) -> Box | None:
    """Tight inclusive box of a bool mask, or None when it is empty."""
    rows = np.flatnonzero(mask.any(axis=1))
    if rows.size == 0:
        return None
    cols = np.flatnonzero(mask.any(axis=0))
    return int(rows[0]), int(rows[-1]), int(cols[0]), int(cols[-1])


def expand_box(box: Box, *, expansion_ratio: float, min_crop_size_px: int, height: int, width: int) -> Box:
    """Scale a box about its centre (at least ``min_crop_size_px`` per side), then clamp to the image."""
    row_min, row_max, col_min, col_max = box
    row_centre, col_centre = 0.5 * (row_min + row_max), 0.5 * (col_min + col_max)
    box_h = max(expansion_ratio * (row_max - row_min + 1), min_crop_size_px)
    box_w = max(expansion_ratio * (col_max - col_min + 1), min_crop_size_px)
    expanded = (
        round(row_centre - 0.5 * box_h),
        round(row_centre + 0.5 * box_h),
        round(col_centre - 0.5 * box_w),
        round(col_centre + 0.5 * box_w),
    )
    return (
        min(max(expanded[0], 0), height - 1),
        min(max(expanded[1], 0), height - 1),
        min(max(expanded[2], 0), width - 1),
        min(max(expanded[3], 0), width - 1),
    )


def box_iou(one: Box, two: Box) -> float:
    rows = min(one[1], two[1]) - max(one[0], two[0]) + 1
    cols = min(one[3], two[3]) - max(one[2], two[2]) + 1
    inter = max(rows, 0) * max(cols, 0)
    area = lambda box: (box[1] - box[0] + 1) * (box[3] - box[2] + 1)  # noqa: E731
    return inter / float(area(one) + area(two) - inter)


def box_holds_positive_clicks(box: Box, clicks: Sequence[Click]) -> bool:
    """Upstream's ``check_object_roi``: every positive click has ``rmin <= y < rmax`` and ``cmin <= x < cmax``
    (the last row and column of the box count as outside, as in RITM/SimpleClick)."""
    return all(box[0] <= c.y < box[1] and box[2] <= c.x < box[3] for c in clicks if c.is_positive)


@dataclass
class IsegmState:
    """Per-trajectory state carried between clicks (the ``logits`` of a Prediction)."""

    probabilities: np.ndarray  # (H, W) float32 in [0, 1], full size
    object_box: Box | None  # zoom-in box in use, or None before zooming


@dataclass(frozen=True)
class ZoomIn:
    """RITM's ZoomIn evaluation transform, as documented in the RClicks protocol §7.

    ``square=False``: the crop is resized to a long side of ``target_size_px`` (RITM, ``target_size=400``).
    ``square=True``: the crop is resized to ``target_size_px`` x ``target_size_px`` whatever its aspect
    ratio (SimpleClick, ``target_size=(448, 448)``).
    """

    target_size_px: int = 400
    skip_clicks: int = 1
    expansion_ratio: float = 1.4
    min_crop_size_px: int = 200
    recompute_iou: float = 0.5
    probability_threshold: float = 0.5
    square: bool = False

    def plan(
        self, *, clicks: Sequence[Click], previous: IsegmState | None, height: int, width: int
    ) -> tuple[Box | None, Box | None]:
        """(crop, roi) for this click: the region the network gets (None: the whole image), and upstream's
        object ROI after the click, into which the prediction is resized and pasted (None: not zoomed yet).

        They differ after an empty prediction: no box can be made from it, so the whole image is the input,
        while upstream's ``ZoomIn`` keeps its ROI and still inverts the transform with it, squeezing the
        whole-image prediction into the kept box.
        """
        kept = previous.object_box if previous is not None else None
        if len(clicks) <= self.skip_clicks:
            return None, kept
        current = None
        if previous is not None:
            current = self.object_box(previous.probabilities > self.probability_threshold, clicks)
        if current is None:
            if self.skip_clicks >= 0:
                return None, kept
            current = (0, height - 1, 0, width - 1)
        if (
            kept is None
            or not box_holds_positive_clicks(kept, clicks)
            or box_iou(current, kept) < self.recompute_iou
        ):
            kept = current
        return kept, kept

    def choose_box(
        self, *, clicks: Sequence[Click], previous: IsegmState | None, height: int, width: int
    ) -> Box | None:
        """The crop for this click, or None to run on the whole image (:meth:`plan`'s first half)."""
        return self.plan(clicks=clicks, previous=previous, height=height, width=width)[0]

    def object_box(self, mask: np.ndarray, clicks: Sequence[Click]) -> Box | None:
        if not mask.any():
            return None
        mask = mask.copy()
        height, width = mask.shape
        for click in clicks:
            if click.is_positive:
                mask[min(int(click.y), height - 1), min(int(click.x), width - 1)] = True
        box = mask_box(mask)
        assert box is not None  # the mask has a True pixel (checked above)
        return expand_box(
            box,
            expansion_ratio=self.expansion_ratio,
            min_crop_size_px=self.min_crop_size_px,
            height=height,
            width=width,
        )

    def crop_size(self, box: Box) -> tuple[int, int]:
        """(height, width) the crop of ``box`` is resized to."""
        if self.square:
            return self.target_size_px, self.target_size_px
        box_h, box_w = box[1] - box[0] + 1, box[3] - box[2] + 1
        scale = self.target_size_px / max(box_h, box_w)
        return round(box_h * scale), round(box_w * scale)


# -- plain-ViT patch grid ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PatchGrid:
    """The fixed token grid of a plain-ViT backbone: input must be (rows*patch_h) x (cols*patch_w)."""

    rows: int
    cols: int
    patch_h: int
    patch_w: int

    @property
    def input_size(self) -> tuple[int, int]:
        return self.rows * self.patch_h, self.cols * self.patch_w


def _pair(value) -> tuple[int, int]:
    return (int(value[0]), int(value[1])) if isinstance(value, list | tuple) else (int(value), int(value))


def patch_grid(net) -> PatchGrid | None:
    """The fixed grid of ``net.backbone`` (SimpleClick's VisionTransformer layout), or None for networks
    that take any input size (RITM's HRNet, custom networks)."""
    backbone = getattr(net, "backbone", None)
    patch_embed = getattr(backbone, "patch_embed", None)
    if getattr(backbone, "pos_embed", None) is None or patch_embed is None:
        return None
    if getattr(patch_embed, "grid_size", None) is None or getattr(patch_embed, "patch_size", None) is None:
        return None
    rows, cols = _pair(patch_embed.grid_size)
    patch_h, patch_w = _pair(patch_embed.patch_size)
    return PatchGrid(rows=rows, cols=cols, patch_h=patch_h, patch_w=patch_w)


def fit_position_embedding(net, *, side_px: int) -> PatchGrid:
    """Make ``net``'s plain-ViT backbone accept ``side_px`` x ``side_px`` inputs (in place).

    When the square's grid differs from the backbone's, the position tokens (all but the leading extra
    tokens, e.g. the class token) are resized with bicubic interpolation (``align_corners=False``) and
    the backbone's ``patch_embed.grid_size`` is set to the new grid: what upstream SimpleClick's
    evaluation does before running a 448 model on DAVIS' 672 square. Raises SegmenterError when the
    square is not a multiple of the patch size (no grid fits it), or, for SimpleClick's backbone (it has
    ``patchify``: attention within the grid's four 2 x 2 windows), when the grid's side is odd.
    """
    import torch
    import torch.nn.functional as functional

    grid = patch_grid(net)
    if grid is None:
        raise SegmenterError("the network has no plain-ViT backbone (backbone.pos_embed/patch_embed)")
    if side_px % grid.patch_h or side_px % grid.patch_w:
        raise SegmenterError(
            f"zoom-in square of {side_px} px is not a multiple of the network's {grid.patch_h}x{grid.patch_w} px "
            f"patches: no fixed token grid fits it. Use a multiple of {grid.patch_h} (448 or 672 for SimpleClick)."
        )
    new_rows, new_cols = side_px // grid.patch_h, side_px // grid.patch_w
    if hasattr(net.backbone, "patchify") and (new_rows % 2 or new_cols % 2):
        raise SegmenterError(
            f"zoom-in square of {side_px} px gives a {new_rows}x{new_cols} token grid, but SimpleClick's backbone "
            f"splits the grid into 2x2 windows, so its sides must be even: use a multiple of {2 * grid.patch_h} "
            "px (448 or 672 for SimpleClick)."
        )
    if (new_rows, new_cols) == (grid.rows, grid.cols):
        return grid
    backbone = net.backbone
    position = backbone.pos_embed.detach()
    extra = position.shape[1] - grid.rows * grid.cols
    if extra < 0:
        raise SegmenterError(
            f"the backbone's position embedding has {position.shape[1]} tokens, fewer than its "
            f"{grid.rows}x{grid.cols} grid: the checkpoint does not match the architecture"
        )
    tokens = position[:, extra:].reshape(1, grid.rows, grid.cols, -1).permute(0, 3, 1, 2)
    tokens = functional.interpolate(tokens, size=(new_rows, new_cols), mode="bicubic", align_corners=False)
    tokens = tokens.permute(0, 2, 3, 1).flatten(1, 2)
    backbone.pos_embed = torch.nn.Parameter(
        torch.cat([position[:, :extra], tokens], dim=1), requires_grad=False
    )
    backbone.patch_embed.grid_size = (new_rows, new_cols)
    return PatchGrid(rows=new_rows, cols=new_cols, patch_h=grid.patch_h, patch_w=grid.patch_w)


# -- predictor ------------------------------------------------------------------------------------


class IsegmPredictor(Predictor):
    """An ``isegm`` click-map network (RITM / SimpleClick) behind the Predictor interface."""

    threshold = 0.49
    variants: dict[str, str] = {}
    #: variant -> the architecture its checkpoint holds (:func:`checkpoint_architecture`)
    architectures: dict[str, str] = {}
    download_hint = ""
    #: What the user installed, for error messages.
    package_label = "isegm clone"
    #: Module of the architecture's model class (imported by building and by the availability check).
    model_module = ""
    #: Passed to a SimpleClick clone's ``load_model`` (see :func:`build_from_config`).
    eval_ritm = False

    def __init__(
        self,
        *,
        checkpoint: str | Path | None = None,
        variant: str | None = None,
        model: Any = None,
        checkpoint_dir: str | Path | None = None,
        device: str | None = None,
        zoom_in_target_size_px: int | None = 400,
        zoom_in_skip_clicks: int = 1,
        with_flip: bool = True,
        clicks_limit: int | None = None,
    ) -> None:
        """
        Args:
          checkpoint: weights file with the network's config (RITM/SimpleClick format); absolute, or
            relative to the checkpoint directory. None uses the variant's official file name.
          variant: a key of ``variants`` (picks the default file name); the checkpoint must hold its
            architecture. None: the variant the file holds (``custom-<architecture>`` when none has it).
          model: an already built network (``forward(image, points) -> {"instances": logits}``)
            instead of a checkpoint, e.g. a custom or randomly initialised one.
          zoom_in_target_size_px: RITM: long side of the zoom crop, 400 (600 for DAVIS), 0 disables zoom-in.
          zoom_in_skip_clicks: 1, or -1 for TETRIS (zoom from the first click).
          with_flip: horizontal-flip test-time augmentation.
          clicks_limit: feed only the first N clicks to the network (None: all).
        """
        self.device = select_device(device)
        self.with_flip = bool(with_flip)
        self.clicks_limit = clicks_limit
        if model is not None:
            if checkpoint is not None:
                raise SegmenterError(f"{self.name}: pass either checkpoint= or model=, not both")
            self.variant = variant or f"custom-{type(model).__name__}"
            self.architecture = f"custom-{type(model).__name__}"
            self.checkpoint_path = None
            self._checkpoint_hash = _module_hash(model)
            self.net = model
        else:
            named = variant
            variant = variant or next(iter(self.variants))
            if variant not in self.variants:
                raise SegmenterError(
                    f"unknown {self.name} variant {variant!r}; choose one of {sorted(self.variants)}"
                )
            missing = isegm_missing()
            if missing:
                raise SegmenterError(f"predictor {self.name!r} cannot load {variant!r}: {missing}")
            self.variant = variant
            self.checkpoint_path = resolve_checkpoint(
                predictor_name=self.name,
                variant=variant,
                checkpoint=checkpoint,
                default_file_name=self.variants[variant],
                directory=checkpoint_dir,
                download_hint=self.download_hint,
            )
            self._checkpoint_hash = file_sha256(self.checkpoint_path)
            self.net = self._load_network(self.checkpoint_path, named_variant=named)
        self.net = self.net.to(self.device).eval()
        self.zoom_in = self._make_zoom_in(zoom_in_target_size_px, zoom_in_skip_clicks)
        self.grid = patch_grid(self.net)
        if self.grid is not None:
            self._fit_grid(self.grid)

    def _make_zoom_in(self, target_size_px: int | None, skip_clicks: int) -> ZoomIn | None:
        if target_size_px is None:
            target_size_px = 400
        return ZoomIn(target_size_px=target_size_px, skip_clicks=skip_clicks) if target_size_px else None

    def _fit_grid(self, grid: PatchGrid) -> None:
        """A fixed-grid network needs every input at its grid's size: only a fixed square zoom-in gives that."""
        if self.zoom_in is None or not self.zoom_in.square:
            raise SegmenterError(
                f"{self.name}: the network is a plain ViT with a fixed {grid.rows}x{grid.cols} patch grid, "
                "so it only takes inputs of one size; run it with the fixed-square zoom-in (the simpleclick "
                "predictor, zoom_in_target_size_px=448 or 672) instead of a zoom-in that keeps the aspect ratio."
            )
        with upstream_errors(package=self.package_label, doing="interpolating the position embedding"):
            self.grid = fit_position_embedding(self.net, side_px=self.zoom_in.target_size_px)

    def _variant_of(self, path: Path, architecture: str, named: str | None) -> str:
        """The variant to record for a file holding ``architecture``; refuses a named variant it is not."""
        fitting = [variant for variant, held in self.architectures.items() if held == architecture]
        if named is None:
            return (
                self.variant
                if self.variant in fitting
                else (fitting[0] if fitting else f"custom-{architecture}")
            )
        if named in fitting:
            return named
        expected = self.architectures.get(named, "?")
        fix = (
            f"pass variant {fitting[0]!r}"
            + (f" (or {', '.join(map(repr, fitting[1:]))})" if fitting[1:] else "")
            if fitting
            else f"no {self.name} variant has it: leave the variant out to run it as 'custom-{architecture}'"
        )
        raise CheckpointError(
            f"checkpoint {path} holds a {architecture} network, not the {expected} of {self.name} variant {named!r}: "
            f"{fix}, or use the checkpoint of {named!r} ({self.variants.get(named, '?')})."
        )

    def _load_network(self, path: Path, *, named_variant: str | None = None):
        import torch

        try:
            # isegm checkpoints pickle their config, so weights_only loading cannot read them; only
            # load files you trust (the official releases or your own training runs).
            loaded = torch.load(path, map_location="cpu", weights_only=False)
        except (ImportError, AttributeError) as error:
            # Unpickling the config may import the clone's classes: a broken clone, not a broken file.
            raise SegmenterError(
                explain(error, package=self.package_label, doing=f"reading {path}")
            ) from error
        except Exception as error:  # torch raises several types for unreadable/foreign files
            raise CheckpointError(
                f"cannot read checkpoint {path} for {self.name} ({self.variant}): {error}"
            ) from error
        if not isinstance(loaded, dict) or "config" not in loaded or "state_dict" not in loaded:
            raise CheckpointError(
                f"checkpoint {path} is not an isegm checkpoint (needs 'config' and 'state_dict'); predictor "
                f"{self.name!r} expects e.g. {self.variants[self.variant]} for variant {self.variant!r}"
            )
        weights = loaded["state_dict"] if isinstance(loaded["state_dict"], Mapping) else {}
        self.architecture = checkpoint_architecture(loaded["config"], weights)
        self.variant = self._variant_of(path, self.architecture, named_variant)
        serialization = import_upstream(SERIALIZATION_MODULE, package=self.package_label)
        if self.model_module:
            import_upstream(self.model_module, package=self.package_label)
        # Building runs only the clone's code on the checkpoint's config: a TypeError (an argument the
        # class does not take), AssertionError (SimpleClick's load_model checks every parameter name),
        # KeyError or ValueError there means clone and checkpoint do not belong together.
        with upstream_errors(
            package=self.package_label,
            doing=f"building the network of {path.name}",
            fix=CLONE_MISMATCH_FIX,
            also=(TypeError, AssertionError, KeyError, ValueError),
        ):
            net = build_from_config(serialization.load_model, loaded["config"], eval_ritm=self.eval_ritm)
        try:
            result = net.load_state_dict(loaded["state_dict"], strict=False)
        except RuntimeError as error:  # shape mismatches raise even with strict=False
            raise CheckpointError(
                f"checkpoint {path} does not fit predictor {self.name!r} variant {self.variant!r}: {error}"
            ) from error
        if result.missing_keys:
            raise CheckpointError(
                f"checkpoint {path} does not fit predictor {self.name!r} variant {self.variant!r}: "
                f"{len(result.missing_keys)} weights missing (e.g. {result.missing_keys[:3]})"
            )
        return net

    @property
    def model_id(self) -> str:
        if self.zoom_in is None:
            zoom = "none"
        else:
            size = self.zoom_in.target_size_px
            zoom = f"{size}x{size}" if self.zoom_in.square else f"{size}"
            zoom = f"{zoom}s{self.zoom_in.skip_clicks}"
        return f"{self.name}:{self.variant}:zoom{zoom}:flip{int(self.with_flip)}:lim{self.clicks_limit}"

    @property
    def checkpoint_hash(self) -> str:
        return self._checkpoint_hash

    @property
    def with_prev_mask(self) -> bool:
        return bool(getattr(self.net, "with_prev_mask", False))

    def encode(self, image: np.ndarray) -> Embedding:
        """(1, 3, H, W) float32 tensor in [0, 1]; the network itself runs per click."""
        import torch

        validate_image(image)
        tensor = torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1))).float().div_(255.0)[None]
        return Embedding(
            model_id=self.model_id,
            image_shape=(int(image.shape[0]), int(image.shape[1])),
            payload=tensor.to(self.device),
            nbytes=int(tensor.numel() * tensor.element_size()),
        )

    def predict(
        self, embedding: Embedding, clicks: Sequence[Click], previous_logits: Any = None
    ) -> Prediction:
        import torch
        import torch.nn.functional as functional

        if embedding.model_id != self.model_id:
            raise SegmenterError(
                f"embedding was made by {embedding.model_id!r}, not by this predictor ({self.model_id!r})"
            )
        if not clicks:
            raise SegmenterError("predict() needs at least one click")
        height, width = embedding.image_shape
        previous = self._previous_state(previous_logits, (height, width))
        with torch.inference_mode():
            image = embedding.payload
            prev_probs = np.zeros((height, width), np.float32) if previous is None else previous.probabilities
            if self.with_prev_mask:
                prev_tensor = torch.from_numpy(prev_probs)[None, None].to(image.device, image.dtype)
                image = torch.cat([image, prev_tensor], dim=1)
            box, roi = (
                (None, None)
                if self.zoom_in is None
                else self.zoom_in.plan(clicks=clicks, previous=previous, height=height, width=width)
            )
            net_input, points = self._crop(image, clicks, box)
            logits = self._run_network(net_input, points)
            probabilities = torch.sigmoid(logits)
            if (
                roi is not None
            ):  # the crop's prediction back into its box; after an empty one, upstream's squeeze
                roi_h, roi_w = roi[1] - roi[0] + 1, roi[3] - roi[2] + 1
                inside = functional.interpolate(
                    probabilities, size=(roi_h, roi_w), mode="bilinear", align_corners=True
                )
                full = torch.zeros((1, 1, height, width), dtype=inside.dtype, device=inside.device)
                full[:, :, roi[0] : roi[1] + 1, roi[2] : roi[3] + 1] = inside
                probabilities = full
            result = probabilities[0, 0].float().cpu().numpy()
        state = IsegmState(probabilities=result, object_box=roi)
        return Prediction(probabilities=result, logits=state, extra={"zoom_box": box, "roi": roi})

    def _crop(self, image, clicks: Sequence[Click], box: Box | None):
        import torch.nn.functional as functional

        if box is None or self.zoom_in is None:  # (a box comes from the zoom-in)
            return image, [(c.y, c.x, c.is_positive) for c in clicks]
        crop_h, crop_w = self.zoom_in.crop_size(box)
        cropped = image[:, :, box[0] : box[1] + 1, box[2] : box[3] + 1]
        resized = functional.interpolate(cropped, size=(crop_h, crop_w), mode="bilinear", align_corners=True)
        box_h, box_w = box[1] - box[0] + 1, box[3] - box[2] + 1
        points = [
            (crop_h * (c.y - box[0]) / box_h, crop_w * (c.x - box[2]) / box_w, c.is_positive) for c in clicks
        ]
        return resized, points

    def _run_network(self, net_input, points: list[tuple[float, float, bool]]):
        """Logits (1, 1, h, w) at the input size, flip-averaged when ``with_flip``."""
        import torch
        import torch.nn.functional as functional

        input_size = tuple(int(side) for side in net_input.shape[2:])
        if self.grid is not None and input_size != self.grid.input_size:
            # Never hand a fixed-grid ViT another size: it would fail deep inside with a bare shape error.
            raise SegmenterError(
                f"{self.name}: refusing to run a plain ViT with a {self.grid.rows}x{self.grid.cols} patch grid on a "
                f"{input_size[0]}x{input_size[1]} input; it takes {self.grid.input_size[0]}x{self.grid.input_size[1]} "
                "only (the fixed-square zoom-in must resize every input to it)"
            )
        batch, per_item = net_input, [points]
        if self.with_flip:
            input_w = net_input.shape[3]
            batch = torch.cat([net_input, torch.flip(net_input, dims=[3])], dim=0)
            per_item = [points, [(y, input_w - x - 1, positive) for y, x, positive in points]]
        points_nd = torch.from_numpy(encode_points(per_item, clicks_limit=self.clicks_limit)).to(batch.device)
        with upstream_errors(
            package=self.package_label,
            doing=f"running the network on a {tuple(batch.shape)} input",
            fix=(
                "Check that the clone matches the checkpoint (RITM checkpoints need an RITM clone, SimpleClick ones "
                "a SimpleClick clone) and that the checkpoint is the variant you named."
            ),
        ):
            output = self.net(batch, points_nd)
        logits = output["instances"] if isinstance(output, dict) else output
        logits = functional.interpolate(logits, size=net_input.shape[2:], mode="bilinear", align_corners=True)
        if self.with_flip:
            logits = 0.5 * (logits[:1] + torch.flip(logits[1:], dims=[3]))
        return logits

    def _previous_state(self, previous_logits: Any, shape: tuple[int, int]) -> IsegmState | None:
        if previous_logits is None:
            return None
        if isinstance(previous_logits, IsegmState):
            state = previous_logits
        else:
            state = IsegmState(probabilities=np.asarray(previous_logits, np.float32), object_box=None)
        if state.probabilities.shape != shape:
            raise SegmenterError(
                f"previous_logits holds probabilities of shape {state.probabilities.shape}, expected {shape}: "
                "pass Prediction.logits of the previous click on the same image, or None at a trajectory start"
            )
        return state


def _module_hash(model) -> str:
    """sha256 over a module's state dict (names, shapes and values): identifies in-memory weights."""
    digest = hashlib.sha256()
    for key, tensor in sorted(model.state_dict().items()):
        digest.update(key.encode())
        digest.update(repr(tuple(tensor.shape)).encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


@register("ritm", requirement=ritm_missing)
class RitmPredictor(IsegmPredictor):
    """RITM (HRNet itermask models; default variant ``hrnet18_cocolvis``)."""

    name = "ritm"
    model_type = "ritm"
    variants = RITM_VARIANTS
    architectures = RITM_ARCHITECTURES
    download_hint = RITM_DOWNLOAD_HINT
    package_label = "RITM clone (isegm)"
    model_module = RITM_MODEL_MODULE
    eval_ritm = True


@register("simpleclick", requirement=simpleclick_missing)
class SimpleClickPredictor(IsegmPredictor):
    """SimpleClick (plain ViT; default variant ``vit_xtiny``) with upstream's fixed-square zoom-in."""

    name = "simpleclick"
    model_type = "simple"
    variants = SIMPLECLICK_VARIANTS
    architectures = SIMPLECLICK_ARCHITECTURES
    download_hint = SIMPLECLICK_DOWNLOAD_HINT
    package_label = "SimpleClick clone (isegm)"
    model_module = SIMPLECLICK_MODEL_MODULE

    def __init__(
        self,
        *,
        checkpoint: str | Path | None = None,
        variant: str | None = None,
        model: Any = None,
        checkpoint_dir: str | Path | None = None,
        device: str | None = None,
        zoom_in_target_size_px: int | None = None,
        zoom_in_skip_clicks: int = -1,
        with_flip: bool = True,
        clicks_limit: int | None = None,
    ) -> None:
        """Options as :class:`IsegmPredictor`, except the zoom-in (upstream SimpleClick evaluation):

        Args:
          zoom_in_target_size_px: side of the fixed square every zoom region is resized to. None: the
            network's own input size (448 for the released models); 672 for DAVIS. It must be a multiple
            of the patch size; the position embedding is interpolated when its grid differs.
          zoom_in_skip_clicks: -1 (zoom from the first click: the whole image resized to the square).
        """
        super().__init__(
            checkpoint=checkpoint,
            variant=variant,
            model=model,
            checkpoint_dir=checkpoint_dir,
            device=device,
            zoom_in_target_size_px=zoom_in_target_size_px,
            zoom_in_skip_clicks=zoom_in_skip_clicks,
            with_flip=with_flip,
            clicks_limit=clicks_limit,
        )

    def _make_zoom_in(self, target_size_px: int | None, skip_clicks: int) -> ZoomIn | None:
        if target_size_px == 0:
            raise SegmenterError(
                "simpleclick: zoom_in_target_size_px=0 would feed whole images of any size to a plain ViT with a "
                "fixed patch grid; SimpleClick always resizes the zoom region to a fixed square (448, or 672 for DAVIS)"
            )
        if target_size_px is None:
            grid = patch_grid(self.net)
            target_size_px = grid.input_size[0] if grid is not None else SIMPLECLICK_SQUARE_PX
            if grid is not None and grid.input_size[0] != grid.input_size[1]:
                raise SegmenterError(
                    f"simpleclick: the network's input is {grid.input_size[0]}x{grid.input_size[1]}, not square; "
                    "pass zoom_in_target_size_px"
                )
        return ZoomIn(target_size_px=int(target_size_px), skip_clicks=skip_clicks, square=True)
