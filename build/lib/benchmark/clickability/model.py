"""The clickability model (CM): a SegNeXt-like network conditioned on the GT and error masks (protocol §3.2).

Network: an MSCAN encoder (multi-scale strip-convolution attention, BatchNorm, GELU), a Conv1S-like
conditioning branch on the stacked [GT mask, error mask] whose output is added (with a learnable scale
|s|, initialised at 0.05) to the stem output at 1/4 resolution, and a LightHam decoder (NMF
"hamburger", GroupNorm) over all four stages, fused at the resolution of the first stage (1/4) as the
reference configuration (``in_index`` 0–3) does. Logits are upsampled bilinearly (align_corners) to the
input size and min-max normalised per sample to [0, 1].

Configurations (:data:`CONFIGS`):

* ``small`` (default, trains on CPU): dims [16, 32, 64, 128], depths [1, 1, 2, 1], head 64 channels.
* ``segnext-b``: the paper's sizes, dims [64, 128, 320, 512], depths [3, 3, 12, 3], MLP ratios
  [8, 8, 4, 4], drop-path 0.1, LightHam with 512 channels — for GPU machines.

No pretrained weights exist on this machine (no download): every model starts from random init.

Preprocessing (:func:`letterbox`): RGB/255, ImageNet mean/std, aspect-preserving bilinear resize so the
long side is ``input_size`` (the short side is ``side·input_size // long``), centred, zero padding;
masks are letterboxed the same way (bilinear, so edges become soft). :func:`unletterbox` crops the valid
area and resizes back to H×W.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

import cv2
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from benchmark.clickability.click_model import ClickModel, check_inputs

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
DEFAULT_INPUT_SIZE = 416
MINMAX_EPS_TRAIN = 1e-9
MINMAX_EPS_INFER = 1e-8


@dataclass(frozen=True)
class CMConfig:
    """Architecture sizes; ``name`` is what checkpoints record."""

    name: str
    embed_dims: tuple[int, int, int, int]
    depths: tuple[int, int, int, int]
    mlp_ratios: tuple[int, int, int, int]
    drop_path: float
    head_channels: int
    ham_channels: int
    norm_groups: int
    nmf_rank: int = 16
    nmf_train_steps: int = 6
    nmf_eval_steps: int = 7
    dropout: float = 0.1
    cond_hidden: int = 16
    attention_kernels: tuple = field(default=(5, 7, 11, 21))


CONFIGS: dict[str, CMConfig] = {
    "small": CMConfig(
        name="small",
        embed_dims=(16, 32, 64, 128),
        depths=(1, 1, 2, 1),
        mlp_ratios=(4, 4, 4, 4),
        drop_path=0.0,
        head_channels=64,
        ham_channels=64,
        norm_groups=8,
    ),
    "segnext-b": CMConfig(
        name="segnext-b",
        embed_dims=(64, 128, 320, 512),
        depths=(3, 3, 12, 3),
        mlp_ratios=(8, 8, 4, 4),
        drop_path=0.1,
        head_channels=512,
        ham_channels=512,
        norm_groups=32,
    ),
}


def get_config(name: str) -> CMConfig:
    try:
        return CONFIGS[name]
    except KeyError:
        raise ValueError(
            f"unknown clickability model config {name!r}; choose one of {sorted(CONFIGS)}"
        ) from None


# --------------------------------------------------------------------------------------------------
# MSCAN encoder
# --------------------------------------------------------------------------------------------------


class DropPath(nn.Module):
    """Stochastic depth per sample (identity at inference)."""

    def __init__(self, probability: float) -> None:
        super().__init__()
        self.probability = probability

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.probability == 0.0:
            return x
        keep = 1.0 - self.probability
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        return x * mask / keep


class StripAttention(nn.Module):
    """MSCA: a 5×5 depth-wise conv, then parallel depth-wise strip convs 1×k + k×1, summed, 1×1 mixed,
    used as multiplicative attention on the input."""

    def __init__(self, channels: int, kernels: tuple) -> None:
        super().__init__()
        square = kernels[0]
        self.local = nn.Conv2d(channels, channels, square, padding=square // 2, groups=channels)
        self.strips = nn.ModuleList()
        for k in kernels[1:]:
            self.strips.append(
                nn.Sequential(
                    nn.Conv2d(channels, channels, (1, k), padding=(0, k // 2), groups=channels),
                    nn.Conv2d(channels, channels, (k, 1), padding=(k // 2, 0), groups=channels),
                )
            )
        self.mix = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        local = self.local(x)
        attention = local
        for strip in self.strips:
            attention = attention + strip(local)
        return self.mix(attention) * x


class SpatialAttention(nn.Module):
    def __init__(self, channels: int, kernels: tuple) -> None:
        super().__init__()
        self.proj_in = nn.Conv2d(channels, channels, 1)
        self.gate = StripAttention(channels, kernels)
        self.proj_out = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj_out(self.gate(F.gelu(self.proj_in(x)))) + x


class ConvMlp(nn.Module):
    def __init__(self, channels: int, ratio: int) -> None:
        super().__init__()
        hidden = channels * ratio
        self.fc1 = nn.Conv2d(channels, hidden, 1)
        self.dw = nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden)
        self.fc2 = nn.Conv2d(hidden, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.dw(self.fc1(x))))


class MSCABlock(nn.Module):
    def __init__(self, channels: int, mlp_ratio: int, drop_path: float, kernels: tuple) -> None:
        super().__init__()
        self.norm1 = nn.BatchNorm2d(channels)
        self.attention = SpatialAttention(channels, kernels)
        self.norm2 = nn.BatchNorm2d(channels)
        self.mlp = ConvMlp(channels, mlp_ratio)
        self.scale1 = nn.Parameter(torch.full((channels, 1, 1), 1e-2))
        self.scale2 = nn.Parameter(torch.full((channels, 1, 1), 1e-2))
        self.drop_path = DropPath(drop_path)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop_path(self.scale1 * self.attention(self.norm1(x)))
        return x + self.drop_path(self.scale2 * self.mlp(self.norm2(x)))


class ChannelLayerNorm(nn.LayerNorm):
    """LayerNorm over the channels of an NCHW tensor (MSCAN's end-of-stage norm)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class MSCAN(nn.Module):
    """Four stages at strides 4, 8, 16, 32. ``stage1_extra`` is added after the stem (1/4 resolution)."""

    def __init__(self, config: CMConfig) -> None:
        super().__init__()
        dims = config.embed_dims
        self.stem = nn.Sequential(
            nn.Conv2d(3, dims[0] // 2, 3, stride=2, padding=1),
            nn.BatchNorm2d(dims[0] // 2),
            nn.GELU(),
            nn.Conv2d(dims[0] // 2, dims[0], 3, stride=2, padding=1),
            nn.BatchNorm2d(dims[0]),
        )
        self.downsamples = nn.ModuleList(
            nn.Sequential(nn.Conv2d(dims[i - 1], dims[i], 3, stride=2, padding=1), nn.BatchNorm2d(dims[i]))
            for i in range(1, 4)
        )
        rates = torch.linspace(0, config.drop_path, sum(config.depths)).tolist()
        self.stages = nn.ModuleList()
        self.norms = nn.ModuleList()
        start = 0
        for i in range(4):
            blocks = [
                MSCABlock(dims[i], config.mlp_ratios[i], rates[start + j], config.attention_kernels)
                for j in range(config.depths[i])
            ]
            start += config.depths[i]
            self.stages.append(nn.Sequential(*blocks))
            self.norms.append(ChannelLayerNorm(dims[i]))

    def forward(self, image: torch.Tensor, stage1_extra: torch.Tensor | None = None) -> list[torch.Tensor]:
        x = self.stem(image)
        if stage1_extra is not None:
            x = x + stage1_extra
        features = []
        for i in range(4):
            if i > 0:
                x = self.downsamples[i - 1](x)
            x = self.norms[i](self.stages[i](x))
            features.append(x)
        return features


# --------------------------------------------------------------------------------------------------
# Conditioning and LightHam decoder
# --------------------------------------------------------------------------------------------------


class MaskConditioning(nn.Module):
    """Conv1S-like branch: [GT, E] → conv1×1(2→16), ReLU, conv3×3 s2, ReLU, conv3×3 s2(→dims[0]), ·|s|."""

    def __init__(self, out_channels: int, hidden: int = 16, scale_init: float = 0.05) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Conv2d(2, hidden, 1),
            nn.ReLU(inplace=True),
            nn.Conv2d(hidden, hidden, 3, stride=2, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(hidden, out_channels, 3, stride=2, padding=1),
        )
        self.scale = nn.Parameter(torch.tensor([scale_init]))

    def forward(self, masks: torch.Tensor) -> torch.Tensor:
        return self.layers(masks) * self.scale.abs()


class NMF2D(nn.Module):
    """Non-negative matrix factorisation of the (C × HW) feature matrix with multiplicative updates.

    Bases are drawn once at construction (no random re-init per call) and kept as a buffer; the updates run
    without gradient and one last coefficient update carries the gradient (one-step gradient).
    """

    # A buffer (registered in __init__): declared, as nn.Module's attribute lookup types it Tensor | Module.
    bases: torch.Tensor

    def __init__(self, channels: int, rank: int, train_steps: int, eval_steps: int) -> None:
        super().__init__()
        self.rank, self.train_steps, self.eval_steps = rank, train_steps, eval_steps
        generator = torch.Generator().manual_seed(0)
        bases = F.normalize(torch.rand((1, channels, rank), generator=generator), dim=1)
        self.register_buffer("bases", bases)

    @staticmethod
    def _update_coef(x: torch.Tensor, bases: torch.Tensor, coef: torch.Tensor) -> torch.Tensor:
        numerator = torch.bmm(x.transpose(1, 2), bases)
        denominator = coef.bmm(bases.transpose(1, 2).bmm(bases))
        return coef * numerator / (denominator + 1e-6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, channels, height, width = x.shape
        flat = x.view(batch, channels, height * width)
        bases = self.bases.repeat(batch, 1, 1)
        with torch.no_grad():
            coef = F.softmax(torch.bmm(flat.transpose(1, 2), bases), dim=-1)
            for _ in range(self.train_steps if self.training else self.eval_steps):
                coef = self._update_coef(flat, bases, coef)
                numerator = torch.bmm(flat, coef)
                denominator = bases.bmm(coef.transpose(1, 2).bmm(coef))
                bases = bases * numerator / (denominator + 1e-6)
        coef = self._update_coef(flat, bases, coef)
        return torch.bmm(bases, coef.transpose(1, 2)).view(batch, channels, height, width)


class LightHamHead(nn.Module):
    def __init__(self, in_channels: tuple[int, ...], config: CMConfig) -> None:
        super().__init__()
        ham = config.ham_channels
        self.squeeze = nn.Sequential(
            nn.Conv2d(sum(in_channels), ham, 1, bias=False),
            nn.GroupNorm(config.norm_groups, ham),
            nn.ReLU(inplace=True),
        )
        self.ham_in = nn.Conv2d(ham, ham, 1)
        self.nmf = NMF2D(ham, config.nmf_rank, config.nmf_train_steps, config.nmf_eval_steps)
        self.ham_out = nn.Sequential(
            nn.Conv2d(ham, ham, 1, bias=False), nn.GroupNorm(config.norm_groups, ham)
        )
        self.align = nn.Sequential(
            nn.Conv2d(ham, config.head_channels, 1, bias=False),
            nn.GroupNorm(config.norm_groups, config.head_channels),
            nn.ReLU(inplace=True),
        )
        self.dropout = nn.Dropout2d(config.dropout)
        self.classifier = nn.Conv2d(config.head_channels, 1, 1)

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        size = features[0].shape[2:]
        fused = torch.cat(
            [features[0]]
            + [F.interpolate(f, size=size, mode="bilinear", align_corners=False) for f in features[1:]],
            dim=1,
        )
        x = self.squeeze(fused)
        enjoy = self.ham_out(self.nmf(F.relu(self.ham_in(x))))
        x = F.relu(x + enjoy)
        return self.classifier(self.dropout(self.align(x)))


def minmax_normalize(maps: torch.Tensor, eps: float) -> torch.Tensor:
    """Per-sample min-max to [0, 1] of (B, 1, H, W) maps."""
    flat = maps.flatten(1)
    low = flat.min(dim=1, keepdim=True).values
    high = flat.max(dim=1, keepdim=True).values
    return ((flat - low) / (high - low + eps)).view_as(maps)


class ClickabilityNet(nn.Module):
    """forward(image (B,3,S,S) normalised, masks (B,2,S,S) in [0,1]) → (B,1,S,S) maps in [0, 1]."""

    def __init__(self, config: CMConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = MSCAN(config)
        self.conditioning = MaskConditioning(config.embed_dims[0], hidden=config.cond_hidden)
        self.head = LightHamHead(config.embed_dims, config)

    def forward(
        self, image: torch.Tensor, masks: torch.Tensor, *, eps: float = MINMAX_EPS_TRAIN
    ) -> torch.Tensor:
        features = self.encoder(image, self.conditioning(masks))
        logits = F.interpolate(self.head(features), size=image.shape[2:], mode="bilinear", align_corners=True)
        return minmax_normalize(logits, eps)


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


# --------------------------------------------------------------------------------------------------
# Letterbox pre/post-processing
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Letterbox:
    """Where the resized image sits in the square canvas (pixels of the canvas)."""

    size: int
    new_w: int
    new_h: int
    left: int
    top: int

    @classmethod
    def for_shape(cls, *, height: int, width: int, size: int) -> Letterbox:
        long_side = max(height, width)
        new_w = max(1, width * size // long_side)
        new_h = max(1, height * size // long_side)
        return cls(size=size, new_w=new_w, new_h=new_h, left=(size - new_w) // 2, top=(size - new_h) // 2)


def letterbox(array: np.ndarray, box: Letterbox) -> np.ndarray:
    """Resize (bilinear) into the box and zero-pad to (size, size[, C]); float32."""
    resized = cv2.resize(array.astype(np.float32), (box.new_w, box.new_h), interpolation=cv2.INTER_LINEAR)
    shape = (box.size, box.size) + resized.shape[2:]
    canvas = np.zeros(shape, dtype=np.float32)
    canvas[box.top : box.top + box.new_h, box.left : box.left + box.new_w] = resized
    return canvas


def unletterbox(canvas: np.ndarray, box: Letterbox, *, height: int, width: int) -> np.ndarray:
    """Crop the valid area of a (size, size) map and resize (bilinear) to (height, width); float32."""
    valid = canvas[box.top : box.top + box.new_h, box.left : box.left + box.new_w]
    return cv2.resize(valid.astype(np.float32), (width, height), interpolation=cv2.INTER_LINEAR)


def prepare_inputs(
    image: np.ndarray, gt_mask: np.ndarray, error_mask: np.ndarray, *, size: int
) -> tuple[np.ndarray, np.ndarray, Letterbox]:
    """(image (3,S,S) normalised float32, masks (2,S,S) float32 in [0,1], box) for the network."""
    box = Letterbox.for_shape(height=image.shape[0], width=image.shape[1], size=size)
    rgb: np.ndarray = image.astype(np.float32) / 255.0
    rgb = (rgb - np.asarray(IMAGENET_MEAN, np.float32)) / np.asarray(IMAGENET_STD, np.float32)
    image_in = letterbox(rgb, box).transpose(2, 0, 1)
    masks_in = np.stack(
        [letterbox(gt_mask.astype(np.float32), box), letterbox(error_mask.astype(np.float32), box)]
    )
    return np.ascontiguousarray(image_in), masks_in, box


# --------------------------------------------------------------------------------------------------
# Checkpoints and the ClickModel wrapper
# --------------------------------------------------------------------------------------------------

CHECKPOINT_FORMAT = "clicklab-clickability-v1"


def save_checkpoint(path: Path, *, net: ClickabilityNet, input_size: int, extra: dict) -> None:
    """``{"format", "config", "input_size", "state_dict", **extra}`` via torch.save."""
    payload = {
        "format": CHECKPOINT_FORMAT,
        "config": asdict(net.config),
        "input_size": int(input_size),
        "state_dict": net.state_dict(),
        **extra,
    }
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(payload, tmp)
    tmp.replace(path)


def load_checkpoint(path: Path, *, device: str = "cpu") -> tuple[ClickabilityNet, dict]:
    """Rebuild the network from a checkpoint written by :func:`save_checkpoint`; (net in eval mode, payload)."""
    try:
        payload = torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:  # unreadable, truncated, or not a torch file
        raise ValueError(
            f"{path}: not a readable clickability checkpoint ({exc}); retrain or pass best.pt"
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(
            f"{path}: not a Clicklab clickability checkpoint (format {CHECKPOINT_FORMAT!r} expected); "
            "pass a best.pt/epoch_k.pt written by `python -m benchmark train-clickability`"
        )
    raw = dict(payload["config"])
    raw = {key: tuple(value) if isinstance(value, list) else value for key, value in raw.items()}
    net = ClickabilityNet(CMConfig(**raw))
    try:
        net.load_state_dict(payload["state_dict"])
    except RuntimeError as exc:
        raise ValueError(f"{path}: weights do not fit config {raw.get('name')!r}: {exc}") from None
    net.to(device).eval()
    return net, payload


class TrainedClickModel(ClickModel):
    """The CM behind the :class:`ClickModel` interface.

    ``restrict_to_error``: multiply the map by E (default), so CM is scored like the baselines, which are
    zero outside E (the reference scores the raw CM map, protocol §8 item 17; pass False to reproduce).
    """

    def __init__(
        self,
        net: ClickabilityNet,
        *,
        input_size: int,
        restrict_to_error: bool = True,
        name: str = "cm",
        device: str = "cpu",
    ):
        self.net = net.to(device).eval()
        self.input_size = input_size
        self.restrict_to_error = restrict_to_error
        self.name = name
        self.device = device
        self.checkpoint_sha256: str | None = None  # of the checkpoint file, when made by from_checkpoint

    @classmethod
    def from_checkpoint(
        cls, path: str | Path, *, device: str = "cpu", restrict_to_error: bool = True
    ) -> TrainedClickModel:
        path = Path(path)
        net, payload = load_checkpoint(path, device=device)
        model = cls(
            net, input_size=int(payload["input_size"]), restrict_to_error=restrict_to_error, device=device
        )
        model.checkpoint_sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
        return model

    def predict_map(self, image: np.ndarray, gt_mask: np.ndarray, error_mask: np.ndarray) -> np.ndarray:
        check_inputs(image, gt_mask, error_mask)
        if not error_mask.any() and self.restrict_to_error:
            return np.zeros(error_mask.shape, dtype=np.float32)
        image_in, masks_in, box = prepare_inputs(image, gt_mask, error_mask, size=self.input_size)
        with torch.inference_mode():
            out = self.net(
                torch.from_numpy(image_in)[None].to(self.device),
                torch.from_numpy(masks_in)[None].to(self.device),
                eps=MINMAX_EPS_INFER,
            )
        canvas = out[0, 0].cpu().numpy()
        result = unletterbox(canvas, box, height=image.shape[0], width=image.shape[1])
        low, high = float(result.min()), float(result.max())
        result = (result - low) / (high - low + MINMAX_EPS_INFER)
        if self.restrict_to_error:
            result = result * error_mask
        return result.astype(np.float32)
