"""Where checkpoints live, how they are hashed and loaded, the errors when they do not fit, and the
table of checkpoints an application may choose from.

Resolution order for a predictor's checkpoint file:

1. the ``checkpoint`` option: an absolute path, or a file name/relative path inside the directory below;
2. the predictor's official default file name inside that directory.

The directory is the ``checkpoint_dir`` option, else ``$CLICKLAB_CHECKPOINT_DIR``, else
``var/checkpoints/`` in the project root.

Checkpoint table (:func:`parse_checkpoint_table`): the web app's ``SEGMENTER_CHECKPOINTS`` setting is
read from the environment variable ``CLICKLAB_SEGMENTER_CHECKPOINTS`` with this function, and each study
chooses one of its entries (or ``embedded``) for its next-round builds. The text is either a JSON object
or a list of ``key=path`` entries separated by commas or newlines::

    sam:vit_b=sam_vit_b_01ec64.pth, simpleclick:vit_base=/models/cocolvis_vit_base.pth
    {"sam:vit_h": "sam_vit_h_4b8939.pth", "sam:vit_h:finetuned": "/models/sam_h_ours.pth"}

A key is ``<predictor>:<variant>`` or ``<predictor>:<variant>:<label>`` (the label tells two checkpoints
of one variant apart); the predictor must be registered and the variant one of its variants. A path is
absolute or relative to the checkpoint directory. :func:`segmenter_choice` turns a study's choice (a
key of the table, ``embedded``, a bare predictor name or ``<predictor>:<variant>``, the last two with the
official file name) into the keyword options of ``registry.get_predictor``. This library never reads
Django settings: the web app passes the text and the directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from segmenters.base import CheckpointError, SegmenterError

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CHECKPOINT_DIR = PROJECT_ROOT / "var" / "checkpoints"
CHECKPOINT_DIR_ENV = "CLICKLAB_CHECKPOINT_DIR"

_hash_lock = threading.Lock()
_hash_memo: dict[tuple[str, int, int], str] = {}


def checkpoint_dir(explicit: str | os.PathLike | None = None) -> Path:
    """The checkpoint directory: ``explicit``, else ``$CLICKLAB_CHECKPOINT_DIR``, else var/checkpoints/."""
    if explicit is not None:
        return Path(explicit).expanduser()
    from_env = os.environ.get("CLICKLAB_CHECKPOINT_DIR")  # declared in config/environment.py
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


# -- the checkpoint table ---------------------------------------------------------------------------

_KEY = re.compile(
    r"^(?P<predictor>[A-Za-z0-9_\-]+):(?P<variant>[A-Za-z0-9_.+\-]+)(?::(?P<label>[A-Za-z0-9_.\-]+))?$"
)


@dataclass(frozen=True)
class SegmenterChoice:
    """One predictor, variant and checkpoint an application may run.

    ``checkpoint`` None means the variant's official file name in the checkpoint directory; ``variant``
    None means a predictor without variants (``embedded``).
    """

    key: str
    predictor: str
    variant: str | None = None
    checkpoint: str | None = None

    def options(self, *, checkpoint_dir: str | os.PathLike | None) -> dict[str, Any]:
        """Keyword options of ``registry.get_predictor(self.predictor, **options)``."""
        if self.variant is None:
            return {}
        options: dict[str, Any] = {"variant": self.variant, "checkpoint_dir": checkpoint_dir}
        if self.checkpoint is not None:
            options["checkpoint"] = self.checkpoint
        return options

    @property
    def label(self) -> str:
        """Human-readable: ``sam · vit_b · sam_vit_b_01ec64.pth``."""
        if self.variant is None:
            return f"{self.predictor} (no weights)"
        file = Path(self.checkpoint).name if self.checkpoint else "official file"
        return f"{self.predictor} · {self.variant} · {file}"


def parse_checkpoint_table(text: str, *, source: str = "checkpoint table") -> dict[str, SegmenterChoice]:
    """The entries of a checkpoint table (module docstring), by key, in the order given.

    Raises SegmenterError naming ``source``, the entry at fault and what to write instead.
    """
    text = (text or "").strip()
    if not text:
        return {}
    if text.startswith("{"):
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as error:
            raise SegmenterError(
                f"{source} is not valid JSON ({error}); write a JSON object of key: path"
            ) from None
        if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
            raise SegmenterError(f"{source} must be a JSON object mapping 'predictor:variant' keys to paths")
        pairs = list(raw.items())
    else:
        pairs = []
        for entry in re.split(r"[,\n]", text):
            entry = entry.strip()
            if not entry:
                continue
            key, separator, path = entry.partition("=")
            if not separator:
                raise SegmenterError(
                    f"{source} entry {entry!r} has no '=': write predictor:variant=path (e.g. "
                    "sam:vit_b=sam_vit_b_01ec64.pth)"
                )
            pairs.append((key.strip(), path.strip()))
    table: dict[str, SegmenterChoice] = {}
    for key, path in pairs:
        choice = _table_entry(key, path, source=source)
        if key in table:
            raise SegmenterError(
                f"{source} names {key!r} twice; keep one entry (add a :label to tell them apart)"
            )
        table[key] = choice
    return table


def _table_entry(key: str, path: str, *, source: str) -> SegmenterChoice:
    from segmenters.registry import predictor_variants, registered_predictors

    match = _KEY.match(key)
    if match is None:
        raise SegmenterError(
            f"{source} key {key!r} is not predictor:variant or predictor:variant:label (e.g. sam:vit_b)"
        )
    predictor, variant = match["predictor"], match["variant"]
    if predictor not in registered_predictors():
        raise SegmenterError(
            f"{source} key {key!r}: unknown predictor {predictor!r}; one of {registered_predictors()}"
        )
    variants = predictor_variants(predictor)
    if not variants:
        raise SegmenterError(
            f"{source} key {key!r}: predictor {predictor!r} takes no checkpoint; drop the entry"
        )
    if variant not in variants:
        raise SegmenterError(
            f"{source} key {key!r}: {predictor} has no variant {variant!r}; one of {variants}"
        )
    if not path:
        raise SegmenterError(f"{source} key {key!r} has an empty path; give the checkpoint file")
    return SegmenterChoice(key=key, predictor=predictor, variant=variant, checkpoint=path)


def segmenter_choice(key: str, table: dict[str, SegmenterChoice]) -> SegmenterChoice:
    """What ``key`` runs: a key of ``table``; else a bare predictor name (its default variant) or
    ``predictor:variant``, with the table's entry for that variant if there is one and the official file
    name otherwise. Raises SegmenterError for anything else, listing the choices."""
    from segmenters.registry import predictor_variants, registered_predictors

    if key in table:
        return table[key]
    predictor, _, variant = key.partition(":")
    if predictor in registered_predictors() and ":" not in variant:
        variants = predictor_variants(predictor)
        if not variants and not variant:
            return SegmenterChoice(key=predictor, predictor=predictor)
        variant = variant or (variants[0] if variants else "")
        if variant in variants:
            canonical = f"{predictor}:{variant}"
            return table.get(canonical) or SegmenterChoice(
                key=canonical, predictor=predictor, variant=variant
            )
    raise SegmenterError(
        f"segmenter {key!r} is neither an entry of the checkpoint table ({sorted(table) or 'empty'}) nor a "
        f"predictor name or predictor:variant (predictors: {registered_predictors()})"
    )
