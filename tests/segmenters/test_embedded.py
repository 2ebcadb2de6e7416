"""The embedded GrabCut default: behaviour on synthetic scenes and quality on real GrabCut images."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from segmenters.base import Click, SegmenterError
from segmenters.embedded import EmbeddedPredictor
from segmenters.registry import get_predictor

from .conftest import square_scene


def _iou(mask: np.ndarray, gt: np.ndarray, ignore: np.ndarray | None = None) -> float:
    valid = np.ones_like(gt) if ignore is None else ~ignore
    union = ((mask | gt) & valid).sum()
    return float((mask & gt & valid).sum() / union) if union else float("nan")


def test_single_positive_click_segments_the_rectangle():
    image, gt = square_scene()
    predictor = get_predictor("embedded")
    embedding = predictor.encode(image)
    prediction = predictor.predict(embedding, [Click(x=30, y=30, is_positive=True)])
    assert _iou(predictor.predict_mask(prediction), gt) > 0.9


def test_negative_click_removes_a_wrongly_included_region():
    # Two same-coloured rectangles joined by a bridge: one positive click takes both.
    image, left = square_scene(height=60, width=120)
    right = np.zeros_like(left)
    right[15:45, 75:110] = True
    bridge = np.zeros_like(left)
    bridge[28:32, 60:75] = True
    added = right | bridge
    noise = np.random.default_rng(3).normal(0, 8, (int(added.sum()), 3))
    image[added] = np.clip(image[left].mean(axis=0) + noise, 0, 255).astype(np.uint8)
    predictor = get_predictor("embedded")
    embedding = predictor.encode(image)
    first = predictor.predict(embedding, [Click(x=35, y=30, is_positive=True)])
    first_mask = predictor.predict_mask(first)
    assert first_mask[30, 95], "precondition: one positive click should take both same-coloured rectangles"

    clicks = [Click(x=35, y=30, is_positive=True), Click(x=95, y=30, is_positive=False)]
    second_mask = predictor.predict_mask(predictor.predict(embedding, clicks, first.logits))
    assert not second_mask[30, 95]
    assert second_mask[right].mean() < 0.2, "the negative click should remove most of the right rectangle"
    assert _iou(second_mask, left) > 0.85


def test_clicks_without_a_positive_give_an_empty_mask():
    image, _ = square_scene()
    predictor = get_predictor("embedded")
    prediction = predictor.predict(predictor.encode(image), [Click(x=5, y=5, is_positive=False)])
    assert not predictor.predict_mask(prediction).any()


def test_previous_logits_of_wrong_shape_are_rejected_with_the_shapes():
    image, _ = square_scene()
    predictor = get_predictor("embedded")
    with pytest.raises(SegmenterError, match=r"\(10, 10\).*\(60, 90\)"):
        predictor.predict(predictor.encode(image), [Click(x=30, y=30)], np.zeros((10, 10), np.float32))


def test_previous_mask_as_bool_is_accepted_and_kept_far_from_the_new_click():
    image, gt = square_scene()
    predictor = get_predictor("embedded")
    embedding = predictor.encode(image)
    previous = gt.copy()
    previous[:, 60:] = True  # a wrong strip on the right, far from the new click
    prediction = predictor.predict(embedding, [Click(x=30, y=30), Click(x=25, y=20)], previous)
    mask = predictor.predict_mask(prediction)
    assert mask[gt].mean() > 0.95


def test_click_outside_the_image_is_rejected():
    image, _ = square_scene()
    predictor = get_predictor("embedded")
    with pytest.raises(SegmenterError, match="outside the 90x60 image"):
        predictor.predict(predictor.encode(image), [Click(x=500, y=3)])


def test_embedding_from_another_configuration_is_rejected():
    image, _ = square_scene()
    embedding = EmbeddedPredictor(grabcut_iterations=2).encode(image)
    with pytest.raises(SegmenterError, match="encode the image with the predictor that predicts"):
        EmbeddedPredictor(grabcut_iterations=3).predict(embedding, [Click(x=30, y=30)])


def test_large_image_is_processed_at_working_resolution_and_returned_at_full_size():
    image, gt = square_scene(height=240, width=360)
    predictor = EmbeddedPredictor(work_long_side_px=120)
    embedding = predictor.encode(image)
    assert embedding.payload.image_bgr.shape[:2] == (80, 120)
    prediction = predictor.predict(embedding, [Click(x=120, y=120)])
    assert prediction.probabilities.shape == (240, 360)
    assert _iou(predictor.predict_mask(prediction), gt) > 0.9


# -- real data --------------------------------------------------------------------------------------


def _load_grabcut(root: Path) -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray]]:
    images = {path.stem: path for path in (root / "data_GT").iterdir()}
    samples = []
    for mask_path in sorted((root / "boundary_GT").iterdir()):
        image = cv2.imread(str(images[mask_path.stem]), cv2.IMREAD_COLOR)
        raw = cv2.imread(str(mask_path), cv2.IMREAD_UNCHANGED)
        raw = raw[:, :, 0] if raw.ndim == 3 else raw
        samples.append((mask_path.stem, cv2.cvtColor(image, cv2.COLOR_BGR2RGB), raw > 128, raw == 128))
    return samples


def _baseline_click(pred: np.ndarray, gt: np.ndarray, ignore: np.ndarray, not_clicked: np.ndarray) -> Click:
    """RITM's clicker (session-and-eval.md §2.1): deepest error pixel, first in row-major order."""
    fn = gt & ~pred & ~ignore
    fp = ~gt & pred & ~ignore

    def depth(error: np.ndarray) -> np.ndarray:
        padded = np.pad(error, 1).astype(np.uint8)
        return cv2.distanceTransform(padded, cv2.DIST_L2, cv2.DIST_MASK_PRECISE)[1:-1, 1:-1] * not_clicked

    depth_fn, depth_fp = depth(fn), depth(fp)
    positive = depth_fn.max() > depth_fp.max()
    chosen = depth_fn if positive else depth_fp
    row, col = np.unravel_index(int(np.argmax(chosen == chosen.max())), chosen.shape)
    not_clicked[row, col] = False
    return Click(x=float(col), y=float(row), is_positive=bool(positive))


