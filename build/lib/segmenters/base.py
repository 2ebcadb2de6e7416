"""The predictor interface every segmenter implements.

Conventions (shared by ``segmenters/`` and ``benchmark/``):

* Images are ``numpy.ndarray`` of shape (H, W, 3), dtype uint8, RGB, as loaded.
* A click is ``Click(x, y, is_positive)`` with x = column and y = row in pixels of
  the image given to :meth:`Predictor.encode`; origin top-left.
* Probabilities are float32 arrays of shape (H, W) in [0, 1], at the image size.
* ``encode`` does the heavy, click-independent work once per image; ``predict``
  is the cheap per-click step and must not redo what ``encode`` did.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


class SegmenterError(Exception):
    """A segmenter cannot run as configured (message says what to do)."""


class CheckpointError(SegmenterError):
    """A checkpoint is missing, unreadable or does not fit the architecture."""


@dataclass(frozen=True)
class Click:
    x: float
    y: float
    is_positive: bool = True


@dataclass
class Embedding:
    """Output of :meth:`Predictor.encode`: opaque per-model payload plus metadata.

    ``nbytes`` is what the embedding cache charges for keeping it.
    """

    model_id: str
    image_shape: tuple[int, int]  # (H, W) of the encoded image
    payload: Any
    nbytes: int


@dataclass
class Prediction:
    """Output of :meth:`Predictor.predict`.

    ``probabilities``: float32 (H, W) in [0, 1] at the encoded image's size.
    ``logits``: model-specific state to pass back as ``previous_logits`` on the
    next click of the same trajectory (None at the first click).
    """

    probabilities: np.ndarray
    logits: Any = None
    extra: dict = field(default_factory=dict)


class Predictor(abc.ABC):
    """A click-driven interactive segmenter.

    Class attributes:
      ``name``: registry name (``"embedded"``, ``"sam"``, ...).
      ``model_type``: the RClicks ``model_type`` token for masks it produces
        (``"ritm"``, ``"sam"``, ``"simple"``, ...).
      ``threshold``: probability threshold for the binary mask (strictly greater).
    """

    name: str = ""
    model_type: str = ""
    threshold: float = 0.5

    @property
    @abc.abstractmethod
    def model_id(self) -> str:
        """Identifies architecture and configuration (part of the cache key)."""

    @property
    def checkpoint_hash(self) -> str:
        """sha256 of the loaded checkpoint file, or "" when there is none."""
        return ""

    @abc.abstractmethod
    def encode(self, image: np.ndarray) -> Embedding:
        """Heavy per-image step. ``image``: (H, W, 3) uint8 RGB."""

    @abc.abstractmethod
    def predict(
        self,
        embedding: Embedding,
        clicks: Sequence[Click],
        previous_logits: Any = None,
    ) -> Prediction:
        """Per-click step: all clicks so far, in order, and the previous logits."""

    def predict_mask(self, prediction: Prediction) -> np.ndarray:
        """Binary mask: probabilities strictly above ``threshold``."""
        return prediction.probabilities > self.threshold
