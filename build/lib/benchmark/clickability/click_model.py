"""The one interface every click model offers the benchmark: a clickability map per error region.

``ClickModel.predict_map(image, gt_mask, error_mask) -> float32 (H, W)`` — non-negative, any scale
(callers normalise). ``image``: (H, W, 3) uint8 RGB as loaded; ``gt_mask``: bool (H, W) full GT object;
``error_mask``: bool (H, W) region to click (first round: the object; later: the fn or fp region).

The engine's :class:`benchmark.clickers.GroupClicker` takes ``model.predict_map`` as its ``map_fn``.
:func:`load_click_model` turns a name (``uniform``/``ud``, ``dt``, ``sm``, ``si``) or a checkpoint path
(``best.pt`` from ``python -m benchmark train-clickability``) into a model.
"""

from __future__ import annotations

import abc
from pathlib import Path

import numpy as np


class ClickModel(abc.ABC):
    """A model of where people click inside an error region."""

    name: str = ""

    @abc.abstractmethod
    def predict_map(self, image: np.ndarray, gt_mask: np.ndarray, error_mask: np.ndarray) -> np.ndarray:
        """float32 (H, W) ≥ 0 clickability (unnormalised); all zeros when nothing can be clicked."""

    def __call__(self, image: np.ndarray, gt_mask: np.ndarray, error_mask: np.ndarray) -> np.ndarray:
        return self.predict_map(image, gt_mask, error_mask)


def check_inputs(image: np.ndarray, gt_mask: np.ndarray, error_mask: np.ndarray) -> None:
    """Fail fast with the shapes at fault."""
    if image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"image must be (H, W, 3) RGB, got shape {image.shape}")
    if gt_mask.shape != image.shape[:2] or error_mask.shape != image.shape[:2]:
        raise ValueError(
            f"gt_mask {gt_mask.shape} and error_mask {error_mask.shape} must match the image size {image.shape[:2]}"
        )


BASELINE_NAMES = ("uniform", "ud", "dt", "sm", "si", "saliency")


def load_click_model(name_or_checkpoint: str | Path, *, device: str = "cpu") -> ClickModel:
    """A click model by name (``uniform``/``ud``, ``dt``, ``sm``/``saliency``, ``si``) or checkpoint path.

    Raises ValueError naming the argument when it is neither a known name nor an existing file.
    """
    from benchmark.clickability import baselines

    text = str(name_or_checkpoint)
    lowered = text.lower()
    if lowered in {"uniform", "ud"}:
        return baselines.UniformClickModel()
    if lowered == "dt":
        return baselines.DistanceTransformClickModel()
    if lowered in {"sm", "saliency"}:
        return baselines.SpectralSaliencyClickModel(gray_outside=True)
    if lowered == "si":
        return baselines.SpectralSaliencyClickModel(gray_outside=False)
    path = Path(text)
    if path.is_file():
        from benchmark.clickability.model import TrainedClickModel

        return TrainedClickModel.from_checkpoint(path, device=device)
    raise ValueError(
        f"click model {text!r} is neither a known name ({', '.join(BASELINE_NAMES)}) nor an existing checkpoint "
        "file; train one with `python -m benchmark train-clickability` and pass its best.pt"
    )
