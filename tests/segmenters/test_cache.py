"""EmbeddingCache: byte bound with LRU eviction, key with checkpoint hash, hits skip encode."""

from __future__ import annotations

import numpy as np
import pytest

from segmenters.base import Embedding, Prediction, Predictor, SegmenterError
from segmenters.cache import EmbeddingCache
from segmenters.registry import get_predictor

from .conftest import square_scene


class CountingPredictor(Predictor):
    """A stand-in predictor (our interface, not our code) that counts encode calls."""

    name = "counting"

    def __init__(self, *, nbytes: int = 100, checkpoint_hash: str = "", model_id: str = "counting") -> None:
        self.encode_calls = 0
        self._nbytes = nbytes
        self._checkpoint_hash = checkpoint_hash
        self._model_id = model_id

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def checkpoint_hash(self) -> str:
        return self._checkpoint_hash

    def encode(self, image):
        self.encode_calls += 1
        return Embedding(
            model_id=self.model_id, image_shape=image.shape[:2], payload=None, nbytes=self._nbytes
        )

    def predict(self, embedding, clicks, previous_logits=None):
        return Prediction(probabilities=np.zeros(embedding.image_shape, np.float32))


IMAGE = np.zeros((4, 5, 3), np.uint8)


def test_hit_returns_the_same_embedding_without_encoding():
    cache = EmbeddingCache(max_bytes=1000)
    predictor = CountingPredictor()
    first = cache.get_or_encode(predictor, IMAGE, "a" * 64)
    second = cache.get_or_encode(predictor, IMAGE, "a" * 64)
    assert second is first
    assert predictor.encode_calls == 1
    assert (cache.stats.hits, cache.stats.misses) == (1, 1)


def test_byte_bound_evicts_the_least_recently_used():
    cache = EmbeddingCache(max_bytes=250)
    predictor = CountingPredictor(nbytes=100)
    cache.get_or_encode(predictor, IMAGE, "a")
    cache.get_or_encode(predictor, IMAGE, "b")
    cache.get_or_encode(predictor, IMAGE, "a")  # a is now the most recently used
    cache.get_or_encode(predictor, IMAGE, "c")  # 300 > 250: evicts b
    assert cache.nbytes == 200
    assert EmbeddingCache.key(predictor, "a") in cache
    assert EmbeddingCache.key(predictor, "b") not in cache
    assert EmbeddingCache.key(predictor, "c") in cache
    assert cache.stats.evictions == 1
    calls = predictor.encode_calls
    cache.get_or_encode(predictor, IMAGE, "b")
    assert predictor.encode_calls == calls + 1


def test_embedding_larger_than_the_budget_is_returned_but_not_kept():
    cache = EmbeddingCache(max_bytes=50)
    predictor = CountingPredictor(nbytes=100)
    embedding = cache.get_or_encode(predictor, IMAGE, "a")
    assert embedding.nbytes == 100
    assert len(cache) == 0 and cache.nbytes == 0


def test_key_includes_the_checkpoint_hash_and_model_id():
    cache = EmbeddingCache(max_bytes=10_000)
    one = CountingPredictor(checkpoint_hash="1" * 64)
    two = CountingPredictor(checkpoint_hash="2" * 64)
    other_model = CountingPredictor(checkpoint_hash="1" * 64, model_id="other")
    for predictor in (one, two, other_model):
        cache.get_or_encode(predictor, IMAGE, "a")
        assert predictor.encode_calls == 1
    assert len(cache) == 3


def test_real_checkpoints_with_the_same_architecture_get_separate_entries(
    tiny_sam_checkpoint, other_tiny_sam_checkpoint
):
    from .conftest import TINY_SAM

    image, _ = square_scene()
    one = get_predictor("sam", checkpoint=tiny_sam_checkpoint, architecture=TINY_SAM, device="cpu")
    two = get_predictor("sam", checkpoint=other_tiny_sam_checkpoint, architecture=TINY_SAM, device="cpu")
    assert one.model_id == two.model_id and one.checkpoint_hash != two.checkpoint_hash
    cache = EmbeddingCache(max_bytes=10**7)
    first = cache.get_or_encode(one, image, None)
    second = cache.get_or_encode(two, image, None)
    assert first is not second and len(cache) == 2
    assert cache.get_or_encode(one, image, None) is first


def test_sha256_is_computed_from_pixels_when_not_given():
    cache = EmbeddingCache(max_bytes=10**7)
    predictor = get_predictor("embedded")
    image, _ = square_scene()
    first = cache.get_or_encode(predictor, image, None)
    assert cache.get_or_encode(predictor, image.copy(), None) is first
    changed = image.copy()
    changed[0, 0, 0] ^= 1
    assert cache.get_or_encode(predictor, changed, None) is not first


def test_negative_budget_is_rejected():
    with pytest.raises(SegmenterError, match="max_bytes=-1"):
        EmbeddingCache(max_bytes=-1)
