"""Exact Euclidean distance transforms on a mask's bounding box, with a small cache (#15.6).

The clicker (RITM's deepest point) and the DT click model need, every round, the distance of each
pixel of an error region to the nearest pixel outside it. Three things make that cheap and exact:

* **Box crop.** Every pixel outside a mask's bounding box is outside the mask, so the box plus a
  1-px ring holds, for every mask pixel, a nearest outside pixel (clamping any outside pixel onto
  that ring only brings it closer). The transform of the ring-padded box equals the full-frame
  transform inside the box. ``border=True`` counts the image edge as a boundary (RITM's 1-px zero
  padding: the ring is zeros also beyond the image); ``border=False`` does not (the ring is cut at
  the image edge, as an unpadded full-frame transform sees it).
* **Exact values.** OpenCV's ``DIST_MASK_PRECISE`` (Felzenszwalb's algorithm) finds the squared
  distances, integers below 2^24 held exactly in float32, but its final square root is not
  correctly rounded: about 1.5e-4 of the pixels come out 1 ulp low or high, and which ones depends
  on the memory layout (a cropped or shifted image, or even another call, rounds differently). Here
  the squared distance is recovered as ``rint(d**2)`` (an ulp of d moves d**2 by far less than 0.5
  while d**2 < 2**20) and its IEEE square root taken: the correctly rounded distance, the same
  whatever the crop. Boxes whose diagonal could exceed that range (squared diagonal > 2**20) go
  to ``scipy.ndimage.distance_transform_edt`` (exact, slower).
  ``tests/benchmark/test_per_click_cost.py`` checks both against SciPy's full-frame transform.
* **Cache.** The last :data:`CACHE_SIZE` transforms of this thread are kept, keyed by the box, the
  image size, the border rule (when the ring lies inside the image both rules give the same
  transform, so they share one entry) and a blake2b hash of the box's packed bits. The clicker's
  transform of an error region and the DT map of the same region in the same round are one
  transform. Cached arrays are read-only.
* **One transform for both border rules.** A box touching the image edge has two transforms, but
  the padded one (``border=True``) is the unpadded one capped by each pixel's distance to the
  nearest pixel beyond the image edge, ``min(y + 1, H - y, x + 1, W - x)``, an integer: the padded
  transform's zero set is the unpadded one's plus the pixels beyond the edge, and the nearest of
  those lies straight across the edge. The square root of the smaller squared distance is the
  smaller correctly rounded root, so the capped values are the padded transform's, bit for bit
  (both are OpenCV-range transforms there; larger boxes are transformed directly).
* **Coarse bound.** :func:`coarse_distance_bound` bounds a mask's largest padded distance from
  the exact transform of its ``block_px`` x ``block_px`` blocks (a block is in the coarse mask if
  any of its pixels is), 1/16 of the pixels for 4-px blocks: the clicker skips the losing error
  region's full transform when that bound already decides RITM's comparison.
"""

from __future__ import annotations

import hashlib
import threading

import cv2
import numpy as np
from scipy import ndimage

CACHE_SIZE = 4
OPENCV_MAX_SQUARED_DIAGONAL = 1 << 20  # d**2 < 2**20 keeps rint(d**2) exact after a 1-ulp sqrt error
COARSE_BLOCK_PX = 4
BOUND_MARGIN = 1 + 1e-6  # > 1 float32 ulp: covers a double-rounded (SciPy) transform against an OpenCV one

Box = tuple[int, int, int, int]  # (y0, y1, x0, x1), exclusive ends


def mask_box(mask: np.ndarray) -> Box | None:
    """(y0, y1, x0, x1), exclusive ends: the bounding box of ``mask``; None when it is empty."""
    rows = np.flatnonzero(mask.any(axis=1))
    if rows.size == 0:
        return None
    cols = np.flatnonzero(mask.any(axis=0))
    return int(rows[0]), int(rows[-1]) + 1, int(cols[0]), int(cols[-1]) + 1


def exact_distance(mask: np.ndarray) -> np.ndarray:
    """Correctly rounded float32 distance of each nonzero pixel of ``mask`` to the nearest zero pixel.

    ``mask``: uint8 (h, w) with at least one zero pixel. Same values as
    ``scipy.ndimage.distance_transform_edt(mask).astype(np.float32)``.
    """
    height, width = mask.shape
    if height * height + width * width > OPENCV_MAX_SQUARED_DIAGONAL:
        return ndimage.distance_transform_edt(mask).astype(np.float32)
    dist = cv2.distanceTransform(mask, cv2.DIST_L2, cv2.DIST_MASK_PRECISE)
    # In float32: d**2 < 2**20 rounds with an error below 0.07 and an ulp of d moves it by below 0.25, so
    # rint gives the exact integer; IEEE sqrt of that integer is the correctly rounded distance.
    np.square(dist, out=dist)
    np.rint(dist, out=dist)
    np.sqrt(dist, out=dist)
    return dist


