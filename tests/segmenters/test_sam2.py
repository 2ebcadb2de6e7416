"""SAM 2 adapter: clear error without the user's sam2 package; variants and file names."""

from __future__ import annotations

import importlib

import pytest

from segmenters.base import SegmenterError
from segmenters.registry import available_predictors, get_predictor
from segmenters.sam2 import SAM2_VARIANTS, sam2_missing


def test_without_sam2_the_error_names_the_package_and_where_to_get_it():
    reason = sam2_missing()
    assert reason is not None, "these tests expect no sam2 package in the project environment"
    assert "sam2" in reason and "https://github.com/facebookresearch/sam2" in reason
    assert "sam2" not in available_predictors()
    with pytest.raises(SegmenterError, match="predictor 'sam2' cannot run here"):
        get_predictor("sam2", variant="sam2.1_hiera_l")


def test_official_sam21_file_names():
    assert SAM2_VARIANTS["sam2.1_hiera_l"] == ("configs/sam2.1/sam2.1_hiera_l.yaml", "sam2.1_hiera_large.pt")
    assert {file for _, file in SAM2_VARIANTS.values() if file.startswith("sam2.1_")} == {
        "sam2.1_hiera_tiny.pt",
        "sam2.1_hiera_small.pt",
        "sam2.1_hiera_base_plus.pt",
        "sam2.1_hiera_large.pt",
    }


def test_installed_sam2_without_hydra_is_not_available_and_names_hydra(installed_package):
    # Upstream's sam2/__init__.py initialises hydra; hydra-core (and torchvision) are not installed here.
    installed_package(
        {
            "sam2/__init__.py": """
                from hydra import initialize_config_module

                initialize_config_module("sam2", version_base="1.2")
            """,
            "sam2/build_sam.py": "def build_sam2(*args, **kwargs): ...\n",
            "sam2/sam2_image_predictor.py": "from torchvision.transforms import Normalize\n",
        }
    )
    reason = sam2_missing()
    assert reason and "'hydra'" in reason and "pip install hydra-core" in reason
    assert "sam2" not in available_predictors()
    with pytest.raises(SegmenterError, match=r"predictor 'sam2' cannot run here: .*'hydra'"):
        get_predictor("sam2", variant="sam2.1_hiera_t")


# A sam2 package the way building reads it (hydra and torchvision left out): build_sam2(config, ckpt_path, device,
# mode) builds the network and, given a path, loads it as upstream's _load_checkpoint does (torch.load(...)["model"],
# strict load_state_dict), so a corrupt file raised its raw UnpicklingError through the adapter.
SAM2_STANDIN = {
    "sam2/__init__.py": "",
    "sam2/build_sam.py": """
        import torch


        class TinySam2(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.image_encoder = torch.nn.Conv2d(3, 8, 4, stride=4)
                self.sam_mask_decoder = torch.nn.Linear(8, 1)


        def build_sam2(config_file, ckpt_path=None, device="cuda", mode="eval", **kwargs):
            model = TinySam2()
            if ckpt_path is not None:
                state_dict = torch.load(ckpt_path, map_location="cpu", weights_only=True)["model"]
                model.load_state_dict(state_dict)
            model = model.to(device)
            if mode == "eval":
                model.eval()
            return model
    """,
    "sam2/sam2_image_predictor.py": """
        class SAM2ImagePredictor:
            def __init__(self, model):
                self.model = model
    """,
}


def test_a_corrupt_or_misfit_sam2_checkpoint_is_a_named_checkpoint_error(installed_package, tmp_path):
    import torch

    from segmenters.base import CheckpointError

    installed_package(SAM2_STANDIN)
    assert sam2_missing() is None
    corrupt = tmp_path / "sam2.1_hiera_tiny.pt"
    corrupt.write_bytes(b"\x80\x04not a checkpoint at all" * 100)
    with pytest.raises(CheckpointError) as caught:
        get_predictor("sam2", checkpoint=corrupt, variant="sam2.1_hiera_t", device="cpu")
    message = str(caught.value)
    assert f"cannot read checkpoint {corrupt} for predictor 'sam2' (variant 'sam2.1_hiera_t')" in message
    assert "re-download it if truncated" in message
    # a readable file of another architecture: named too, with the variant to pass
    build = importlib.import_module("sam2.build_sam")
    other = build.TinySam2()
    other.sam_mask_decoder = torch.nn.Linear(8, 3)
    misfit = tmp_path / "misfit.pt"
    torch.save({"model": other.state_dict()}, misfit)
    with pytest.raises(
        CheckpointError, match=r"does not fit predictor 'sam2' variant 'sam2.1_hiera_t'.*shape"
    ):
        get_predictor("sam2", checkpoint=misfit, variant="sam2.1_hiera_t", device="cpu")
    # the right file loads its weights
    torch.manual_seed(1)
    trained = build.TinySam2()
    good = tmp_path / "good.pt"
    torch.save({"model": trained.state_dict()}, good)
    predictor = get_predictor("sam2", checkpoint=good, variant="sam2.1_hiera_t", device="cpu")
    torch.testing.assert_close(predictor.image_encoder.weight, trained.image_encoder.weight)
    assert not predictor._image_predictor.model.training
