"""Fixtures for the segmenters tests: a tiny random-initialised SAM and small synthetic images."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from segmenters.sam import SamArchitecture, build_sam_model

#: A SAM small enough for CPU tests: 128 px input, 8x8 embedding grid, 32x32 low-res logits.
TINY_SAM = SamArchitecture(
    encoder_embed_dim=32,
    encoder_depth=2,
    encoder_num_heads=2,
    encoder_global_attn_indexes=(1,),
    encoder_window_size=4,
    image_size=128,
    prompt_embed_dim=32,
    decoder_mlp_dim=64,
    decoder_num_heads=2,
    iou_head_hidden_dim=32,
)


def write_tiny_sam_checkpoint(path: Path, *, seed: int, architecture: SamArchitecture = TINY_SAM) -> Path:
    """Save the state dict of a randomly initialised SAM (seeded) to ``path``."""
    torch.manual_seed(seed)
    torch.save(build_sam_model(architecture).state_dict(), path)
    return path


@pytest.fixture(scope="session")
def tiny_sam_checkpoint(tmp_path_factory) -> Path:
    return write_tiny_sam_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny_sam.pth", seed=0)


@pytest.fixture(scope="session")
def other_tiny_sam_checkpoint(tmp_path_factory) -> Path:
    return write_tiny_sam_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny_sam_other.pth", seed=1)


def square_scene(height: int = 60, width: int = 90) -> tuple[np.ndarray, np.ndarray]:
    """Noisy blue background with a textured orange rectangle; returns (image RGB uint8, object mask)."""
    rng = np.random.default_rng(7)
    image = np.empty((height, width, 3), np.float32)
    image[:] = (40, 60, 170)
    mask = np.zeros((height, width), bool)
    mask[height // 4 : 3 * height // 4, width // 5 : width // 2] = True
    image[mask] = (220, 140, 40)
    image += rng.normal(0, 8, image.shape)
    return np.clip(image, 0, 255).astype(np.uint8), mask
