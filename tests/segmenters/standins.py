"""Tiny random-initialised networks shaped like the real upstream ones, for the adapter tests.

``TinyPlainVitModel`` follows SimpleClick's ``PlainVitModel`` (``isegm/model/is_plainvit_model.py``):
the RGB image and the click/previous-mask maps are cut into patches by two patch embeddings, the
backbone adds a *fixed* position embedding (one token per cell of its patch grid, plus a class token)
and runs transformer blocks, and the tokens are folded back into the grid for the head. Like the real
``VisionTransformer`` it only takes inputs of exactly ``img_size``: any other size fails in
``x + pos_embed`` with ``RuntimeError: The size of tensor a (...) must match the size of tensor b (...)``; and
like upstream's ``forward_backbone`` it attends within the grid's four 2 x 2 windows first
(``patchify``), so a grid with an odd side fails too.
The attribute layout (``backbone.patch_embed.grid_size``/``patch_size``/``img_size``,
``backbone.pos_embed``, ``with_prev_mask``) is upstream's, which is what the adapter reads.

On top of the random ViT output the logits carry an exact, known term ("click echo"): +gain inside
``click_radius_px`` of a positive click, -gain near a negative one (in the network's input frame) and
``prev_gain * (previous - 0.5)``. So a test can tell where the adapter put the clicks after zoom and
flip, while the shape constraint stays the real architecture's.
"""

from __future__ import annotations

