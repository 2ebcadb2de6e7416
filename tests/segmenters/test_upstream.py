"""segmenters.upstream: failures of user-installed upstream code become SegmenterError naming the fix."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from segmenters.base import SegmenterError
from segmenters.upstream import (
    explain,
    import_isolated_subpackage,
    import_upstream,
    install_hint,
    upstream_errors,
)


def test_a_missing_module_is_named_with_how_to_install_it(installed_package):
    installed_package({"clone/__init__.py": "", "clone/head.py": "from mmcv.cnn import ConvModule\n"})
    with pytest.raises(SegmenterError) as caught:
        import_upstream("clone.head", package="SimpleClick clone (isegm)")
    message = str(caught.value)
    assert message.startswith("SimpleClick clone (isegm): importing clone.head needs the module 'mmcv'")
    assert "clone/head.py:1" in message and "install mmcv 1.x" in message
    assert isinstance(caught.value.__cause__, ModuleNotFoundError)


def test_numpy_aliases_removed_in_124_are_explained():
    with pytest.raises(SegmenterError) as caught, upstream_errors(package="RITM clone", doing="running"):
        np.float(3)  # what clones written for NumPy < 1.24 do
    message = str(caught.value)
    assert "np.float, an alias NumPy removed in 1.24" in message and np.__version__ in message
    assert "replace np.float with float" in message and "test_upstream.py" in message


def test_runtime_errors_carry_the_fix_and_other_errors_pass_through():
    with (
        pytest.raises(SegmenterError, match=r"net: running failed with RuntimeError: boom .*Check the input"),
        upstream_errors(package="net", doing="running", fix="Check the input."),
    ):
        raise RuntimeError("boom")
    # not a failure mode of upstream code we expect: stays visible
    with pytest.raises(KeyError), upstream_errors(package="net", doing="running"):
        raise KeyError("ours")


def test_isolated_subpackage_does_not_run_the_package_init(installed_package):
    installed_package(
        {
            "vendor/__init__.py": "import torchvision  # never installed here\n",
            "vendor/modeling/__init__.py": "from .parts import VALUE\n",
            "vendor/modeling/parts.py": "VALUE = 42\n",
        }
    )
    modeling = import_isolated_subpackage("vendor", "modeling", label="vendor")
    assert modeling.VALUE == 42 and modeling.__name__ == "_clicklab_vendor.modeling"
    assert "vendor" not in sys.modules and "torchvision" not in sys.modules
    assert import_isolated_subpackage("vendor", "modeling", label="vendor") is modeling


def test_isolated_subpackage_of_a_missing_package_says_how_to_install():
    with pytest.raises(
        SegmenterError, match=r"mobile_sam: the package 'mobile_sam' is not installed.*MobileSAM.git"
    ):
        import_isolated_subpackage("mobile_sam", "modeling", label="mobile_sam")


def test_install_hints():
    assert install_hint("timm.models.layers").startswith("pip install timm")
    assert install_hint("hydra") == "pip install hydra-core (SAM 2 builds its model from hydra configs)"
    assert install_hint("somethingelse.sub") == "pip install somethingelse"


def test_explain_a_plain_import_error():
    error = ImportError("cannot import name 'X' from 'clone.part'")
    assert explain(error, package="clone", doing="importing clone") == (
        "clone: importing clone failed to import (cannot import name 'X' from 'clone.part'). "
        "Reinstall clone and its requirements."
    )


def test_only_an_import_of_torchvision_is_reported_as_a_torchvision_mismatch(installed_package):
    installed_package(
        {"torchvision/__init__.py": 'raise RuntimeError("operator torchvision::nms does not exist")\n'}
    )
    with pytest.raises(SegmenterError, match=r"failed in torchvision .*install the torchvision release made"):
        import_upstream("torchvision", package="timm")
    # The same words at run time (not while importing) are a failure of the call, reported as such.
    with pytest.raises(SegmenterError) as caught, upstream_errors(package="sam2", doing="predicting"):
        raise RuntimeError("torchvision::roi_align got a tensor of the wrong shape")
    assert str(caught.value).startswith("sam2: predicting failed with RuntimeError: torchvision::roi_align")
    assert "release made for this torch" not in str(caught.value)