@pytest.mark.dataset
@pytest.mark.slow
def test_mean_iou_after_five_baseline_clicks_on_grabcut(grabcut_root):
    # Measured 0.90 with the default options (21 images). A segmenter that only painted the click disks
    # would stay below 0.05 (5 disks of radius 5 px cover < 410 px; the smallest object has 9328 px);
    # an earlier version of this one, whose corrections did not relabel the clicked region, got 0.80.
    predictor = get_predictor("embedded")
    ious = []
    for _stem, image, gt, ignore in _load_grabcut(grabcut_root):
        embedding = predictor.encode(image)
        pred = np.zeros_like(gt)
        not_clicked = np.ones_like(gt)
        clicks: list[Click] = []
        logits = None
        for _ in range(5):
            clicks.append(_baseline_click(pred, gt, ignore, not_clicked))
            prediction = predictor.predict(embedding, clicks, logits)
            logits = prediction.logits
            pred = predictor.predict_mask(prediction)
        ious.append(_iou(pred, gt, ignore))
    assert len(ious) == 21
    assert np.mean(ious) >= 0.86, f"mean IoU@5 = {np.mean(ious):.3f}"


def test_every_option_is_part_of_the_model_id():
    # The embedding cache keys on model_id: two configurations must never share an entry.
    import inspect

    defaults = {
        name: parameter.default
        for name, parameter in inspect.signature(EmbeddedPredictor.__init__).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    }
    base = EmbeddedPredictor().model_id
    for name, default in defaults.items():
        changed = EmbeddedPredictor(**{name: default * 2 if default else 1}).model_id
        assert changed != base, f"option {name} does not change model_id"