import torch
from torch import nn

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class PatchEmbed(nn.Module):
    """Image to patch tokens (B, rows*cols, D); the grid is fixed by ``img_size`` as upstream's."""

    def __init__(
        self, *, img_size: tuple[int, int], patch_size: tuple[int, int], in_chans: int, embed_dim: int
    ):
        super().__init__()
        self.img_size = img_size
        self.patch_size = patch_size
        self.grid_size = (img_size[0] // patch_size[0], img_size[1] // patch_size[1])
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class TinyVisionTransformer(nn.Module):
    """A plain ViT backbone with a learnt position embedding of fixed length (1 class token + grid)."""

    def __init__(self, *, img_size: tuple[int, int], patch_size: tuple[int, int], embed_dim: int, depth: int):
        super().__init__()
        self.patch_embed = PatchEmbed(
            img_size=img_size, patch_size=patch_size, in_chans=3, embed_dim=embed_dim
        )
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.randn(1, self.patch_embed.num_patches + 1, embed_dim) * 0.02)
        self.blocks = nn.Sequential(
            *[
                nn.TransformerEncoderLayer(
                    embed_dim, nhead=2, dim_feedforward=2 * embed_dim, dropout=0.0, batch_first=True
                )
                for _ in range(depth)
            ]
        )

    def patchify(self, x):
        """(B, N, C) -> (4B, N/4, C): the grid cut into 2 x 2 windows, as upstream's (an odd grid fails)."""
        batch, _, channels = x.shape
        rows, cols = self.patch_embed.grid_size
        x = x.view(batch, 2, rows // 2, 2, cols // 2, channels)
        return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(4 * batch, rows * cols // 4, channels)

    def unpatchify(self, x):
        batch4, count, channels = x.shape
        rows, cols = self.patch_embed.grid_size
        x = x.view(batch4 // 4, 2, 2, rows // 2, cols // 2, channels).permute(0, 1, 3, 2, 4, 5)
        return x.contiguous().view(batch4 // 4, 4 * count, channels)

    def forward_backbone(self, x, additional_features=None):
        x = self.patch_embed(x)
        if additional_features is not None:
            x = x + additional_features
        x = x + self.pos_embed[:, 1:]  # the fixed-grid constraint of the real network
        # Upstream attends within the 4 windows, then over the whole grid.
        x = self.unpatchify(self.blocks[0](self.patchify(x)))
        return self.blocks[1:](x)


class TinyPlainVitModel(nn.Module):
    """SimpleClick-shaped itermask network: ``forward(image (B, 4, H, W), points (B, 2N, 3))``."""

    with_prev_mask = True

    def __init__(
        self,
        *,
        img_size: int = 64,
        patch_size: int = 8,
        embed_dim: int = 16,
        depth: int = 2,
        click_radius_px: float = 5.0,
        echo_gain: float = 8.0,
        prev_gain: float = 12.0,
        coord_chans: int = 3,
    ) -> None:
        super().__init__()
        size, patch = (img_size, img_size), (patch_size, patch_size)
        self.patch_embed_coords = PatchEmbed(
            img_size=size, patch_size=patch, in_chans=coord_chans, embed_dim=embed_dim
        )
        self.backbone = TinyVisionTransformer(
            img_size=size, patch_size=patch, embed_dim=embed_dim, depth=depth
        )
        self.head = nn.Conv2d(embed_dim, 1, kernel_size=1)
        self.click_radius_px = click_radius_px
        self.echo_gain = echo_gain
        self.prev_gain = prev_gain
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1))
        self.seen_shapes: list[tuple[int, ...]] = []
        self.seen_points: list = []

    def click_disks(self, points, height: int, width: int):
        """(B, 2, H, W): disks of ``click_radius_px`` around the positive (0) and negative (1) clicks."""
        batch, count = points.shape[:2]
        rows = torch.arange(height, dtype=torch.float32, device=points.device).view(1, 1, height, 1)
        cols = torch.arange(width, dtype=torch.float32, device=points.device).view(1, 1, 1, width)
        ys, xs = points[..., 0].view(batch, count, 1, 1), points[..., 1].view(batch, count, 1, 1)
        valid = (points[..., 2] >= 0).view(batch, count, 1, 1)
        near = ((rows - ys) ** 2 + (cols - xs) ** 2 <= self.click_radius_px**2) & valid
        half = points.shape[1] // 2
        return torch.stack([near[:, :half].any(dim=1), near[:, half:].any(dim=1)], dim=1).float()

    def forward(self, image, points):
        self.seen_shapes.append(tuple(image.shape))
        self.seen_points.append(points.detach().cpu().numpy())
        prev, rgb = image[:, 3:], image[:, :3]
        height, width = rgb.shape[2:]
        disks = self.click_disks(points, height, width)
        coord_features = self.patch_embed_coords(torch.cat([disks, prev], dim=1))
        tokens = self.backbone.forward_backbone((rgb - self.mean) / self.std, coord_features)
        batch, _, channels = tokens.shape
        rows, cols = self.backbone.patch_embed.grid_size
        grid = tokens.transpose(1, 2).reshape(batch, channels, rows, cols)
        vit_logits = nn.functional.interpolate(self.head(grid), size=(height, width), mode="bilinear")
        echo = self.echo_gain * (disks[:, :1] - disks[:, 1:]) + self.prev_gain * (prev - 0.5)
        return {"instances": 0.1 * vit_logits + echo, "instances_aux": None}


# --------------------------------------------------------------------------------------------------
# Stand-in RITM/SimpleClick clones (the ``isegm`` package), written by the ``installed_package`` fixture

# The two clones' config loaders (isegm/utils/serialization.py), with their signatures and checks: RITM's
# ``load_model(config, **kwargs)`` builds the class with the saved parameters; SimpleClick's
# ``load_model(config, eval_ritm, **kwargs)`` (eval_ritm required) asserts that every saved parameter is one
# the class takes, and builds RITM models with ``use_rgb_conv=True`` when told ``eval_ritm``.
RITM_SERIALIZATION = """
    import importlib


    def load_model(config, **kwargs):
        module_name, class_name = config["class"].rsplit(".", 1)
        model_class = getattr(importlib.import_module(module_name), class_name)
        return model_class(**dict(config["params"], **kwargs))
"""

SIMPLECLICK_SERIALIZATION = """
    import importlib
    import inspect


    def load_model(config, eval_ritm, **kwargs):
        module_name, class_name = config["class"].rsplit(".", 1)
        model_class = getattr(importlib.import_module(module_name), class_name)
        accepted = inspect.signature(model_class.__init__).parameters
        model_args = {}
        for name, value in config["params"].items():
            assert name in accepted
            model_args[name] = value
        model_args.update(kwargs)
        if eval_ritm:
            model_args["use_rgb_conv"] = True
        return model_class(**model_args)
"""

# SimpleClick's model module, its PlainVitModel being the tiny plain ViT above.
PLAINVIT_MODEL = """
    from tests.segmenters.standins import TinyPlainVitModel as PlainVitModel
"""


def isegm_clone(
    install, model_module_source: str, *, module: str, serialization: str = SIMPLECLICK_SERIALIZATION
):
    """Put a stand-in clone on ``sys.path`` with ``install`` (the ``installed_package`` fixture): the config
    loader ``serialization`` and ``isegm/model/<module>.py`` holding ``model_module_source``."""
    return install(
        {
            "isegm/__init__.py": "",
            "isegm/utils/__init__.py": "",
            "isegm/utils/serialization.py": serialization,
            "isegm/model/__init__.py": "",
            f"isegm/model/{module}.py": model_module_source,
        }
    )


def isegm_checkpoint(path, class_path: str, params: dict, net) -> None:
    """An isegm checkpoint as the clones save it: the model's config (class path, parameters) and weights."""
    torch.save({"config": {"class": class_path, "params": params}, "state_dict": net.state_dict()}, path)
