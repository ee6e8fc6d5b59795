"""What an index of an upload's passages takes on disk, as its owner is charged for it: each
passage's text several times over (the passage store's rows and word index, Chroma's copy of
the text, its full-text index and its write log), its vector (in the HNSW graph and the log),
and a fixed cost per passage (metadata rows and their indexes, graph links).

Measured with `python bench/index_footprint.py`: an index in a passage store and an embedded
Chroma 1.5 takes 14-100 times the bytes of its passages' text (21 times with MiniLM's 384
dimensions and 250-token chunks; tiny chunks of big vectors the most); the figures below charge
3-33% more than every case measured, never less (docs/vector-stores.md)."""

from __future__ import annotations

from collections.abc import Sequence

TEXT_COPIES = 14
"""Bytes on disk per byte of a passage's text."""
PER_PASSAGE = 4_200
"""Bytes on disk per passage, whatever its text: metadata rows, their indexes, graph links."""
PER_DIMENSION = 9
"""Bytes on disk per dimension of a passage's vector (float32 in the graph and in the log)."""
ASSUMED_DIMENSIONS = 1_536
"""The vectors' size when the embedder cannot say yet (its model not on disk): OpenAI's
text-embedding-3-small's, more than most local models make."""


def index_footprint(texts: Sequence[str], dimensions: int) -> int:
    """Bytes an index of passages with these texts and vectors of `dimensions` takes."""
    text_bytes = sum(len(text.encode()) for text in texts)
    return TEXT_COPIES * text_bytes + len(texts) * (PER_PASSAGE + PER_DIMENSION * dimensions)
