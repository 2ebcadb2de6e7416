"""Where checkpoints live, how they are hashed and loaded, and the errors when they do not fit.

Resolution order for a predictor's checkpoint file:

1. the ``checkpoint`` option: an absolute path, or a file name/relative path inside the directory below;
2. the predictor's official default file name inside that directory.

The directory is the ``checkpoint_dir`` option, else ``$CLICKLAB_CHECKPOINT_DIR``, else
``var/checkpoints/`` in the project root. (The web app passes its ``SEGMENTER_CHECKPOINTS`` setting
as these options; this library never reads Django settings.)
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Any

from segmenters.base import CheckpointError

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CHECKPOINT_DIR = PROJECT_ROOT / "var" / "checkpoints"
CHECKPOINT_DIR_ENV = "CLICKLAB_CHECKPOINT_DIR"

_hash_lock = threading.Lock()
_hash_memo: dict[tuple[str, int, int], str] = {}


def checkpoint_dir(explicit: str | os.PathLike | None = None) -> Path:
    """The checkpoint directory: ``explicit``, else ``$CLICKLAB_CHECKPOINT_DIR``, else var/checkpoints/."""
    if explicit is not None:
        return Path(explicit).expanduser()
    from_env = os.environ.get(CHECKPOINT_DIR_ENV)
    return Path(from_env).expanduser() if from_env else DEFAULT_CHECKPOINT_DIR


def resolve_checkpoint(
    *,
    predictor_name: str,
    variant: str,
    checkpoint: str | os.PathLike | None,
    default_file_name: str,
    directory: str | os.PathLike | None = None,
    download_hint: str,
) -> Path:
    """Path of an existing checkpoint file, or :class:`CheckpointError` saying where to get it."""
    folder = checkpoint_dir(directory)
    if checkpoint is None:
        path = folder / default_file_name
    else:
        given = Path(checkpoint).expanduser()
        path = given if given.is_absolute() else folder / given
    if not path.is_file():
        raise CheckpointError(
            f"checkpoint for predictor {predictor_name!r} (variant {variant!r}) not found at {path}. "
            f"Download {default_file_name} ({download_hint}) and put it there, or pass "
            f"checkpoint='/path/to/file' (relative names are looked up in {folder}; set "
            f"{CHECKPOINT_DIR_ENV} or the checkpoint_dir option to change that folder). See segmenters/README.md."
        )
    return path


def file_sha256(path: Path) -> str:
    """sha256 hex digest of a file, remembered per (path, size, mtime) so big checkpoints hash once."""
    stat = path.stat()
    memo_key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    with _hash_lock:
        known = _hash_memo.get(memo_key)
    if known is not None:
        return known
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    value = digest.hexdigest()
    with _hash_lock:
        _hash_memo[memo_key] = value
    return value


def load_state_dict(path: Path, *, predictor_name: str, variant: str) -> dict[str, Any]:
    """A tensor state dict from ``path`` (weights only; unwraps {"model": ...}/{"state_dict": ...})."""
    import torch

    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises several types for unreadable/foreign files
        raise CheckpointError(
            f"cannot read checkpoint {path} for predictor {predictor_name!r} (variant {variant!r}): {error}. "
            "Check that the file is a complete PyTorch checkpoint of that variant (re-download it if truncated)."
        ) from error
    for wrapper in ("model", "state_dict"):
        if isinstance(loaded, dict) and isinstance(loaded.get(wrapper), dict):
            loaded = loaded[wrapper]
    if not isinstance(loaded, dict) or not all(isinstance(key, str) for key in loaded):
        raise CheckpointError(
            f"checkpoint {path} does not hold a state dict (got {type(loaded).__name__}); predictor "
            f"{predictor_name!r} expects the official {variant!r} checkpoint file"
        )
    return loaded


def load_into_module(
    module, state_dict: dict[str, Any], *, path: Path, predictor_name: str, variant: str
) -> None:
    """Strictly load ``state_dict`` into ``module``; a mismatch names the file, variant and keys."""
    expected = module.state_dict()
    missing = sorted(set(expected) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(expected))
    mismatched = sorted(
        f"{key}: file {tuple(state_dict[key].shape)} vs model {tuple(expected[key].shape)}"
        for key in set(expected) & set(state_dict)
        if hasattr(state_dict[key], "shape") and tuple(state_dict[key].shape) != tuple(expected[key].shape)
    )
    if missing or unexpected or mismatched:
        details = []
        if mismatched:
            details.append(f"{len(mismatched)} shape mismatches (e.g. {mismatched[:2]})")
        if missing:
            details.append(f"{len(missing)} missing keys (e.g. {missing[:3]})")
        if unexpected:
            details.append(f"{len(unexpected)} unexpected keys (e.g. {unexpected[:3]})")
        raise CheckpointError(
            f"checkpoint {path} does not fit predictor {predictor_name!r} variant {variant!r}: "
            f"{'; '.join(details)}. Pass the variant the file was trained as, or the checkpoint of {variant!r}."
        )
    module.load_state_dict(state_dict, strict=True)
