"""The embedded default: a click-driven GrabCut segmenter that needs no downloaded weights.

How a prediction is made (all at a working resolution, long side ``work_long_side_px``):

1. A trimap for OpenCV's GrabCut: disks of radius ``click_radius_px`` around positive clicks are
   certain foreground, around negative clicks certain background. Everything else is "probably
   foreground" where the previous mask (``previous_logits > 0``) says so and "probably background"
   elsewhere. At the first click there is no previous mask, so a soft prior stands in for it: the
   pixels whose colour-geodesic distance to the positive clicks is small are "probably foreground",
   and a strip along the image border is "probably background" (GrabCut's own rectangle prior,
   without making it a hard constraint, so objects touching the border are still found).
2. GrabCut (colour GMMs + graph cut) runs ``grabcut_iterations`` times from that trimap.
3. Only connected foreground components holding a positive click are kept, and holes smaller than
   ``max_hole_fraction`` of the object are filled: a click means "this object", never "this colour".
4. Later clicks refine: the previous mask seeds the trimap; the newest click's colour-geodesic
   neighbourhood (pixels closer to it than ``refine_geodesic_fraction`` of the largest distance,
   and closer to it than to any click of the other polarity) takes the click's label -- "certain"
   in its inner ``refine_hard_fraction``, "probably" beyond -- because otherwise a negative click on
   a wrongly included region only removes its own disk (GrabCut has learnt that region's colours as
   foreground). GrabCut then runs only inside a window of ``refine_radius_fraction`` of the image
   diagonal around the newest click; outside it the previous mask is kept, so a correction cannot
   undo the parts the user already accepted.

A corrective round (:meth:`Predictor.correct`, here ``EmbeddedPredictor._round``; seed 001's Mb+c: image + previous mask + every click so
far) is one GrabCut over the whole working image, not a click-by-click walk:

1. The previous mask is the trimap, as hard labels: the parts the worker did not click stay as they were
   (a round that only refines one edge never moves another).
2. Each new click opens a zone that GrabCut may re-decide: a disk around the click whose radius is
   ``correct_zone_factor`` times the click's distance to the previous mask's boundary, plus
   ``click_radius_px`` (within ``correct_zone_min_px`` and ``correct_zone_max_fraction`` of the diagonal).
   Workers click near the centre of an error region, so that distance is about the region's half-width
   (the seed's Mr reads the same signal, §4.2): the zone covers the region the click corrects and little more.
   Inside the zones the previous mask is "probably" its label, and the new click's colour-geodesic
   neighbourhood on the wrong side of the mask (closer to it than to any click of the other sign) takes the
   click's label, "certain" in its inner ``refine_hard_fraction``.
3. Every click so far (old rounds too) is a hard disk of its sign. GrabCut's colour models are learnt from the
   whole trimap, so the object's and the background's colours come from the previous mask.
4. New components without a positive click (and not part of the previous mask outside the zones) are
   dropped; small holes are filled, as for a prediction.

Randomness: ``cv2.grabCut`` initialises its colour models with k-means, which draws from OpenCV's
global (per-thread) random generator. Right before each ``cv2.grabCut`` call that generator is
seeded (``cv2.setRNGSeed``, same thread) with a value derived from the predictor's ``random_seed``
option, the image content (fingerprint taken at ``encode``), every click so far (their order,
coordinates and signs) and the previous mask. Within a benchmark trajectory the clicks so far
identify (instance, group, sample, click), so the same image and clicks give the same mask in any
process, worker, resumed run or session, whatever ran before.

``encode`` converts the image once (working-resolution BGR copy and its Lab colours); ``predict``
never touches the full-resolution image again.

Probabilities are a sigmoid of the signed distance (in working pixels) to the mask boundary, so
``probabilities > 0.5`` is exactly the GrabCut mask upsampled, and ``Prediction.logits`` is that
signed distance (float32, (H, W)): positive inside. Any float (H, W) array with "positive =
foreground" (or a bool mask) is accepted back as ``previous_logits``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from segmenters.base import Click, Embedding, Prediction, Predictor, SegmenterError
from segmenters.images import validate_image
from segmenters.registry import register

_FGD, _BGD, _PR_FGD, _PR_BGD = cv2.GC_FGD, cv2.GC_BGD, cv2.GC_PR_FGD, cv2.GC_PR_BGD
# correct()'s zone (factor, min px, max fraction of the diagonal) by default: left out of the model id
_DEFAULT_ZONE = (2.0, 10.0, 0.25)
# grabCut's rect, unused when it starts from a mask (GC_INIT_WITH_MASK): the empty rect OpenCV makes of None
_UNUSED_RECT = (0, 0, 0, 0)


@dataclass
class _EmbeddedPayload:
    image_bgr: np.ndarray  # (h, w, 3) uint8 at working resolution
    lab: np.ndarray  # (h, w, 3) float32 CIE Lab of the smoothed working image
    scale: float  # working pixels per original pixel
    fingerprint: bytes = b""  # blake2b of the working image (part of every GrabCut seed)


@register("embedded")
class EmbeddedPredictor(Predictor):
    """Click-driven GrabCut with a geodesic first-click prior and local refinement (no weights)."""

    name = "embedded"
    model_type = "embedded"
    threshold = 0.5
    needs_anchor_click = False  # correct() keeps what the worker did not click: no anchor needed

    def __init__(
        self,
        *,
        work_long_side_px: int = 512,
        click_radius_px: float = 5.0,
        grabcut_iterations: int = 4,
        first_click_geodesic_fraction: float = 0.25,
        border_strip_fraction: float = 0.03,
        refine_radius_fraction: float = 0.25,
        refine_geodesic_fraction: float = 0.15,
        refine_hard_fraction: float = 0.25,
        max_hole_fraction: float = 0.02,
        random_seed: int = 0,
        correct_zone_factor: float = 2.0,
        correct_zone_min_px: float = 10.0,
        correct_zone_max_fraction: float = 0.25,
    ) -> None:
        """
        Args:
          work_long_side_px: images are processed with their long side scaled down to at most this.
          click_radius_px: radius of the hard-constraint disk drawn at each click, in working pixels.
          grabcut_iterations: GrabCut EM iterations per click.
          first_click_geodesic_fraction: at the first click, pixels whose colour-geodesic distance to
            the click is below this fraction of the largest finite one start as "probably foreground".
          border_strip_fraction: width of the "probably background" border strip at the first click,
            as a fraction of the short side.
          refine_radius_fraction: after the first click, changes are allowed only within this
            fraction of the image diagonal around the newest click (1.0 or more: global re-solve).
          refine_geodesic_fraction: after the first click, pixels closer (colour-geodesically) to the
            newest click than this fraction of the largest distance, and closer to it than to any
            click of the other polarity, start with the newest click's label.
          refine_hard_fraction: the part of that neighbourhood within this fraction of its cut-off
            distance becomes a hard constraint (0 disables).
          max_hole_fraction: background holes inside the mask smaller than this fraction of the mask
            area (and not holding a negative click) are filled.
          random_seed: mixed into the seed of OpenCV's generator before every GrabCut call (see the
            module docstring); changing it changes GrabCut's k-means initialisation only.
          correct_zone_factor, correct_zone_min_px, correct_zone_max_fraction: a corrective round's zone
            around each new click (:meth:`correct`): this factor times the click's distance to the previous
            mask's boundary plus ``click_radius_px``, at least ``correct_zone_min_px`` and at most this
            fraction of the diagonal (working pixels).
        """
        if work_long_side_px < 32:
            raise SegmenterError(f"work_long_side_px={work_long_side_px} is too small; use at least 32")
        if grabcut_iterations < 1:
            raise SegmenterError(f"grabcut_iterations={grabcut_iterations} must be at least 1")
        self.work_long_side_px = int(work_long_side_px)
        self.click_radius_px = float(click_radius_px)
        self.grabcut_iterations = int(grabcut_iterations)
        self.first_click_geodesic_fraction = float(first_click_geodesic_fraction)
        self.border_strip_fraction = float(border_strip_fraction)
        self.refine_radius_fraction = float(refine_radius_fraction)
        self.refine_geodesic_fraction = float(refine_geodesic_fraction)
        self.refine_hard_fraction = float(refine_hard_fraction)
        self.max_hole_fraction = float(max_hole_fraction)
        self.random_seed = int(random_seed)
        if correct_zone_factor < 0 or correct_zone_min_px < 0 or correct_zone_max_fraction <= 0:
            raise SegmenterError(
                f"correct_zone_factor={correct_zone_factor}, correct_zone_min_px={correct_zone_min_px} must be >= 0 "
                f"and correct_zone_max_fraction={correct_zone_max_fraction} > 0"
            )
        self.correct_zone = (
            float(correct_zone_factor),
            float(correct_zone_min_px),
            float(correct_zone_max_fraction),
        )

    @property
    def model_id(self) -> str:
        return (
            f"embedded-grabcut:w{self.work_long_side_px}:r{self.click_radius_px:g}:it{self.grabcut_iterations}"
            f":g{self.first_click_geodesic_fraction:g}:b{self.border_strip_fraction:g}"
            f":l{self.refine_radius_fraction:g}:q{self.refine_geodesic_fraction:g}"
            f":k{self.refine_hard_fraction:g}:h{self.max_hole_fraction:g}"
            + (f":s{self.random_seed}" if self.random_seed else "")
            + ("" if self.correct_zone == _DEFAULT_ZONE else ":z{:g},{:g},{:g}".format(*self.correct_zone))
        )

    def encode(self, image: np.ndarray) -> Embedding:
        """Working-resolution copy and Lab colours. ``image``: (H, W, 3) uint8 RGB."""
        validate_image(image)
        height, width = image.shape[:2]
        scale = min(1.0, self.work_long_side_px / max(height, width))
        if scale < 1.0:
            size = (max(1, round(width * scale)), max(1, round(height * scale)))
            work = cv2.resize(image, size, interpolation=cv2.INTER_AREA)
        else:
            work = image
        image_bgr = np.ascontiguousarray(work[:, :, ::-1])
        smoothed = cv2.GaussianBlur(work, (0, 0), 1.0).astype(np.float32) / 255.0
        lab = cv2.cvtColor(smoothed, cv2.COLOR_RGB2Lab)
        fingerprint = hashlib.blake2b(image_bgr.tobytes(), digest_size=16)
        fingerprint.update(repr(image_bgr.shape).encode())
        payload = _EmbeddedPayload(
            image_bgr=image_bgr, lab=lab, scale=scale, fingerprint=fingerprint.digest()
        )
        return Embedding(
            model_id=self.model_id,
            image_shape=(height, width),
            payload=payload,
            nbytes=int(image_bgr.nbytes + lab.nbytes),
        )

    def predict(
        self, embedding: Embedding, clicks: Sequence[Click], previous_logits: Any = None
    ) -> Prediction:
        """Mask for all ``clicks`` so far (in order; the newest last).

        ``previous_logits``: None at the start of a trajectory, else a float (H, W) array where
        positive means foreground (``Prediction.logits`` of the previous click) or a bool mask.
        """
        payload = self._payload(embedding)
        height, width = embedding.image_shape
        work_h, work_w = payload.image_bgr.shape[:2]
        previous = self._previous_mask(previous_logits, embedding.image_shape, (work_h, work_w))
        work_clicks = [_scaled_click(click, payload.scale, work_w, work_h, height, width) for click in clicks]

        if not any(click.is_positive for click in work_clicks):
            # Without a positive click there is no object to segment; negatives only shrink the past mask.
            mask = np.zeros((work_h, work_w), bool) if previous is None else previous.copy()
            for click in work_clicks:
                cv2.circle(_as_u8_view(mask), _pixel(click), round(self.click_radius_px), 0, -1)
        else:
            seed = self._grabcut_seed(payload, clicks, previous)
            mask = self._segment(payload, work_clicks, previous, seed)
        return self._prediction(mask, (height, width))

    def _round(self, embedding: Embedding, clicks: list[Click], new: int, previous: Any) -> Prediction:
        """One corrective round in one GrabCut (module docstring): ``previous`` (bool (H, W)) corrected by the last
        ``new`` of ``clicks`` (every click so far). Without a previous mask (or an empty one) it is
        :meth:`predict` of all the clicks."""
        payload = self._payload(embedding)
        height, width = embedding.image_shape
        work_shape = payload.image_bgr.shape[:2]
        if previous is not None:
            previous = self._previous_mask(previous, embedding.image_shape, work_shape)
        if previous is None or not previous.any():
            return self.predict(embedding, clicks, None)
        work_clicks = [
            _scaled_click(click, payload.scale, work_shape[1], work_shape[0], height, width)
            for click in clicks
        ]
        trimap, zones = self._correction_trimap(payload, previous, work_clicks, new)
        mask = self._grabcut(payload.image_bgr, trimap, self._grabcut_seed(payload, clicks, previous))
        count, labels = cv2.connectedComponents(mask.astype(np.uint8), connectivity=8)
        keep = np.zeros(count, bool)
        keep[np.unique(labels[mask & ~zones])] = True  # the previous mask's parts the round left alone
        for click in work_clicks:
            if click.is_positive:
                x, y = _pixel(click)
                keep[labels[y, x]] = True
        keep[0] = False
        mask = _fill_small_holes(keep[labels], work_clicks, self.max_hole_fraction)
        return self._prediction(mask, (height, width))

    def _correction_trimap(
        self, payload: _EmbeddedPayload, previous: np.ndarray, clicks: list[Click], new_clicks: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(GrabCut trimap, bool zones GrabCut may change) of a corrective round (module docstring, 1-3)."""
        work_h, work_w = previous.shape
        inside = _edge_distance(previous)
        outside = _edge_distance(~previous)
        factor, least, most = self.correct_zone
        largest = most * float(np.hypot(work_h, work_w))
        trimap = np.where(previous, _FGD, _BGD).astype(np.uint8)
        zones = np.zeros((work_h, work_w), bool)
        rows, cols = np.ogrid[0:work_h, 0:work_w]
        new = clicks[len(clicks) - new_clicks :]
        for click in new:
            x, y = _pixel(click)
            depth = float(inside[y, x] if previous[y, x] else outside[y, x])
            radius = min(max(factor * depth + self.click_radius_px, least), largest)
            zone = (cols - click.x) ** 2 + (rows - click.y) ** 2 <= radius**2
            zones |= zone
            trimap[zone] = np.where(previous[zone], _PR_FGD, _PR_BGD)
        for click in new:
            opposite = [other for other in clicks if other.is_positive != click.is_positive]
            distance = _colour_geodesic_distance(payload.lab, [click])
            cut = self.refine_geodesic_fraction * float(distance[np.isfinite(distance)].max())
            region = (distance <= cut) & zones & (previous != click.is_positive)
            if opposite:
                region &= distance < _colour_geodesic_distance(payload.lab, opposite)
            trimap[region] = _PR_FGD if click.is_positive else _PR_BGD
            if self.refine_hard_fraction > 0:
                trimap[region & (distance <= self.refine_hard_fraction * cut)] = (
                    _FGD if click.is_positive else _BGD
                )
        radius_px = max(1, round(self.click_radius_px))
        for click in clicks:
            cv2.circle(trimap, _pixel(click), radius_px, int(_FGD if click.is_positive else _BGD), -1)
        return trimap, zones

    # -- steps -----------------------------------------------------------------------------------

    def _grabcut_seed(
        self, payload: _EmbeddedPayload, clicks: Sequence[Click], previous: np.ndarray | None
    ) -> int:
        """The 31-bit seed of OpenCV's generator for this prediction (see the module docstring)."""
        digest = hashlib.blake2b(digest_size=8)
        digest.update(self.random_seed.to_bytes(8, "little", signed=True))
        digest.update(payload.fingerprint)
        digest.update(np.asarray([(c.x, c.y, float(c.is_positive)) for c in clicks], np.float64).tobytes())
        if previous is not None:
            digest.update(repr(previous.shape).encode())
            digest.update(np.packbits(previous).tobytes())
        return int.from_bytes(digest.digest(), "little") & 0x7FFFFFFF

    def _segment(
        self, payload: _EmbeddedPayload, clicks: list[Click], previous: np.ndarray | None, seed: int = 0
    ) -> np.ndarray:
        work_h, work_w = payload.image_bgr.shape[:2]
        radius = max(1, round(self.click_radius_px))
        if previous is not None and not previous.any():
            previous = None  # an empty previous mask starts from the first-click prior, as no mask does
        if previous is not None:
            trimap = np.where(previous, _PR_FGD, _PR_BGD).astype(np.uint8)
        else:
            trimap = self._first_click_prior(payload, clicks)
        for click in clicks:
            cv2.circle(trimap, _pixel(click), radius, int(_FGD if click.is_positive else _BGD), -1)

        if previous is not None:
            self._relabel_newest_click_region(payload, trimap, clicks)
            result = previous.copy()
            window = self._local_window(clicks[-1], work_h, work_w)
            result[window] = self._grabcut(payload.image_bgr[window], trimap[window], seed)
        else:
            result = self._grabcut(payload.image_bgr, trimap, seed)
        result = _keep_clicked_components(result, clicks)
        return _fill_small_holes(result, clicks, self.max_hole_fraction)

    def _grabcut(self, image_bgr: np.ndarray, trimap: np.ndarray, seed: int) -> np.ndarray:
        """Foreground of GrabCut started from ``trimap`` (modified in place); OpenCV's RNG seeded first."""
        is_fg = (trimap == _FGD) | (trimap == _PR_FGD)
        if is_fg.all() or not is_fg.any():
            return is_fg
        bgd_model = np.zeros((1, 65), np.float64)
        fgd_model = np.zeros((1, 65), np.float64)
        labels = np.ascontiguousarray(trimap)  # windows are views; GrabCut writes into a contiguous copy
        image_bgr = np.ascontiguousarray(image_bgr)
        cv2.setRNGSeed(seed)  # the generator is per thread: seed it in the thread that runs grabCut
        cv2.grabCut(
            image_bgr,
            labels,
            _UNUSED_RECT,
            bgd_model,
            fgd_model,
            self.grabcut_iterations,
            cv2.GC_INIT_WITH_MASK,
        )
        trimap[...] = labels
        return (labels == _FGD) | (labels == _PR_FGD)

    def _relabel_newest_click_region(
        self, payload: _EmbeddedPayload, trimap: np.ndarray, clicks: list[Click]
    ) -> None:
        """Give the newest click's colour-geodesic neighbourhood the click's label (as "probably").

        The neighbourhood is the set of pixels geodesically closer to the newest click than to any
        click of the other polarity, and closer than ``refine_geodesic_fraction`` of the largest
        distance. Without this, a negative click on a large wrongly-included region only removes
        its own disk, because GrabCut's foreground model has already learnt that region's colours.
        """
        newest = clicks[-1]
        opposite = [click for click in clicks[:-1] if click.is_positive != newest.is_positive]
        distance_new = _colour_geodesic_distance(payload.lab, [newest])
        finite = distance_new[np.isfinite(distance_new)]
        cut = self.refine_geodesic_fraction * float(finite.max())
        region = distance_new <= cut
        if opposite:
            region &= distance_new < _colour_geodesic_distance(payload.lab, opposite)
        hard = (trimap == _FGD) | (trimap == _BGD)
        trimap[region & ~hard] = _PR_FGD if newest.is_positive else _PR_BGD
        if self.refine_hard_fraction > 0:
            core = region & (distance_new <= self.refine_hard_fraction * cut)
            trimap[core & ~hard] = _FGD if newest.is_positive else _BGD

    def _first_click_prior(self, payload: _EmbeddedPayload, clicks: list[Click]) -> np.ndarray:
        """Trimap before any mask exists: geodesic neighbourhood of the positive clicks, border strip."""
        work_h, work_w = payload.image_bgr.shape[:2]
        trimap = np.full((work_h, work_w), _PR_BGD, np.uint8)
        seeds = [click for click in clicks if click.is_positive]
        distance = _colour_geodesic_distance(payload.lab, seeds)
        finite = distance[np.isfinite(distance)]
        cut = self.first_click_geodesic_fraction * float(finite.max()) if finite.size else 0.0
        trimap[distance <= cut] = _PR_FGD
        strip = max(1, round(self.border_strip_fraction * min(work_h, work_w)))
        border = np.zeros((work_h, work_w), bool)
        border[:strip, :] = border[-strip:, :] = True
        border[:, :strip] = border[:, -strip:] = True
        trimap[border] = _PR_BGD
        return trimap

    def _local_window(self, click: Click, work_h: int, work_w: int) -> tuple[slice, slice]:
        half = max(8, round(self.refine_radius_fraction * float(np.hypot(work_h, work_w))))
        x, y = _pixel(click)
        return slice(max(0, y - half), min(work_h, y + half + 1)), slice(
            max(0, x - half), min(work_w, x + half + 1)
        )

    def _previous_mask(
        self, previous_logits: Any, image_shape: tuple[int, int], work_shape: tuple[int, int]
    ) -> np.ndarray | None:
        if previous_logits is None:
            return None
        previous = np.asarray(previous_logits)
        if previous.shape != tuple(image_shape):
            raise SegmenterError(
                f"previous_logits has shape {previous.shape}, expected the image shape {tuple(image_shape)}: "
                "pass Prediction.logits of the previous click on the same image, or None at a trajectory start"
            )
        foreground = previous if previous.dtype == bool else previous > 0
        if foreground.shape == work_shape:
            return foreground.copy()
        resized = cv2.resize(
            foreground.astype(np.float32), (work_shape[1], work_shape[0]), interpolation=cv2.INTER_AREA
        )
        return resized > 0.5

    def _prediction(self, mask: np.ndarray, image_shape: tuple[int, int]) -> Prediction:
        signed = _signed_distance(mask)
        height, width = image_shape
        if signed.shape != (height, width):
            signed = cv2.resize(signed, (width, height), interpolation=cv2.INTER_LINEAR)
        logits = signed.astype(np.float32)
        probabilities = (1.0 / (1.0 + np.exp(-np.clip(logits, -30.0, 30.0)))).astype(np.float32)
        return Prediction(probabilities=probabilities, logits=logits)

    def _payload(self, embedding: Embedding) -> _EmbeddedPayload:
        if embedding.model_id != self.model_id or not isinstance(embedding.payload, _EmbeddedPayload):
            raise SegmenterError(
                f"embedding was made by {embedding.model_id!r}, not by this predictor ({self.model_id!r}): "
                "encode the image with the predictor that predicts"
            )
        return embedding.payload


