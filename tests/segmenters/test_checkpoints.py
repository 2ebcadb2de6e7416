"""Checkpoint resolution, hashing, the errors for missing or mismatched files, and the checkpoint table."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest
import torch

from segmenters.base import CheckpointError, SegmenterError
from segmenters.checkpoints import (
    CHECKPOINT_DIR_ENV,
    DEFAULT_CHECKPOINT_DIR,
    SegmenterChoice,
    checkpoint_dir,
    file_sha256,
    load_state_dict,
    parse_checkpoint_table,
    resolve_checkpoint,
    segmenter_choice,
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


# --------------------------------------------------------------------------------------------------
# The checkpoint table (the web app's SEGMENTER_CHECKPOINTS) and what a choice runs


def test_table_entries_as_a_list_or_json_name_predictor_variant_and_file():
    listed = parse_checkpoint_table(
        "sam:vit_b=sam_vit_b_01ec64.pth, simpleclick:vit_base=/models/cocolvis_vit_base.pth\n"
        "sam:vit_b:finetuned = /models/ours.pth"
    )
    assert list(listed) == ["sam:vit_b", "simpleclick:vit_base", "sam:vit_b:finetuned"]
    assert listed["sam:vit_b:finetuned"] == SegmenterChoice(
        key="sam:vit_b:finetuned", predictor="sam", variant="vit_b", checkpoint="/models/ours.pth"
    )
    as_json = parse_checkpoint_table('{"sam2:sam2.1_hiera_b+": "a,b/sam2.1_hiera_base_plus.pt"}')
    assert as_json["sam2:sam2.1_hiera_b+"].checkpoint == "a,b/sam2.1_hiera_base_plus.pt"
    assert parse_checkpoint_table("  ") == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sam=x.pth", r"key 'sam' is not predictor:variant"),
        (
            "sam:vit_q=x.pth",
            r"key 'sam:vit_q': sam has no variant 'vit_q'; one of \['vit_b', 'vit_h', 'vit_l'\]",
        ),
        ("embedded:fast=x", r"predictor 'embedded' takes no checkpoint"),
        ("nope:a=x", r"unknown predictor 'nope'"),
        ("sam:vit_b", r"entry 'sam:vit_b' has no '='"),
        ("sam:vit_b=", r"key 'sam:vit_b' has an empty path"),
        ("sam:vit_b=a, sam:vit_b=b", r"names 'sam:vit_b' twice"),
        ("{oops", r"CLICKLAB_SEGMENTER_CHECKPOINTS is not valid JSON"),
        ('{"sam:vit_b": 3}', r"must be a JSON object mapping 'predictor:variant' keys to paths"),
    ],
)
def test_a_bad_table_entry_is_named_with_what_to_write(text, message):
    with pytest.raises(SegmenterError, match=message):
        parse_checkpoint_table(text, source="CLICKLAB_SEGMENTER_CHECKPOINTS")


def test_a_choice_resolves_to_get_predictor_options(tmp_path):
    table = parse_checkpoint_table("sam:vit_h=/models/h.pth")
    choice = segmenter_choice("sam:vit_h", table)
    assert choice.options(checkpoint_dir=tmp_path) == {
        "variant": "vit_h",
        "checkpoint_dir": tmp_path,
        "checkpoint": "/models/h.pth",
    }
    # A bare name is its default variant, with the official file name unless the table has that variant.
    assert segmenter_choice("sam", table) == SegmenterChoice(
        key="sam:vit_b", predictor="sam", variant="vit_b"
    )
    assert segmenter_choice("sam", parse_checkpoint_table("sam:vit_b=b.pth")).checkpoint == "b.pth"
    assert segmenter_choice("ritm:hrnet32_cocolvis", {}).options(checkpoint_dir=None) == {
        "variant": "hrnet32_cocolvis",
        "checkpoint_dir": None,
    }
    embedded = segmenter_choice("embedded", table)
    assert embedded.options(checkpoint_dir=tmp_path) == {} and embedded.label == "embedded (no weights)"
    assert choice.label == "sam · vit_h · h.pth"
    for bad in ("sam:vit_x", "nope", "sam:vit_b:unknown-label"):
        with pytest.raises(SegmenterError, match=rf"segmenter '{bad}' is neither an entry"):
            segmenter_choice(bad, table)


def test_the_chosen_checkpoint_is_the_one_loaded(tmp_path):
    first = write_tiny_sam_checkpoint(tmp_path / "first.pth", seed=0)
    write_tiny_sam_checkpoint(tmp_path / "sam_vit_b_01ec64.pth", seed=1)
    table = parse_checkpoint_table(f"sam:vit_b:first={first}")
    tiny_as_vit_b = dataclasses.replace(TINY_SAM, default_checkpoint="sam_vit_b_01ec64.pth")
    for key, path in (("sam:vit_b:first", first), ("sam", tmp_path / "sam_vit_b_01ec64.pth")):
        choice = segmenter_choice(key, table)
        predictor = get_predictor(
            choice.predictor,
            architecture=tiny_as_vit_b,
            device="cpu",
            **choice.options(checkpoint_dir=tmp_path),
        )
        assert predictor.checkpoint_path == path
        assert predictor.checkpoint_hash == hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_readme_examples_of_the_table_parse():
    readme = (Path(__file__).resolve().parents[2] / "segmenters" / "README.md").read_text()
    examples = [
        line.split("=", 1)[1].strip("'\"")
        for line in readme.splitlines()
        if line.startswith("CLICKLAB_SEGMENTER_CHECKPOINTS=")
    ]
    assert len(examples) == 2, "segmenters/README.md lost its two CLICKLAB_SEGMENTER_CHECKPOINTS examples"
    assert list(parse_checkpoint_table(examples[0])) == ["sam:vit_b", "simpleclick:vit_base"]
    assert list(parse_checkpoint_table(examples[1])) == ["sam:vit_h", "sam:vit_h:ours"]
