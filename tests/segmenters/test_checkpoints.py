"""Checkpoint resolution, hashing and the errors for missing or mismatched files."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest
import torch

from segmenters.base import CheckpointError
from segmenters.checkpoints import (
    CHECKPOINT_DIR_ENV,
    DEFAULT_CHECKPOINT_DIR,
    checkpoint_dir,
    file_sha256,
    load_state_dict,
    resolve_checkpoint,
)
from segmenters.registry import get_predictor

from .conftest import TINY_SAM, write_tiny_sam_checkpoint


def _resolve(**overrides) -> Path:
    options = dict(
        predictor_name="sam",
        variant="vit_b",
        checkpoint=None,
        default_file_name="sam_vit_b_01ec64.pth",
        directory=None,
        download_hint="from the SAM README",
    )
    options.update(overrides)
    return resolve_checkpoint(**options)


def test_directory_comes_from_option_then_environment_then_default(tmp_path, monkeypatch):
    monkeypatch.delenv(CHECKPOINT_DIR_ENV, raising=False)
    assert checkpoint_dir() == DEFAULT_CHECKPOINT_DIR
    assert DEFAULT_CHECKPOINT_DIR.parts[-2:] == ("var", "checkpoints")
    monkeypatch.setenv(CHECKPOINT_DIR_ENV, str(tmp_path / "env"))
    assert checkpoint_dir() == tmp_path / "env"
    assert checkpoint_dir(tmp_path / "explicit") == tmp_path / "explicit"


def test_default_file_name_and_relative_names_resolve_inside_the_directory(tmp_path):
    (tmp_path / "sam_vit_b_01ec64.pth").write_bytes(b"x")
    (tmp_path / "mine.pth").write_bytes(b"y")
    assert _resolve(directory=tmp_path) == tmp_path / "sam_vit_b_01ec64.pth"
    assert _resolve(directory=tmp_path, checkpoint="mine.pth") == tmp_path / "mine.pth"
    assert (
        _resolve(directory=tmp_path / "elsewhere", checkpoint=tmp_path / "mine.pth") == tmp_path / "mine.pth"
    )


def test_missing_file_error_names_the_path_variant_and_official_file(tmp_path):
    with pytest.raises(CheckpointError) as caught:
        _resolve(directory=tmp_path)
    message = str(caught.value)
    assert str(tmp_path / "sam_vit_b_01ec64.pth") in message
    assert "'vit_b'" in message and "Download sam_vit_b_01ec64.pth" in message
    assert CHECKPOINT_DIR_ENV in message


def test_missing_checkpoint_through_the_registry(tmp_path):
    missing = tmp_path / "nowhere.pth"
    with pytest.raises(CheckpointError, match=str(missing)):
        get_predictor("sam", checkpoint=missing, variant="vit_b")


def test_wrong_architecture_names_the_path_and_the_expected_variant(tmp_path):
    bigger = dataclasses.replace(TINY_SAM, encoder_embed_dim=48)  # same layout, a wider encoder
    path = write_tiny_sam_checkpoint(tmp_path / "wider.pth", seed=0, architecture=bigger)
    with pytest.raises(CheckpointError) as caught:
        get_predictor("sam", checkpoint=path, architecture=TINY_SAM, variant="vit_b", device="cpu")
    message = str(caught.value)
    assert str(path) in message
    assert "variant 'vit_b'" in message
    assert "shape mismatch" in message


def test_checkpoint_of_another_official_variant_is_recognised(tmp_path):
    # Only the key that identifies the variant matters for the hint; the rest is missing anyway.
    path = tmp_path / "looks_like_vit_l.pth"
    torch.save({"image_encoder.patch_embed.proj.weight": torch.zeros(1024, 3, 16, 16)}, path)
    with pytest.raises(CheckpointError, match=r"variant 'vit_b'.*looks like variant 'vit_l'"):
        get_predictor("sam", checkpoint=path, variant="vit_b", device="cpu")


def test_unreadable_file_is_a_checkpoint_error(tmp_path):
    path = tmp_path / "truncated.pth"
    path.write_bytes(b"not a torch file")
    with pytest.raises(CheckpointError, match=f"cannot read checkpoint {path}"):
        load_state_dict(path, predictor_name="sam", variant="vit_b")


def test_non_state_dict_is_a_checkpoint_error(tmp_path):
    path = tmp_path / "list.pth"
    torch.save([1, 2, 3], path)
    with pytest.raises(CheckpointError, match="does not hold a state dict"):
        load_state_dict(path, predictor_name="sam", variant="vit_b")


def test_wrapped_state_dict_is_unwrapped(tmp_path):
    path = tmp_path / "wrapped.pth"
    torch.save({"model": {"w": torch.ones(2)}}, path)
    assert list(load_state_dict(path, predictor_name="x", variant="y")) == ["w"]


def test_file_sha256_matches_hashlib(tmp_path):
    path = tmp_path / "blob.bin"
    path.write_bytes(b"clicklab" * 1000)
    assert file_sha256(path) == hashlib.sha256(b"clicklab" * 1000).hexdigest()
