"""Search results, documents' chunk vectors held in memory and searched exactly, the store lock."""

from __future__ import annotations

import fcntl
import functools
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from cachetools import LRUCache

LOCK_FILE = "proxy.lock"


@dataclass(frozen=True)
class Hit:
    """A passage found for a query; `score` is the cosine affinity, 0..1, higher is closer."""

    text: str
    score: float
    filename: str
    page_start: int
    page_end: int
    index: int
    location: str = ""


def hit_from(text: str, meta: Mapping[str, Any], similarity: float) -> Hit:
    return Hit(
        text=text,
        score=min(1.0, max(0.0, similarity)),
        filename=str(meta["filename"]),
        page_start=int(str(meta["page_start"])),
        page_end=int(str(meta["page_end"])),
        index=int(str(meta["index"])),
        # Passages indexed before units had locations were all on pages.
        location=str(meta.get("location") or f"page={meta['page_start']}"),
    )


def chunk_id(doc_sha256: str, index: int) -> str:
    return f"{doc_sha256}:{index}"


def manifest_position(doc_sha256: str) -> float:
    """A 1-d stand-in vector for a manifest record, spread out: identical vectors slow HNSW."""
    return int.from_bytes(doc_sha256.encode()[:8], "big") / 2**64


class IndexLockedError(RuntimeError):
    """Another process already holds the embedded vector store."""


@dataclass(frozen=True)
class DocumentVectors:
    """The unit vectors of one complete document's chunks, row i for chunk id `ids[i]`."""

    ids: list[str]
    matrix: npt.NDArray[np.float32]

    @classmethod
    def build(cls, ids: list[str], vectors: object) -> DocumentVectors:
        matrix = np.asarray(vectors, dtype=np.float32).reshape(len(ids), -1)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return cls(ids, matrix / np.clip(norms, 1e-12, None))

    @functools.cached_property
    def nbytes(self) -> int:
        """The memory it holds: the matrix, and the ids (about 125 bytes each: half as much as
        a row of 64 dimensions, a tenth of MiniLM's 384)."""
        return self.matrix.nbytes + sys.getsizeof(self.ids) + sum(map(sys.getsizeof, self.ids))

    def scores(self, query: list[float]) -> npt.NDArray[np.float32]:
        """The cosine similarity of every row to `query`."""
        vector = np.asarray(query, dtype=np.float32)
        scores: npt.NDArray[np.float32] = self.matrix @ (
            vector / max(float(np.linalg.norm(vector)), 1e-12)
        )
        return scores

    def top(self, query: list[float], limit: int) -> list[tuple[str, float]]:
        """The `limit` closest chunk ids by cosine similarity, best first."""
        limit = min(limit, len(self.ids))
        if limit < 1:
            return []
        vector = np.asarray(query, dtype=np.float32)
        scores = self.matrix @ (vector / max(float(np.linalg.norm(vector)), 1e-12))
        best = np.argpartition(-scores, limit - 1)[:limit]
        ranked = best[np.argsort(-scores[best], kind="stable")]
        return [(self.ids[i], float(scores[i])) for i in ranked]


class VectorCache:
    """Recently searched documents' vectors, up to `max_bytes` (least recently used leave)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: LRUCache[str, DocumentVectors] = LRUCache(
            maxsize=max_bytes, getsizeof=lambda entry: max(1, entry.nbytes)
        )

    def get(self, doc_sha256: str) -> DocumentVectors | None:
        return self._entries.get(doc_sha256)

    def put(self, doc_sha256: str, entry: DocumentVectors) -> None:
        if entry.nbytes > self.max_bytes or doc_sha256 in self._entries:
            return
        self._entries[doc_sha256] = entry

    def drop(self, doc_sha256: str) -> None:
        self._entries.pop(doc_sha256, None)

    def clear(self) -> None:
        self._entries.clear()


def lock_exclusively(path: Path) -> int:
    """Take the store's lock file, or explain which process has it and what to do instead."""
    fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise IndexLockedError(
            f"vector store {path} is in use by another process (pid {holder}). Chroma's "
            "embedded mode serves one process only; to run several proxy processes, start "
            f"`chroma run --path {path}` and set vector_store.mode: server "
            "(vector_store.host/port)"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def release(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
