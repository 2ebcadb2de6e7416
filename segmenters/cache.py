"""A byte-bounded LRU cache of image embeddings.

The key is (image sha256, model id, checkpoint hash): the same image encoded by another
architecture, configuration or checkpoint file is another entry. Each entry is charged
``Embedding.nbytes``; when the total would exceed ``max_bytes`` the least recently used entries are
evicted. An embedding larger than the whole budget is returned but not kept.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import cachetools
import numpy as np

from segmenters.base import Embedding, Predictor, SegmenterError
from segmenters.images import image_sha256 as compute_image_sha256

CacheKey = tuple[str, str, str]  # (image sha256, model id, checkpoint hash)


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0


class _CountingLRU(cachetools.LRUCache):
    """cachetools' LRU cache charged by ``Embedding.nbytes``, counting what it evicts into ``stats``."""

    def __init__(self, max_bytes: int, stats: CacheStats) -> None:
        super().__init__(maxsize=max_bytes, getsizeof=lambda embedding: int(embedding.nbytes))
        self._stats = stats

    def popitem(self):
        item = super().popitem()
        self._stats.evictions += 1
        return item


class EmbeddingCache:
    """LRU cache of :class:`Embedding` bounded by ``max_bytes`` (thread-safe)."""

    def __init__(self, max_bytes: int) -> None:
        """``max_bytes``: budget for the sum of ``Embedding.nbytes`` kept (bytes, >= 0)."""
        if max_bytes < 0:
            raise SegmenterError(f"EmbeddingCache max_bytes={max_bytes} must be >= 0 (bytes)")
        self.max_bytes = int(max_bytes)
        self.stats = CacheStats()
        self._entries = _CountingLRU(self.max_bytes, self.stats)
        self._lock = threading.Lock()  # cachetools' caches are not thread-safe

    @staticmethod
    def key(predictor: Predictor, image_sha256: str) -> CacheKey:
        return (image_sha256, predictor.model_id, predictor.checkpoint_hash)

    @property
    def nbytes(self) -> int:
        """Bytes currently charged (sum of ``Embedding.nbytes`` of the kept entries)."""
        return int(self._entries.currsize)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: CacheKey) -> bool:
        return key in self._entries

    def get_or_encode(
        self, predictor: Predictor, image: np.ndarray, image_sha256: str | None = None
    ) -> Embedding:
        """The cached embedding of ``image`` for ``predictor``, encoding it on a miss.

        ``image``: (H, W, 3) uint8 RGB. ``image_sha256``: hex digest identifying the image (e.g. the
        stored file's hash); None computes one from the pixels.
        """
        digest = image_sha256 if image_sha256 is not None else compute_image_sha256(image)
        key = self.key(predictor, digest)
        with self._lock:
            embedding = self._entries.get(key)  # a hit becomes the most recently used
            if embedding is not None:
                self.stats.hits += 1
                return embedding
            self.stats.misses += 1
        # Encode outside the lock: it is the slow part and other keys must stay readable meanwhile.
        embedding = predictor.encode(image)
        if tuple(embedding.image_shape) != tuple(image.shape[:2]):
            raise SegmenterError(
                f"{predictor.name} returned an embedding for shape {embedding.image_shape}, image is {image.shape[:2]}"
            )
        self.put(key, embedding)
        return embedding

    def put(self, key: CacheKey, embedding: Embedding) -> None:
        """Keep ``embedding`` under ``key`` (evicting LRU entries), unless it exceeds the budget."""
        size = int(embedding.nbytes)
        if size < 0:
            raise SegmenterError(f"embedding for {key} reports nbytes={size}; it must be >= 0")
        with self._lock:
            self._entries.pop(key, None)
            if size > self.max_bytes:
                return
            self._entries[key] = embedding  # evicts least recently used entries until it fits

    def clear(self) -> None:
        with self._lock:  # a new cache: emptying this one would count every entry as an eviction
            self._entries = _CountingLRU(self.max_bytes, self.stats)