# -- geometry helpers (module-private) ------------------------------------------------------------


def _scaled_click(click: Click, scale: float, work_w: int, work_h: int, height: int, width: int) -> Click:
    if not (np.isfinite(click.x) and np.isfinite(click.y)):
        raise SegmenterError(f"click {click} has a non-finite coordinate")
    if not (-0.5 <= click.x <= width - 0.5 + 1 and -0.5 <= click.y <= height - 0.5 + 1):
        raise SegmenterError(
            f"click {click} lies outside the {width}x{height} image: clicks are (x=column, y=row) pixels "
            "of the image given to encode()"
        )
    x = min(max((click.x + 0.5) * scale - 0.5, 0.0), work_w - 1.0)
    y = min(max((click.y + 0.5) * scale - 0.5, 0.0), work_h - 1.0)
    return Click(x=x, y=y, is_positive=click.is_positive)


def _pixel(click: Click) -> tuple[int, int]:
    return int(round(click.x)), int(round(click.y))


def _as_u8_view(mask: np.ndarray) -> np.ndarray:
    return mask.view(np.uint8)


def _colour_geodesic_distance(lab: np.ndarray, seeds: list[Click]) -> np.ndarray:
    """Geodesic distance (sum of Lab colour steps plus a small spatial term) from the seed pixels.

    Computed with a few raster sweeps of the two-pass chamfer scheme: approximate, fast, and good
    enough for a prior that GrabCut then corrects.
    """
    height, width = lab.shape[:2]
    distance = np.full((height, width), np.inf, np.float32)
    for seed in seeds:
        x, y = _pixel(seed)
        distance[y, x] = 0.0
    spatial = np.float32(1.0)
    # Colour differences to the 4 "previous" neighbours of the forward sweep (and mirrored backwards).
    diff_left = np.zeros((height, width), np.float32)
    diff_left[:, 1:] = np.linalg.norm(lab[:, 1:] - lab[:, :-1], axis=2)
    diff_up = np.zeros((height, width), np.float32)
    diff_up[1:, :] = np.linalg.norm(lab[1:, :] - lab[:-1, :], axis=2)
    diff_left += spatial
    diff_up += spatial
    for _ in range(2):
        # Row-vectorised sweeps: vertical passes are vectorised over columns, horizontal over rows.
        for row in range(1, height):
            np.minimum(distance[row], distance[row - 1] + diff_up[row], out=distance[row])
        for row in range(height - 2, -1, -1):
            np.minimum(distance[row], distance[row + 1] + diff_up[row + 1], out=distance[row])
        for col in range(1, width):
            np.minimum(distance[:, col], distance[:, col - 1] + diff_left[:, col], out=distance[:, col])
        for col in range(width - 2, -1, -1):
            np.minimum(distance[:, col], distance[:, col + 1] + diff_left[:, col + 1], out=distance[:, col])
    return distance


