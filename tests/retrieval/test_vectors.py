"""In-memory document vectors: exact cosine ranking and a cache bounded in bytes."""

from __future__ import annotations

import numpy as np

from proxy.retrieval.vectors import DocumentVectors, VectorCache


def test_top_ranks_by_cosine_and_stops_at_the_limit() -> None:
    vectors = DocumentVectors.build(["a", "b", "c"], [[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    assert [i for i, _ in vectors.top([3.0, 0.1], 2)] == ["a", "c"]
    ranked = vectors.top([0.0, 1.0], 10)
    assert [i for i, _ in ranked] == ["b", "c", "a"]
    assert [round(score, 4) for _, score in ranked] == [1.0, 0.7071, 0.0]
    assert DocumentVectors([], np.zeros((0, 0), dtype=np.float32)).top([1.0], 3) == []


def test_the_cache_drops_the_least_recently_used_beyond_its_size() -> None:
    def entry() -> DocumentVectors:
        return DocumentVectors.build(["x"], [[0.5] * 256])  # 1 KiB

    cache = VectorCache(max_bytes=2 * entry().nbytes + 100)  # two fit, not three
    cache.put("one", entry())
    cache.put("two", entry())
    assert cache.get("one") is not None  # now the most recently used
    cache.put("three", entry())
    assert cache.get("two") is None
    assert cache.get("one") is not None and cache.get("three") is not None
    cache.put("huge", DocumentVectors.build(["y"], [[0.5] * 1024]))
    assert cache.get("huge") is None and cache.get("one") is not None


def test_the_cache_counts_the_ids_too() -> None:
    """Short vectors with their ids: the ids take half as much as the matrix, and count."""
    ids = [f"{'a' * 64}:{i}" for i in range(100)]
    entry = DocumentVectors.build(ids, [[0.5] * 64] * 100)
    assert entry.matrix.nbytes == 25_600
    assert entry.nbytes > 1.4 * entry.matrix.nbytes
    cache = VectorCache(max_bytes=2 * entry.matrix.nbytes + 1000)  # two, by the matrix alone
    cache.put("one", entry)
    cache.put("two", DocumentVectors.build(ids, [[0.5] * 64] * 100))
    assert cache.get("one") is None and cache.get("two") is not None  # only one fits
