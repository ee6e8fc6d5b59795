"""A passage found for a query, with every score that placed it."""

from __future__ import annotations

from dataclasses import dataclass

from proxy.retrieval.chunking import Chunk


@dataclass(frozen=True)
class Scored:
    """A passage found for a query, with every score that placed it.

    `dense` is the cosine affinity the threshold applies to (every candidate gets one);
    `lexical` its BM25 score (None: no query term in it); `fused` the reciprocal-rank-fusion
    score of the hybrid ranking; `rerank` the reranker's relevance score when one is configured.
    """

    chunk: Chunk
    dense: float
    lexical: float | None = None
    fused: float | None = None
    rerank: float | None = None
    by_meaning: bool = True
    """False for a document in a language the embedder does not read: ranked by its words
    alone, its cosine means nothing and no threshold applies to it."""
    multilingual: bool = False
    """True when its cosine is the multilingual embedder's (a document in a language the
    embedder does not keep: `Retriever.own_documents`), put on the embedder's scale."""
    overview: bool = False
    """True for a passage given because the question is about the document as a whole (its
    opening, its summary or conclusion): chosen by where it sits, held to no threshold."""
    place: bool = False
    """True for a passage of the place the question names ("chapter 3", "Table 2", "at the
    very end"): chosen by where it sits, then by the question; held to no threshold."""
