"""One embedder's space: its vectors of documents' passages, and its cosines on a common scale."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from proxy.retrieval.embeddings import Embedder
from proxy.retrieval.index import VectorIndex
from proxy.retrieval.indexing import Indexer

Scorer = Callable[[list[float]], dict[int, float]]
"""Passages' cosines (by index) for a query vector."""


@dataclass
class Space:
    """One embedder's vectors: the index holding them, the indexer making them, what they were
    made with, and how its cosines read on the configured embedder's scale."""

    embedder: Embedder
    index: VectorIndex
    indexer: Indexer
    settings: str
    scale: Callable[[float], float] | None = None

    def on_scale(self, cosines: Scorer) -> Scorer:
        """The scorer's cosines read as the configured embedder's (its own: unchanged)."""
        scale = self.scale
        if scale is None:
            return cosines
        return lambda vector: {i: scale(c) for i, c in cosines(vector).items()}

    async def embedded(self, text: str, cache: dict[tuple[str, str], list[float]]) -> list[float]:
        # Once per text and embedder for all of a search's documents.
        key = (self.embedder.name, text)
        if key not in cache:
            cache[key] = await self.embedder.embed_query(text)
        return cache[key]
