"""Binary masks on the wire: PNG and COCO RLE (both the ``counts`` list and the compressed string).

Django-free; the remote session encodes with it and the evaluation server decodes (and validates) with it.
COCO RLE runs go over the mask in column-major (Fortran) order and start with a run of zeros.

Why our own RLE codec beside pycocotools (which the web app's corrective exports use): this module is part of
the ``benchmark`` library, whose ``remote`` extra a researcher installs without the web app; pycocotools is a C
extension that would make every such install build or find a wheel for it, for forty lines of run lengths.
And the evaluation server decodes untrusted bodies with it: pycocotools refuses a bad string with one message
("Invalid RLE mask representation"), where ``decode_rle`` says what is wrong (truncated, a foreign character,
the pixels the runs cover against the size) for the researcher whose client sent it, and takes the run-length
list form as well.
tests/benchmark/test_maskcodec.py checks, on random masks (Hypothesis), that the strings and run lengths are
byte-identical to pycocotools' both ways.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, UnidentifiedImageError


class MaskFormatError(ValueError):
    """A submitted mask cannot be decoded or is not what was asked for; the message says why."""


def encode_png(mask: np.ndarray) -> bytes:
    """bool (H, W) -> 8-bit grey PNG with 0 / 255."""
    buffer = io.BytesIO()
    Image.fromarray(np.where(np.asarray(mask, dtype=bool), 255, 0).astype(np.uint8), mode="L").save(
        buffer, format="PNG", compress_level=1
    )
    return buffer.getvalue()


def decode_png(data: bytes, *, shape: tuple[int, int], max_pixels: int | None = None) -> np.ndarray:
    """PNG bytes -> bool (H, W); it must be one channel (or RGB/RGBA grey) holding only 0 and 255 (or 0/1)."""
    try:
        picture = Image.open(io.BytesIO(data))
        width, height = picture.size
        if max_pixels is not None and width * height > max_pixels:
            raise MaskFormatError(f"mask_png is {width}x{height}, more pixels than the limit {max_pixels}.")
        if picture.format != "PNG":
            raise MaskFormatError(
                f"mask_png is a {picture.format} file, not a PNG; send an 8-bit PNG of 0/255."
            )
        picture.load()
    except MaskFormatError:
        raise
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise MaskFormatError(
            f"mask_png is not a readable PNG ({type(exc).__name__}); send an 8-bit PNG of 0/255."
        ) from None
    if (height, width) != tuple(shape):
        raise MaskFormatError(
            f"mask_png is {width}x{height} (W x H); this sample's mask must be {shape[1]}x{shape[0]}."
        )
    array = np.asarray(picture)
    if array.ndim == 3:
        if not all(np.array_equal(array[..., 0], array[..., c]) for c in range(1, min(array.shape[2], 3))):
            raise MaskFormatError(
                "mask_png has colour pixels; send a grey mask of 0 (background) and 255 (object)."
            )
        array = array[..., 0]
    if array.dtype != np.uint8:  # 16-bit or 1-bit PNGs: the general (slower) route
        present = set(np.unique(array).tolist())
    else:  # a histogram is much cheaper than a sort for the usual 8-bit mask
        present = set(np.flatnonzero(np.bincount(array.ravel(), minlength=256)).tolist())
    if not present <= {0, 255} and not present <= {0, 1}:
        raise MaskFormatError(
            f"mask_png is not binary: it holds values {sorted(present)[:6]}; threshold it to 0 and 255 first."
        )
    return array > 0


def rle_counts(mask: np.ndarray) -> list[int]:
    """bool (H, W) -> COCO RLE run lengths (column-major, starting with zeros)."""
    flat = np.asarray(mask, dtype=bool).ravel(order="F").astype(np.int8)
    changes = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate([[0], changes, [flat.size]])
    counts = np.diff(bounds).tolist()
    if flat.size and flat[0]:
        counts = [0, *counts]
    return [int(c) for c in counts]


def counts_to_string(counts: list[int]) -> str:
    """COCO's compressed RLE string (``rleToString``)."""
    out = []
    for i, value in enumerate(counts):
        x = value - counts[i - 2] if i > 2 else value
        more = True
        while more:
            c = x & 0x1F
            x >>= 5
            more = (x != -1) if (c & 0x10) else (x != 0)
            if more:
                c |= 0x20
            out.append(chr(c + 48))
    return "".join(out)


def string_to_counts(text: str) -> list[int]:
    """Inverse of :func:`counts_to_string` (``rleFrString``); raises MaskFormatError on garbage."""
    counts: list[int] = []
    p = 0
    while p < len(text):
        x = k = 0
        more = True
        while more:
            if p >= len(text):
                raise MaskFormatError("mask_rle.counts ends in the middle of a number; it is truncated.")
            c = ord(text[p]) - 48
            if not 0 <= c < 64:
                raise MaskFormatError(
                    f"mask_rle.counts holds the character {text[p]!r}, not a COCO RLE string."
                )
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            p += 1
            k += 1
            if k > 8:
                raise MaskFormatError("mask_rle.counts holds a run longer than any image; it is corrupt.")
            if not more and (c & 0x10):
                x |= -1 << (5 * k)
        if len(counts) > 2:
            x += counts[-2]
        counts.append(x)
    return counts


def encode_rle(mask: np.ndarray, *, compressed: bool = True) -> dict:
    """bool (H, W) -> ``{"size": [H, W], "counts": str | list[int]}``."""
    counts = rle_counts(mask)
    height, width = np.asarray(mask).shape
    return {"size": [int(height), int(width)], "counts": counts_to_string(counts) if compressed else counts}


def decode_rle(rle: object, *, shape: tuple[int, int]) -> np.ndarray:
    """COCO RLE dict -> bool (H, W), checked against ``shape``."""
    if not isinstance(rle, dict) or "size" not in rle or "counts" not in rle:
        raise MaskFormatError('mask_rle must be an object {"size": [H, W], "counts": "..." or [..]}.')
    size = rle["size"]
    if not (
        isinstance(size, list)
        and len(size) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in size)
    ):
        raise MaskFormatError(f"mask_rle.size must be [H, W] (two integers), got {size!r}.")
    if tuple(size) != tuple(shape):
        raise MaskFormatError(
            f"mask_rle.size is {size} ([H, W]); this sample's mask must be [{shape[0]}, {shape[1]}]."
        )
    raw = rle["counts"]
    if isinstance(raw, str):
        counts = string_to_counts(raw)
    elif isinstance(raw, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in raw):
        counts = list(raw)
    else:
        raise MaskFormatError("mask_rle.counts must be a COCO RLE string or a list of integers.")
    total = shape[0] * shape[1]
    if any(c < 0 for c in counts):
        raise MaskFormatError("mask_rle.counts holds a negative run length; it is corrupt.")
    if sum(counts) != total:
        raise MaskFormatError(
            f"mask_rle.counts covers {sum(counts)} pixels; a {shape[1]}x{shape[0]} mask has {total}."
        )
    values = np.zeros(len(counts), dtype=bool)
    values[1::2] = True
    flat = np.repeat(values, counts)
    return flat.reshape((shape[1], shape[0])).T.copy()
