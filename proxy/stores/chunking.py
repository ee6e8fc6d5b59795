"""A file's chunking strategy on the retriever's per-document index: other passage sizes are
another document to the index, keyed by the content's sha256 and the sizes."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import TYPE_CHECKING

from proxy.documents.model import ParsedDocument
from proxy.stores.records import Chunking

if TYPE_CHECKING:
    from proxy.retrieval.retriever import Retriever


def index_key(sha256: str, sizes: tuple[int, int], default: tuple[int, int]) -> str:
    """The key the index knows the file's passages by: the content's sha256 for the proxy's own
    sizes (shared with chat attachments of the same bytes), a digest of sha256 and the sizes
    for any other, so that passages, vectors and leases of two sizes never mix."""
    if sizes == default:
        return sha256
    tokens, overlap = sizes
    return hashlib.sha256(f"{sha256}:static:{tokens}:{overlap}".encode()).hexdigest()


def keyed(document: ParsedDocument, key: str) -> ParsedDocument:
    return document if document.sha256 == key else dataclasses.replace(document, sha256=key)


def reference(name: str, key: str, kind: str) -> ParsedDocument:
    """A document indexed before, by reference only: its passages are read, not made."""
    return ParsedDocument(name=name, sha256=key, kind=kind, library="", pages=())


class Variants:
    """The retriever for each passage size a store asks for (the configured one is the
    retriever itself); all share one index, embedder and set of leases."""

    def __init__(self, base: Retriever) -> None:
        self.base = base
        self._made: dict[tuple[int, int], Retriever] = {}

    @property
    def default(self) -> tuple[int, int]:
        return self.base.chunk_tokens, self.base.chunk_overlap

    def sizes(self, chunking: Chunking) -> tuple[int, int]:
        return chunking.sizes(*self.default)

    def key(self, sha256: str, chunking: Chunking) -> str:
        return index_key(sha256, self.sizes(chunking), self.default)

    def for_chunking(self, chunking: Chunking) -> Retriever:
        sizes = self.sizes(chunking)
        if sizes == self.default:
            return self.base
        made = self._made.get(sizes)
        if made is None:
            made = self._made[sizes] = self.base.with_chunking(*sizes)
        return made

    async def close(self) -> None:
        """Stop the variants' background work (the base retriever is closed by its owner)."""
        for retriever in self._made.values():
            await retriever.close_indexing()
        self._made.clear()
