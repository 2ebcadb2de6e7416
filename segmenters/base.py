"""The predictor interface every segmenter implements.

Conventions (shared by ``segmenters/`` and ``benchmark/``):

* Images are ``numpy.ndarray`` of shape (H, W, 3), dtype uint8, RGB, as loaded.
* A click is ``Click(x, y, is_positive)`` with x = column and y = row in pixels of
  the image given to :meth:`Predictor.encode`; origin top-left.
* Probabilities are float32 arrays of shape (H, W) in [0, 1], at the image size.
* ``encode`` does the heavy, click-independent work once per image; ``predict``
  is the cheap per-click step and must not redo what ``encode`` did.
* A corrective round (seed 001's Mb+c: image + previous mask + every click so far -> mask) is
  :meth:`Predictor.correct`; the previous mask reaches the model as its own prior input through
  :meth:`Predictor.prior_from_mask` (SAM: low-res ``mask_input`` logits; RITM / SimpleClick: the
  previous-mask channel; the embedded segmenter: the mask itself).
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
    #: Whether a corrective round from a box start should begin with a positive "anchor" click on the
    #: object the box mask found (click models keep only the parts holding a positive click, so a first
    #: round of negative clicks alone would drop the object). See :meth:`correct`.
    needs_anchor_click: bool = True

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

    def prior_from_mask(self, embedding: Embedding, mask: np.ndarray) -> Any:
        """``previous_logits`` standing for a stored bool (H, W) ``mask`` (a mask this model did not
        necessarily make: a box start, another model's round). Default: the mask as float32 probabilities
        (0/1); adapters whose models take another prior override it."""
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != tuple(embedding.image_shape):
            raise SegmenterError(
                f"previous mask has shape {mask.shape}, the encoded image {tuple(embedding.image_shape)}: "
                "pass the mask of the same image"
            )
        return mask.astype(np.float32)

    def correct(
        self,
        embedding: Embedding,
        clicks: Sequence[Click],
        *,
        new_clicks: int,
        previous_mask: np.ndarray | None,
    ) -> Prediction:
        """One corrective round (seed 001's Mb+c): the mask after the last ``new_clicks`` of ``clicks``
        (every click so far, in order, this round's last) were made on ``previous_mask`` (bool (H, W), the
        mask the worker corrected; None when there is none yet).

        How a model takes them is its ``_round``; the default, for click models: the round's clicks one at a time,
        each with every click so far; the first one with :meth:`prior_from_mask` of ``previous_mask`` as
        ``previous_logits``, each later one with the logits of the click before it, as interactive models consume
        clicks.
        """
        if not 1 <= new_clicks <= len(clicks):
            raise SegmenterError(
                f"correct(): new_clicks={new_clicks} must be between 1 and the {len(clicks)} click(s) given"
            )
        previous = None if previous_mask is None else np.asarray(previous_mask, dtype=bool)
        return self._round(embedding, list(clicks), new_clicks, previous)

    def _round(self, embedding: Embedding, clicks: list[Click], new: int, previous: Any) -> Prediction:
        """:meth:`correct` with its arguments checked (``previous``: a bool (H, W) mask or None)."""
        logits = None if previous is None else self.prior_from_mask(embedding, previous)
        prediction = None
        for count in range(len(clicks) - new + 1, len(clicks) + 1):
            prediction = self.predict(embedding, clicks[:count], logits)
            logits = prediction.logits if prediction.logits is not None else self.predict_mask(prediction)
        assert prediction is not None  # new >= 1 (checked by correct): the loop ran
        return prediction
