"""Importing and calling user-installed upstream code (RITM/SimpleClick clones, mobile_sam, sam2).

That code is outside our control: it may miss a dependency (timm, mmcv, torchvision, hydra), use NumPy
aliases removed in NumPy 1.24 (``np.int`` in old RITM clones), or fail on a tensor shape it was not built
for. Every such failure reaches the caller as :class:`~segmenters.base.SegmenterError` naming the
package, the module or file at fault and the fix, so a next-round build can show the researcher why it
failed instead of crashing on a bare ``AttributeError``.

Availability checks (``registry.available_predictors``) import exactly the modules that building a
predictor imports, through :func:`import_upstream`, so a predictor is listed only when it can be built.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import sys
import traceback
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from segmenters.base import SegmenterError

#: How to get a module that upstream code imports and that is commonly missing (top-level name -> fix).
INSTALL_HINTS: dict[str, str] = {
    "timm": "pip install timm (note: timm installs torchvision, which must be the build made for your torch)",
    "mmcv": (
        "install mmcv 1.x (SimpleClick's segmentation head imports mmcv.cnn.ConvModule; "
        "see https://github.com/uncbiag/SimpleClick#environment)"
    ),
    "torchvision": "pip install the torchvision release built for your torch version",
    "hydra": "pip install hydra-core (SAM 2 builds its model from hydra configs)",
    "iopath": "pip install iopath",
    "easydict": "pip install easydict",
    "albumentations": "pip install albumentations",
    "segment_anything": "pip install segment-anything==1.0",
    "mobile_sam": "pip install git+https://github.com/ChaoningZhang/MobileSAM.git",
    "sam2": "install SAM 2 from https://github.com/facebookresearch/sam2 (pip install -e . in a clone)",
    "isegm": (
        "clone https://github.com/SamsungLabs/ritm_interactive_segmentation (RITM) or "
        "https://github.com/uncbiag/SimpleClick (SimpleClick), install its requirements and put the clone on "
        "PYTHONPATH"
    ),
}

_NUMPY_ALIAS = re.compile(r"module 'numpy' has no attribute '(int|float|bool|object|str|long|complex)'")


def install_hint(module_name: str) -> str:
    """How to install the top-level package of ``module_name`` (``pip install <name>`` when unknown)."""
    top = module_name.split(".")[0]
    return INSTALL_HINTS.get(top, f"pip install {top}")


def _library_roots() -> tuple[str, ...]:
    import numpy
    import torch

    return tuple(str(Path(inspect.getfile(module)).parent) for module in (numpy, torch))


def _where(error: BaseException) -> str:
    """' (at file:line)' of the innermost frame of ``error`` in the failing package's own code: frames
    inside NumPy, torch and the import machinery are skipped ('' when no frame is left)."""
    roots = _library_roots()
    frames = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if not frame.filename.startswith(("<frozen", *roots))
    ]
    return f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""


def _torchvision_broken(error: BaseException) -> bool:
    """Whether ``error`` is an installed torchvision failing to import (built for another torch: "operator
    torchvision::nms does not exist", "partially initialized module 'torchvision' ..."), not a missing one
    and not a failure at run time that merely passes through torchvision code."""
    if isinstance(error, ModuleNotFoundError):
        return False
    frames = traceback.extract_tb(error.__traceback__)
    if not any(frame.filename.startswith("<frozen importlib") for frame in frames):
        return False
    marker = f"{os.sep}torchvision{os.sep}"
    return "torchvision" in str(error) or any(marker in frame.filename for frame in frames)


def explain(error: BaseException, *, package: str, doing: str) -> str:
    """A message for a failure of upstream code: what failed, where, and what to do about it."""
    where = _where(error)
    if _torchvision_broken(error):
        import torch

        return (
            f"{package}: {doing} failed in torchvision ({type(error).__name__}: {error}){where}. The installed "
            f"torchvision was not built for the torch here ({torch.__version__}); each torchvision release works "
            "with one torch release only. To fix it: install the torchvision release made for this torch (the "
            "table at https://github.com/pytorch/vision#installation), or uninstall torchvision if nothing needs it."
        )
    if isinstance(error, ImportError):
        missing = getattr(error, "name", None) or ""
        if isinstance(error, ModuleNotFoundError) and missing:
            return (
                f"{package}: {doing} needs the module {missing!r}, which is not installed{where}. "
                f"To install it: {install_hint(missing)}."
            )
        provider = missing.split(".")[0]
        if provider in INSTALL_HINTS:
            # ``from mmcv.utils import get_logger`` under mmcv 2: the module is there, the name is not.
            return (
                f"{package}: {doing} failed to import ({error}){where}: the installed {provider} is not the "
                f"release {package} was written for. To install the right one: {install_hint(provider)}."
            )
        return (
            f"{package}: {doing} failed to import ({error}){where}. Reinstall {package} and its requirements."
        )
    if isinstance(error, AttributeError):
        alias = _NUMPY_ALIAS.search(str(error))
        if alias:
            import numpy

            name = alias.group(1)
            return (
                f"{package}: {doing} failed because the code uses np.{name}, an alias NumPy removed in 1.24 "
                f"(NumPy here is {numpy.__version__}){where}. Fix the clone: replace np.{name} with {name} "
                f"(grep -rn 'np\\.{name}\\b' in it), or use a release of it that supports NumPy 2."
            )
        return (
            f"{package}: {doing} failed with AttributeError: {error}{where}. The installed {package} does "
            "not match what Clicklab expects; use the upstream release named in segmenters/README.md."
        )
    return f"{package}: {doing} failed with {type(error).__name__}: {error}{where}."


@contextmanager
def upstream_errors(
    *,
    package: str,
    doing: str,
    fix: str = "",
    also: tuple[type[Exception], ...] = (),
) -> Iterator[None]:
    """Turn ImportError, AttributeError and RuntimeError raised by upstream code into SegmenterError.

    Wrap only calls into upstream code (building, loading, forward passes) so our own bugs stay visible
    as what they are. ``fix`` is appended to RuntimeError messages (e.g. which input shape the network
    expects). ``also``: further exception types that, in the wrapped call, can only mean the upstream code
    does not fit what it was given (e.g. TypeError/AssertionError while a clone builds a network from a
    checkpoint's config); they are reported like RuntimeError.
    """
    reported_with_fix: tuple[type[Exception], ...] = (RuntimeError, *also)
    try:
        yield
    except SegmenterError:
        raise
    except (ImportError, AttributeError) as error:
        raise SegmenterError(explain(error, package=package, doing=doing)) from error
    except reported_with_fix as error:
        message = explain(error, package=package, doing=doing)
        raise SegmenterError(f"{message} {fix}".rstrip()) from error


def import_upstream(module_name: str, *, package: str) -> types.ModuleType:
    """``importlib.import_module(module_name)``, with failures as SegmenterError (see :func:`explain`)."""
    with upstream_errors(package=package, doing=f"importing {module_name}"):
        return importlib.import_module(module_name)


def import_isolated_subpackage(package: str, subpackage: str, *, label: str) -> types.ModuleType:
    """``<package>.<subpackage>`` loaded without running ``<package>/__init__.py``.

    segment_anything's and mobile_sam's package ``__init__`` import their predictors, which import
    torchvision; their ``modeling`` subpackages use relative imports only and need no torchvision. The
    subpackage is loaded as a child of a private stand-in parent (``_clicklab_<package>``) whose
    ``__path__`` is the installed package folder, so the real name stays untouched for code that has
    torchvision. Missing packages and failing imports raise SegmenterError naming the fix.
    """
    parent_name = f"_clicklab_{package}"
    name = f"{parent_name}.{subpackage}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SegmenterError(
            f"{label}: the package {package!r} is not installed. To install it: {install_hint(package)}."
        )
    if parent_name not in sys.modules:
        parent = types.ModuleType(parent_name)
        parent.__path__ = list(spec.submodule_search_locations)
        sys.modules[parent_name] = parent
    with upstream_errors(package=label, doing=f"importing {package}.{subpackage}"):
        return importlib.import_module(name)
