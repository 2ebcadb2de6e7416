"""benchmark.statecodec: a method's logits survive the trip to the evaluation server bit for bit, without pickle."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmark.statecodec import StateCodecError, decode_state, encode_state
from segmenters.isegm import IsegmState


def test_every_kind_of_logits_the_segmenters_return_comes_back_bit_for_bit():
    rng = np.random.default_rng(3)
    embedded = rng.normal(size=(321, 481)).astype(np.float32)  # embedded: full-size signed distances
    sam = rng.normal(size=(1, 1, 32, 32)).astype(np.float32)  # SAM: low-res logits
    ritm = IsegmState(probabilities=rng.random((40, 60), dtype=np.float32), object_box=(1, 30, 2, 50))
    value = {
        "embedded": embedded,
        "sam": sam,
        "ritm": ritm,
        "mask": embedded > 0,
        "n": [np.float32(0.5), None, float("nan")],
    }
    back = decode_state(encode_state(value))
    assert back["embedded"].tobytes() == embedded.tobytes() and back["embedded"].dtype == np.float32
    assert back["sam"].shape == (1, 1, 32, 32) and back["sam"].tobytes() == sam.tobytes()
    assert isinstance(back["ritm"], IsegmState) and back["ritm"].object_box == (1, 30, 2, 50)
    assert np.array_equal(back["ritm"].probabilities, ritm.probabilities) and back["mask"].dtype == bool
    assert back["n"][0] == np.float32(0.5) and back["n"][1] is None and np.isnan(back["n"][2])
    assert back["embedded"].flags.writeable
    tensor = decode_state(encode_state(torch.arange(6, dtype=torch.float32).reshape(2, 3)))
    assert isinstance(tensor, np.ndarray) and tensor.tolist() == [[0, 1, 2], [3, 4, 5]]
    from segmenters.base import Click
    from segmenters.registry import get_predictor
    from tests.segmenters.conftest import square_scene

    image, _ = square_scene(240, 320)
    predictor = get_predictor("embedded", work_long_side_px=96, grabcut_iterations=1)
    logits = predictor.predict(predictor.encode(image), [Click(100, 120)]).logits  # full-size float32
    encoded = encode_state(logits)
    assert len(encoded) < logits.nbytes / 2, (len(encoded), logits.nbytes)  # the byte shuffle lets zlib work
    assert decode_state(encoded).tobytes() == logits.tobytes()


def test_what_cannot_travel_is_named_and_foreign_bytes_are_refused():
    with pytest.raises(StateCodecError, match="logits\\['x'\\] is a builtins.object"):
        encode_state({"x": object()})
    with pytest.raises(StateCodecError, match="dtype object"):
        encode_state(np.array([object()]))
    with pytest.raises(StateCodecError, match="wrong magic"):
        decode_state(b"\x80\x04pickle")
    with pytest.raises(StateCodecError, match="damaged"):
        decode_state(encode_state(np.zeros(100))[:-5])
    forged = encode_state(IsegmState(probabilities=np.zeros((2, 2), np.float32), object_box=None))
    with pytest.raises(StateCodecError, match="not a dataclass of a module this process imported"):
        decode_state(_renamed(forged, "segmenters.isegm:IsegmState", "never_imported_module:IsegmState"))
    with pytest.raises(StateCodecError, match="not a dataclass"):
        decode_state(_renamed(forged, "segmenters.isegm:IsegmState", "os:system"))


def _renamed(data: bytes, old: str, new: str) -> bytes:
    """``data`` with the dataclass path ``old`` in its header replaced by ``new`` (a forged server answer)."""
    import struct
    import zlib

    from benchmark.statecodec import MAGIC

    raw = zlib.decompress(data[len(MAGIC) :])
    (length,) = struct.unpack_from("<I", raw)
    header = raw[4 : 4 + length].replace(old.encode(), new.encode())
    return MAGIC + zlib.compress(struct.pack("<I", len(header)) + header + raw[4 + length :])
