"""Stand-in upstream packages on ``sys.path`` (the ``installed_package`` fixture, registered in tests/conftest.py).

Upstream code a researcher installs (an RITM/SimpleClick clone, mobile_sam, sam2, timm) is outside our
control and not installable here; stand-ins reproduce its layout and its imports, so what they import and
this environment lacks (mmcv, timm, torchvision, hydra, NumPy 1.x aliases) really is missing.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest


@pytest.fixture
def installed_package(tmp_path, monkeypatch):
    """``install({"pkg/__init__.py": source, ...})`` writes the files (sources dedented) under a folder put
    first on ``sys.path`` and returns that folder; the packages' modules (and their ``_clicklab_``
    isolated copies) are forgotten again after the test."""
    root = tmp_path / "site"
    tops: set[str] = set()

    def install(files: dict[str, str]) -> Path:
        for relative, source in files.items():
            path = root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(source))
            tops.add(relative.split("/")[0])
        monkeypatch.syspath_prepend(str(root))
        return root

    yield install
    for name in list(sys.modules):
        top = name.split(".")[0]
        if top in tops or top.removeprefix("_clicklab_") in tops:
            del sys.modules[name]
    importlib.invalidate_caches()
