"""SAM 2 adapter: clear error without the user's sam2 package; variants and file names."""

from __future__ import annotations

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
