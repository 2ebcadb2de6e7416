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
  transform, so they share one entry) and a blake2b hash of the box's bytes. The clicker's
  transform of an error region and the DT map of the same region in the same round are one
  transform. Cached arrays are read-only.
"""

from __future__ import annotations

import hashlib
import threading

import cv2
import numpy as np
from scipy import ndimage

CACHE_SIZE = 4
OPENCV_MAX_SQUARED_DIAGONAL = 1 << 20  # d**2 < 2**20 keeps rint(d**2) exact after a 1-ulp sqrt error

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
    key = (
        mask.shape,
        box,
        None if inside else border,
        hashlib.blake2b(crop.tobytes(), digest_size=16).digest(),
    )
    for cached_key, value in _CACHE.entries:
        if cached_key == key:
            _CACHE.hits += 1
            return value, box
    _CACHE.misses += 1
    if inside or border:
        ring = np.zeros((y1 - y0 + 2, x1 - x0 + 2), dtype=np.uint8)
        ring[1:-1, 1:-1] = crop
        dist = exact_distance(ring)[1:-1, 1:-1]
    else:
        ry0, ry1, rx0, rx1 = max(y0 - 1, 0), min(y1 + 1, height), max(x0 - 1, 0), min(x1 + 1, width)
        ring = mask[ry0:ry1, rx0:rx1].astype(np.uint8)
        if ring.all():
            raise ValueError(
                f"box_distance(border=False): the mask covers the whole {height}x{width} image, so no pixel is "
                "outside it to measure from; use border=True or handle a full mask before calling."
            )
        dist = exact_distance(ring)[y0 - ry0 : y1 - ry0, x0 - rx0 : x1 - rx0]
    dist.flags.writeable = False
    _CACHE.entries.insert(0, (key, dist))
    del _CACHE.entries[CACHE_SIZE:]
    return dist, box


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