class _Cache(threading.local):
    def __init__(self) -> None:
        self.entries: list[tuple[tuple, np.ndarray]] = []
        self.hits = 0
        self.misses = 0


_CACHE = _Cache()


def clear_cache() -> None:
    """Forget this thread's cached transforms (and zero its hit/miss counts)."""
    _CACHE.entries.clear()
    _CACHE.hits = _CACHE.misses = 0


def cache_stats() -> tuple[int, int]:
    """(hits, misses) of this thread's transform cache since the last :func:`clear_cache`."""
    return _CACHE.hits, _CACHE.misses


def box_distance(mask: np.ndarray, *, border: bool, box: Box | None = None) -> tuple[np.ndarray, Box] | None:
    """(distance inside the bounding box, the box) of a bool (H, W) ``mask``; None when it is empty.

    The distance is float32 (y1 - y0, x1 - x0), read-only (it may be shared through the cache), zero
    off the mask and exactly the full-frame transform's values on it (see the module docstring for
    ``border``). With ``border=False`` the mask needs a pixel off it somewhere in the image. ``box``:
    the mask's :func:`mask_box` if the caller has it already.
    """
    if box is None:
        box = mask_box(mask)
    if box is None:
        return None
    y0, y1, x0, x1 = box
    height, width = mask.shape
    inside = y0 > 0 and x0 > 0 and y1 < height and x1 < width  # the 1-px ring lies in the image
    crop = mask[y0:y1, x0:x1]
    digest = hashlib.blake2b(np.packbits(crop).data, digest_size=16).digest()  # the box fixes the bit count
    key = (mask.shape, box, None if inside else border, digest)
    cached = _cached(key)
    if cached is not None:
        _CACHE.hits += 1
        return cached, box
    _CACHE.misses += 1
    if inside:
        dist = _padded_transform(crop)
    elif not border:
        dist = _unpadded_transform(mask, box)
    else:
        dist = _capped_transform(mask, box, unpadded_key=(mask.shape, box, False, digest))
    dist.flags.writeable = False
    _remember(key, dist)
    return dist, box


def _cached(key: tuple) -> np.ndarray | None:
    for cached_key, value in _CACHE.entries:
        if cached_key == key:
            return value
    return None


def _remember(key: tuple, dist: np.ndarray) -> None:
    _CACHE.entries.insert(0, (key, dist))
    del _CACHE.entries[CACHE_SIZE:]


def _padded_transform(crop: np.ndarray) -> np.ndarray:
    """The transform of a box with a zero 1-px ring around it (``border=True``, or a box inside the image)."""
    ring = np.zeros((crop.shape[0] + 2, crop.shape[1] + 2), dtype=np.uint8)
    ring[1:-1, 1:-1] = crop
    return exact_distance(ring)[1:-1, 1:-1]


def _unpadded_transform(mask: np.ndarray, box: Box) -> np.ndarray:
    """``border=False`` on a box touching the image edge: its ring is cut at the edge."""
    y0, y1, x0, x1 = box
    height, width = mask.shape
    ry0, ry1, rx0, rx1 = max(y0 - 1, 0), min(y1 + 1, height), max(x0 - 1, 0), min(x1 + 1, width)
    ring = mask[ry0:ry1, rx0:rx1].astype(np.uint8)
    if ring.all():
        raise ValueError(
            f"box_distance(border=False): the mask covers the whole {height}x{width} image, so no pixel is "
            "outside it to measure from; use border=True or handle a full mask before calling."
        )
    return exact_distance(ring)[y0 - ry0 : y1 - ry0, x0 - rx0 : x1 - rx0]


