"""Which code made a result: ``code_version()``, recorded in a ``benchmark run``'s ``summary.json`` and shown with
every run on the evaluation server's leaderboards (local runs' and the server's own)."""

from __future__ import annotations

import functools
import subprocess
from importlib import metadata
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
#: The folders whose code decides a benchmark's numbers: a change there marks the version ``-modified``.
_RESULT_CODE = ("benchmark", "segmenters")


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """``clicklab <version>`` (the installed package's), plus ``+g<commit>`` in a git checkout, plus
    ``-modified`` when the checkout's ``benchmark/`` or ``segmenters/`` differ from that commit (uncommitted
    changes to tracked files; untracked files and the rest of the tree do not count)."""
    try:
        version = metadata.version("clicklab")
    except metadata.PackageNotFoundError:
        version = "0+unknown"
        pyproject = _ROOT / "pyproject.toml"
        if pyproject.is_file():
            for line in pyproject.read_text(encoding="utf-8").splitlines():
                if line.startswith("version = "):
                    version = line.split("=", 1)[1].strip().strip('"')
                    break
    commit = _git("rev-parse", "--short=12", "HEAD") if (_ROOT / ".git").exists() else None
    if not commit:
        return f"clicklab {version}"
    changed = _git("diff", "--quiet", "HEAD", "--", *_RESULT_CODE) is None
    return f"clicklab {version}+g{commit}" + ("-modified" if changed else "")
