"""The retrieval edge as the pipeline sees it: an index, its embedder and the chunking settings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from proxy.documents.model import ParsedDocument
from proxy.retrieval.chunking import Chunk, chunk_document
from proxy.retrieval.embeddings import Embedder
from proxy.retrieval.index import Hit, VectorIndex


@dataclass
class Retriever:
    """Indexes documents once and finds each one's passages closest to a query."""

    index: VectorIndex
    embedder: Embedder
    chunk_tokens: int
    chunk_overlap: int
    count_tokens: Callable[[str], int]

    def chunks_of(self, document: ParsedDocument) -> Callable[[], list[Chunk]]:
        return lambda: chunk_document(
            document,
            chunk_tokens=self.chunk_tokens,
            overlap=self.chunk_overlap,
            count_tokens=self.count_tokens,
        )

    async def ensure_indexed(self, document: ParsedDocument) -> bool:
        return await self.index.ensure_indexed(document, self.chunks_of(document))

    async def search(
        self, documents: list[ParsedDocument], query: str, limit: int
    ) -> list[list[Hit]]:
        """Each document's own ranked passages for the query (one query embedding for all)."""
        embedding = await self.embedder.embed_query(query)
        return [await self.index.search(doc.sha256, embedding, limit) for doc in documents]

    async def close(self) -> None:
        await self.index.close()
        close = getattr(self.embedder, "close", None)
        if close is not None:
            await close()