def _capped_transform(mask: np.ndarray, box: Box, *, unpadded_key: tuple) -> np.ndarray:
    """``border=True`` on a box touching the image edge: the unpadded transform (computed and cached
    here unless cached already) capped by the distance beyond the edge (module docstring)."""
    y0, y1, x0, x1 = box
    height, width = mask.shape
    crop = mask[y0:y1, x0:x1]
    direct = (y1 - y0 + 2) ** 2 + (x1 - x0 + 2) ** 2 > OPENCV_MAX_SQUARED_DIAGONAL
    unpadded = _cached(unpadded_key)
    if unpadded is None:
        ry0, ry1, rx0, rx1 = max(y0 - 1, 0), min(y1 + 1, height), max(x0 - 1, 0), min(x1 + 1, width)
        if direct or mask[ry0:ry1, rx0:rx1].all():  # SciPy's range, or no pixel off the mask in the image
            return _padded_transform(crop)
        unpadded = _unpadded_transform(mask, box)
        unpadded.flags.writeable = False
        _remember(unpadded_key, unpadded)
    elif direct:
        return _padded_transform(crop)
    rows = np.arange(y0, y1, dtype=np.float32)
    cols = np.arange(x0, x1, dtype=np.float32)
    beyond_rows = np.minimum(rows + 1, height - rows)[:, None]
    beyond_cols = np.minimum(cols + 1, width - cols)[None, :]
    return np.minimum(unpadded, np.minimum(beyond_rows, beyond_cols))


def full_distance(mask: np.ndarray, *, border: bool) -> np.ndarray:
    """The full-frame float32 (H, W) exact distance of a bool ``mask`` (zero off the mask)."""
    out = np.zeros(mask.shape, dtype=np.float32)
    found = box_distance(mask, border=border)
    if found is not None:
        dist, (y0, y1, x0, x1) = found
        out[y0:y1, x0:x1] = dist
    return out


def distance_upper_bound(mask: np.ndarray, box: Box | None) -> float:
    """An upper bound of ``box_distance(mask, border=True)``'s maximum, from the box and the pixel count.

    A pixel at distance d has every pixel nearer than d inside the mask: at most (min(h, w) + 1) / 2
    from the box's ring, and a (2k + 1)^2 square with k >= d / sqrt(2) - 1 inside, so
    d <= (sqrt(area) + 1) / sqrt(2). 0.0 for an empty mask.
    """
    if box is None:
        return 0.0
    y0, y1, x0, x1 = box
    by_box = (min(y1 - y0, x1 - x0) + 1) / 2
    by_area = (np.sqrt(np.count_nonzero(mask[y0:y1, x0:x1])) + 1) / np.sqrt(2) * (1 + 1e-6)
    return float(min(by_box, by_area))


def coarse_distance_bound(mask: np.ndarray, box: Box | None, *, block_px: int = COARSE_BLOCK_PX) -> float:
    """An upper bound of ``box_distance(mask, border=True)``'s maximum from a ``block_px``-times coarser grid.

    Blocks of ``block_px`` x ``block_px`` pixels from the box's corner; a block is in the coarse mask
    if any of its pixels is in ``mask``. A pixel p of block B and the pixel at the same place in the
    nearest block with no mask pixel lie ``block_px`` x (B's coarse distance) apart, and that pixel is
    off the mask, so p's distance is at most that. The coarse transform is exact and correctly
    rounded; :data:`BOUND_MARGIN` covers the last ulp. 0.0 for an empty mask.
    """
    if box is None:
        return 0.0
    return float(coarse_distance_map(mask, box, block_px=block_px).max()) * block_px * BOUND_MARGIN


