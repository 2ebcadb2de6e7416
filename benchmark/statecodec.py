"""A method's ``previous_logits`` on the wire: exact, without pickle.

The remote session sends what a prediction's ``logits`` hold with each submission, and the evaluation server
keeps the last accepted one, so a run resumed in another process passes the very same ``previous_logits`` to
the method (``benchmark/remote.py``). The server stores the bytes and never decodes them.

What can be encoded: None, bool, int, float, str, lists, tuples, dicts with string keys, NumPy arrays and
scalars of a numeric or bool dtype, torch tensors (decoded as NumPy arrays: every segmenter here takes either),
and dataclass instances (e.g. ``segmenters.isegm.IsegmState``) whose fields are encodable. Decoding rebuilds
a dataclass only if its class belongs to a module this process has already imported: bytes from the server
never make it import anything or run code it did not load itself.

Layout: ``MAGIC``, then zlib (level 1) of a 4-byte little-endian header length, the JSON header (the tree, with
arrays replaced by their index, dtype and shape) and each array's bytes *byte-shuffled* (the k-th byte of every
element together), which lets zlib find the runs in float data: 3-5x smaller than raw float32 logits, and
faster to compress than unshuffled.
"""

from __future__ import annotations

import dataclasses
import json
import math
import struct
import sys
import zlib
from typing import Any

import numpy as np

MAGIC = b"CLKLOGITS1\n"


class StateCodecError(ValueError):
    """Logits that cannot be encoded, or bytes that are not an encoding of them; the message says which."""


def _shuffle(array: np.ndarray) -> bytes:
    raw = np.ascontiguousarray(array).view(np.uint8).reshape(-1, array.dtype.itemsize)
    return np.ascontiguousarray(raw.T).tobytes()


def _unshuffle(data: bytes, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    count = math.prod(shape)
    planes = np.frombuffer(data, dtype=np.uint8).reshape(dtype.itemsize, count)
    return np.ascontiguousarray(planes.T).view(dtype).reshape(shape).copy()


def _to_array(value: Any) -> np.ndarray | None:
    if isinstance(value, np.ndarray | np.generic):
        return np.asarray(value)
    module = type(value).__module__
    if module.startswith("torch") and hasattr(value, "detach"):  # a tensor: no torch import needed here
        return value.detach().cpu().numpy()
    return None


def encode_state(value: Any) -> bytes:
    """``value`` (see the module docstring) -> bytes; StateCodecError names what cannot be sent."""
    arrays: list[np.ndarray] = []

    def tree(item: Any, where: str) -> Any:
        if item is None or isinstance(item, bool | int | str):
            return item
        if isinstance(item, float):
            return item if math.isfinite(item) else {"float": repr(item)}
        array = _to_array(item)
        if array is not None:
            if array.dtype.kind not in "biuf":
                raise StateCodecError(
                    f"logits{where} is an array of dtype {array.dtype}; send numbers or bools."
                )
            arrays.append(array)
            return {"array": len(arrays) - 1, "dtype": array.dtype.str, "shape": list(array.shape),
                    "scalar": isinstance(item, np.generic)}  # fmt: skip
        if isinstance(item, list | tuple):
            kind = "tuple" if isinstance(item, tuple) else "list"
            return {kind: [tree(v, f"{where}[{i}]") for i, v in enumerate(item)]}
        if isinstance(item, dict):
            if not all(isinstance(k, str) for k in item):
                raise StateCodecError(f"logits{where} is a dict with non-string keys; use string keys.")
            return {"dict": {k: tree(v, f"{where}[{k!r}]") for k, v in item.items()}}
        if dataclasses.is_dataclass(item) and not isinstance(item, type):
            fields = {
                f.name: tree(getattr(item, f.name), f"{where}.{f.name}") for f in dataclasses.fields(item)
            }
            return {"dataclass": f"{type(item).__module__}:{type(item).__qualname__}", "fields": fields}
        raise StateCodecError(
            f"logits{where} is a {type(item).__module__}.{type(item).__qualname__}, which cannot be sent to the "
            "evaluation server: return NumPy arrays (or tuples, dicts, dataclasses of them) as Prediction.logits."
        )

    header = json.dumps({"tree": tree(value, ""), "arrays": len(arrays)}, separators=(",", ":")).encode()
    body = zlib.compressobj(level=1)
    parts = [body.compress(struct.pack("<I", len(header)) + header)]
    parts += [body.compress(_shuffle(array)) for array in arrays]
    parts.append(body.flush())
    return MAGIC + b"".join(parts)


def _dataclass(path: str, fields: dict) -> Any:
    module_name, _, qualname = path.partition(":")
    module = sys.modules.get(module_name)  # only what this process imported itself
    target: Any = module
    for part in qualname.split("."):
        target = getattr(target, part, None)
    if module is None or not (isinstance(target, type) and dataclasses.is_dataclass(target)):
        raise StateCodecError(
            f"the logits hold a {path} object, which is not a dataclass of a module this process imported; "
            "import the method's module before resuming."
        )
    return target(**fields)


class _Arrays:
    """The array bytes after the header, taken in the order the encoder wrote them."""

    def __init__(self, raw: bytes, offset: int) -> None:
        self.raw, self.offset, self.count = raw, offset, 0

    def take(self, item: dict) -> Any:
        dtype, shape = np.dtype(item["dtype"]), tuple(int(n) for n in item["shape"])
        size = dtype.itemsize * math.prod(shape)
        if self.offset + size > len(self.raw) or dtype.kind not in "biuf":
            raise StateCodecError("the stored logits are damaged (an array runs past the end).")
        array = _unshuffle(self.raw[self.offset : self.offset + size], dtype, shape)
        self.offset += size
        self.count += 1
        return array[()] if item.get("scalar") else array


def _build(item: Any, arrays: _Arrays) -> Any:
    if not isinstance(item, dict):
        return item
    if "float" in item:
        return float(item["float"])
    if "array" in item:
        return arrays.take(item)
    if "list" in item:
        return [_build(v, arrays) for v in item["list"]]
    if "tuple" in item:
        return tuple(_build(v, arrays) for v in item["tuple"])
    if "dict" in item:
        return {k: _build(v, arrays) for k, v in item["dict"].items()}
    if "dataclass" in item:
        return _dataclass(item["dataclass"], {k: _build(v, arrays) for k, v in item["fields"].items()})
    raise StateCodecError(f"the stored logits hold an unknown entry {sorted(item)[:3]}.")


def decode_state(data: bytes) -> Any:
    """The value :func:`encode_state` encoded; StateCodecError when ``data`` is not such an encoding."""
    if not data.startswith(MAGIC):
        raise StateCodecError("the stored logits are not in this client's format (wrong magic bytes).")
    try:
        raw = zlib.decompress(data[len(MAGIC) :])
        (length,) = struct.unpack_from("<I", raw)
        header = json.loads(raw[4 : 4 + length])
    except (zlib.error, struct.error, ValueError) as exc:
        raise StateCodecError(f"the stored logits are damaged ({type(exc).__name__}).") from None
    arrays = _Arrays(raw, 4 + length)
    value = _build(header["tree"], arrays)
    if arrays.count != header.get("arrays") or arrays.offset != len(raw):
        raise StateCodecError("the stored logits are damaged (array count or length differs).")
    return value
