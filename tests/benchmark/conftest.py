"""A tiny click-driven predictor for the benchmark tests (our own Predictor interface, no model)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from segmenters.base import Click, Embedding, Prediction, Predictor


class DiskPredictor(Predictor):
    """Probability 0.9 within ``radius_px`` of the nearest positive click unless a negative click is nearer.

    Counts ``encode`` and ``predict`` calls so tests can check embedding reuse.
    """

    name = "test-disk"
    model_type = "test"
    threshold = 0.5

    def __init__(self, radius_px: float = 3.0) -> None:
        self.radius_px = radius_px
        self.encode_calls = 0
        self.predict_calls = 0

    @property
    def model_id(self) -> str:
        return f"test-disk:r{self.radius_px:g}"

    def encode(self, image: np.ndarray) -> Embedding:
        self.encode_calls += 1
        height, width = image.shape[:2]
        return Embedding(model_id=self.model_id, image_shape=(height, width), payload=None, nbytes=0)

    def predict(self, embedding: Embedding, clicks: Sequence[Click], previous_logits=None) -> Prediction:
        self.predict_calls += 1
        height, width = embedding.image_shape
        ys, xs = np.mgrid[0:height, 0:width]
        best_pos = np.full((height, width), np.inf)
        best_neg = np.full((height, width), np.inf)
        for click in clicks:
            distance = np.hypot(xs - click.x, ys - click.y)
            if click.is_positive:
                best_pos = np.minimum(best_pos, distance)
            else:
                best_neg = np.minimum(best_neg, distance)
        inside = (best_pos <= self.radius_px) & (best_pos < best_neg)
        return Prediction(probabilities=np.where(inside, 0.9, 0.1).astype(np.float32), logits=inside)


@pytest.fixture
def disk_predictor() -> DiskPredictor:
    return DiskPredictor()


def write_grabcut(root, objects: dict[str, tuple[int, int, int, int]], *, size=(24, 16)) -> None:
    """A GrabCut-layout folder; ``objects``: stem -> (x0, y0, x1, y1) object rectangle (255) with a
    1-px ignore ring (128) around it. Images are a grey background with a brighter object."""
    from PIL import Image

    width, height = size
    (root / "data_GT").mkdir(parents=True)
    (root / "boundary_GT").mkdir()
    for stem, (x0, y0, x1, y1) in objects.items():
        image = np.full((height, width, 3), 60, np.uint8)
        image[y0:y1, x0:x1] = 200
        Image.fromarray(image).save(root / "data_GT" / f"{stem}.png")
        mask = np.zeros((height, width), np.uint8)
        mask[max(y0 - 1, 0) : y1 + 1, max(x0 - 1, 0) : x1 + 1] = 128
        mask[y0:y1, x0:x1] = 255
        Image.fromarray(mask).save(root / "boundary_GT" / f"{stem}.bmp")


@pytest.fixture
def tiny_dataset(tmp_path):
    from benchmark.datasets import open_dataset

    root = tmp_path / "GrabCut"
    write_grabcut(root, {"left": (2, 3, 10, 12), "right": (12, 2, 22, 14)})
    return open_dataset(root, "grabcut")


@pytest.fixture
def predictor_factory():
    """The DiskPredictor class, for tests that need several independent predictors."""
    return DiskPredictor