def coarse_distance_map(mask: np.ndarray, box: Box, *, block_px: int = COARSE_BLOCK_PX) -> np.ndarray:
    """The exact transform of :func:`coarse_distance_bound`'s coarse mask, float32 (rows + 2, cols + 2).

    Block (i, j) covers the box's rows ``(i - 1) * block_px ...`` and columns ``(j - 1) * block_px ...``
    (a ring of empty blocks around the box). Every pixel of block (i, j) has a padded distance of at
    most ``block_px * map[i, j]`` (times :data:`BOUND_MARGIN` for the last ulp).
    """
    y0, y1, x0, x1 = box
    height, width = y1 - y0, x1 - x0
    rows, cols = -(-height // block_px) + 2, -(-width // block_px) + 2  # + a ring of empty blocks
    fine = np.zeros((rows * block_px, cols * block_px), dtype=np.uint8)
    fine[block_px : block_px + height, block_px : block_px + width] = mask[y0:y1, x0:x1]
    by_rows = fine[::block_px].copy()  # OR of each block's rows, then of its columns
    for dy in range(1, block_px):
        by_rows |= fine[dy::block_px]
    if block_px == 4:  # a block's 4 bytes in a row are one uint32: nonzero if any is
        coarse = (by_rows.view(np.uint32) != 0).view(np.uint8)
    else:
        coarse = by_rows[:, ::block_px].copy()
        for dx in range(1, block_px):
            coarse |= by_rows[:, dx::block_px]
    return exact_distance(coarse)


def chessboard_distance_bound(mask: np.ndarray, box: Box | None) -> float:
    """An upper bound of ``box_distance(mask, border=True)``'s maximum: sqrt(2) x the chessboard maximum.

    The pixel nearest to p in the chessboard metric (OpenCV's ``DIST_C`` with a 3x3 mask, exact
    integers) is off the mask and at most sqrt(2) x that distance away in L2. About a quarter of an
    exact transform's cost, and tight where the coarse bound is loose (masks of scattered small holes,
    whose every 4x4 block holds a mask pixel). 0.0 for an empty mask.
    """
    if box is None:
        return 0.0
    y0, y1, x0, x1 = box
    ring = np.zeros((y1 - y0 + 2, x1 - x0 + 2), dtype=np.uint8)
    ring[1:-1, 1:-1] = mask[y0:y1, x0:x1]
    largest = float(cv2.distanceTransform(ring, cv2.DIST_C, 3).max())
    return largest * float(np.sqrt(2.0)) * BOUND_MARGIN


WINDOW_MAX_FRACTION = 0.5
""":func:`windowed_maximum` gives up (None) when its window would exceed this fraction of the ring-padded box."""


def windowed_maximum(
    mask: np.ndarray,
    box: Box,
    not_clicked: np.ndarray,
    coarse: np.ndarray,
    target: float,
    *,
    block_px: int = COARSE_BLOCK_PX,
) -> float | None:
    """max of ``box_distance(mask, border=True) * not_clicked`` over the pixels that could reach ``target``.

    ``coarse``: :func:`coarse_distance_map` of ``mask`` (same ``block_px``). Candidates are the pixels
    of the blocks whose bound ``block_px * coarse * BOUND_MARGIN`` is at least ``target``; every other
    pixel's distance is below ``target``. A candidate p's nearest pixel off the (ring-padded) box lies
    within its bound, at most R, so the exact transform of the padded box's window (candidates' box
    grown by R + 1, clipped) has p's value exactly: the window holds that nearest pixel, and pixels
    outside a transformed image never count as off the mask. So ``max < target`` (``<= target``)
    holds for the whole mask iff it holds for the returned value. 0.0 when nothing is a candidate;
    None when the window exceeds :data:`WINDOW_MAX_FRACTION` of the padded box (not worth it).
    """
    y0, y1, x0, x1 = box
    height, width = y1 - y0, x1 - x0
    bounds = coarse.astype(np.float64) * (block_px * BOUND_MARGIN)
    candidate = bounds >= target
    rows = np.flatnonzero(candidate.any(axis=1))
    if rows.size == 0:
        return 0.0
    cols = np.flatnonzero(candidate.any(axis=0))
    reach = int(np.ceil(bounds[candidate].max())) + 1
    # the candidates' pixels in box coordinates (block i covers rows (i - 1) * block_px ...), clipped to the box
    r0, r1 = max((int(rows[0]) - 1) * block_px, 0), min(int(rows[-1]) * block_px, height)
    c0, c1 = max((int(cols[0]) - 1) * block_px, 0), min(int(cols[-1]) * block_px, width)
    # the window in ring-padded coordinates (box pixel (r, c) is padded pixel (r + 1, c + 1))
    a, b = max(r0 + 1 - reach, 0), min(r1 + 1 + reach, height + 2)
    c, d = max(c0 + 1 - reach, 0), min(c1 + 1 + reach, width + 2)
    if (b - a) * (d - c) > WINDOW_MAX_FRACTION * (height + 2) * (width + 2):
        return None
    window = np.zeros((b - a, d - c), dtype=np.uint8)  # the ring-padded box's window: zeros off the box
    wy0, wy1, wx0, wx1 = max(a, 1), min(b, height + 1), max(c, 1), min(d, width + 1)
    window[wy0 - a : wy1 - a, wx0 - c : wx1 - c] = mask[
        y0 + wy0 - 1 : y0 + wy1 - 1, x0 + wx0 - 1 : x0 + wx1 - 1
    ]
    if window.all():  # cannot happen while the bounds hold (a candidate's nearest pixel off the mask is here)
        return None
    dist = exact_distance(window)[r0 + 1 - a : r1 + 1 - a, c0 + 1 - c : c1 + 1 - c]
    pixels = np.repeat(np.repeat(candidate, block_px, axis=0), block_px, axis=1)
    keep = pixels[block_px + r0 : block_px + r1, block_px + c0 : block_px + c1]
    keep &= not_clicked[y0 + r0 : y0 + r1, x0 + c0 : x0 + c1]
    return float(np.max(dist, where=keep, initial=0.0))
