"""Torch device choice: CPU by default, CUDA when present (or as asked)."""

from __future__ import annotations

from segmenters.base import SegmenterError


def select_device(device: str | None = None):
    """``torch.device`` for ``device`` ("cpu", "cuda", "cuda:1", ...); None/"auto": CUDA if present."""
    import torch

    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        chosen = torch.device(device)
    except RuntimeError as error:
        raise SegmenterError(
            f"device={device!r} is not a torch device name (use 'cpu', 'cuda' or 'auto')"
        ) from error
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise SegmenterError(
            f"device={device!r} was asked for but CUDA is not available here; use 'cpu' or 'auto'"
        )
    return chosen