def _keep_clicked_components(mask: np.ndarray, clicks: list[Click]) -> np.ndarray:
    count, labels = cv2.connectedComponents(mask.astype(np.uint8), connectivity=8)
    if count <= 1:
        return mask
    keep = np.zeros(count, bool)
    for click in clicks:
        if click.is_positive:
            x, y = _pixel(click)
            keep[labels[y, x]] = True
    keep[0] = False
    return keep[labels]


def _fill_small_holes(mask: np.ndarray, clicks: list[Click], max_hole_fraction: float) -> np.ndarray:
    area = int(mask.sum())
    if area == 0 or max_hole_fraction <= 0:
        return mask
    count, labels, stats, _ = cv2.connectedComponentsWithStats((~mask).astype(np.uint8), connectivity=4)
    height, width = mask.shape
    fill = np.zeros(count, bool)
    for label in range(1, count):
        left, top, box_w, box_h, hole_area = stats[label]
        touches_border = left == 0 or top == 0 or left + box_w == width or top + box_h == height
        fill[label] = not touches_border and hole_area <= max_hole_fraction * area
    for click in clicks:
        if not click.is_positive:
            x, y = _pixel(click)
            fill[labels[y, x]] = False
    fill[0] = False
    return mask | fill[labels]


def _edge_distance(mask: np.ndarray) -> np.ndarray:
    """Distance (px) of each ``mask`` pixel to the nearest pixel outside it; the image edge does not count."""
    padded = np.pad(mask.astype(np.uint8), 1, constant_values=1)
    return cv2.distanceTransform(padded, cv2.DIST_L2, 3)[1:-1, 1:-1]


def _signed_distance(mask: np.ndarray) -> np.ndarray:
    """Signed Euclidean distance to the boundary: > 0 inside (≥ 0.5), < 0 outside (≤ -0.5)."""
    if not mask.any():
        return np.full(mask.shape, -30.0, np.float32)
    if mask.all():
        return np.full(mask.shape, 30.0, np.float32)
    inside = cv2.distanceTransform(mask.astype(np.uint8), cv2.DIST_L2, 3)
    outside = cv2.distanceTransform((~mask).astype(np.uint8), cv2.DIST_L2, 3)
    return np.where(mask, inside - 0.5, 0.5 - outside).astype(np.float32)
