"""The Chroma vector index: each document embedded once, ever, and searched by its sha256."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import os
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import chromadb
import numpy as np
from chromadb.api import ClientAPI
from chromadb.api.models.Collection import Collection
from chromadb.config import Settings

from proxy.documents.model import ParsedDocument
from proxy.errors import ProxyError, UpstreamError
from proxy.retrieval.chunking import Chunk
from proxy.retrieval.embeddings import Embedder

T = TypeVar("T")

LOCK_FILE = "proxy.lock"
# Chunks per embed-and-upsert round: big enough for efficient batches, small enough that
# an interrupted run loses little and a resumed one skips what was stored.
WRITE_BATCH = 128


@dataclass(frozen=True)
class Hit:
    """A passage found for a query; `score` is the cosine affinity, 0..1, higher is closer."""

    text: str
    score: float
    filename: str
    page_start: int
    page_end: int
    index: int


class IndexLockedError(RuntimeError):
    """Another process already holds the embedded vector store."""


class VectorIndex:
    """Chunks in one Chroma collection per embedder; a manifest records finished documents."""

    def __init__(
        self,
        connect: Callable[[], ClientAPI],
        embedder: Embedder,
        *,
        server_url: str | None = None,
        path: Path | None = None,
        lock_fd: int | None = None,
    ) -> None:
        self.embedder = embedder
        self.server_url = server_url
        self.path = path
        self._connect = connect
        self._lock_fd = lock_fd
        self._client: ClientAPI | None = None
        self._chunks: Collection | None = None
        self._manifest: Collection | None = None
        self._connect_lock = threading.Lock()
        self._closed = False
        self._key_locks: dict[str, asyncio.Lock] = {}
        self._key_users: Counter[str] = Counter()

    @classmethod
    def embedded(cls, path: Path, embedder: Embedder) -> VectorIndex:
        """A store in `path`, served by this process alone (locked against other processes)."""
        path.mkdir(parents=True, exist_ok=True)
        lock_fd = _lock_exclusively(path)
        settings = Settings(anonymized_telemetry=False)
        return cls(
            lambda: chromadb.PersistentClient(path=str(path), settings=settings),
            embedder,
            path=path,
            lock_fd=lock_fd,
        )

    @classmethod
    def server(cls, host: str, port: int, embedder: Embedder) -> VectorIndex:
        """A `chroma run` server, shared by any number of proxy processes."""
        settings = Settings(anonymized_telemetry=False)
        return cls(
            lambda: chromadb.HttpClient(host=host, port=port, settings=settings),
            embedder,
            server_url=f"http://{host}:{port}",
        )

    async def is_indexed(self, doc_sha256: str) -> bool:
        """Whether the document was completely indexed (its completion record exists)."""
        found = await self._run(lambda: self._collections()[1].get(ids=[doc_sha256], include=[]))
        return bool(found["ids"])

    async def ensure_indexed(self, doc: ParsedDocument, chunks: Callable[[], list[Chunk]]) -> bool:
        """Embed and store `doc` unless already complete; False means nothing had to be done."""
        if await self.is_indexed(doc.sha256):
            return False
        async with self._key_lock(doc.sha256):
            if await self.is_indexed(doc.sha256):
                return False
            items = await asyncio.to_thread(chunks)
            stored = await self._run(lambda: self._stored_texts(doc.sha256))
            wanted = {_chunk_id(chunk) for chunk in items}
            stale = [chunk_id for chunk_id in stored if chunk_id not in wanted]
            if stale:
                await self._run(lambda: self._collections()[0].delete(ids=stale))
            # Resuming after an interruption: chunks already stored with the same text stay.
            todo = [chunk for chunk in items if stored.get(_chunk_id(chunk)) != chunk.text]
            for start in range(0, len(todo), WRITE_BATCH):
                batch = todo[start : start + WRITE_BATCH]
                vectors = await self.embedder.embed_documents([chunk.text for chunk in batch])
                await self._run(functools.partial(self._upsert, batch, vectors))
            # Written last, so a crash at any earlier point leaves the document incomplete.
            await self._run(lambda: self._mark_complete(doc, len(items)))
            return True

    async def search(self, doc_sha256: str, query_embedding: list[float], limit: int) -> list[Hit]:
        """The `limit` passages of one document closest to the query, best first."""
        if limit < 1:
            return []
        result = await self._run(
            lambda: self._collections()[0].query(
                query_embeddings=np.asarray([query_embedding], dtype=np.float32),
                n_results=limit,
                where={"sha256": doc_sha256},
                include=["documents", "metadatas", "distances"],
            )
        )
        documents = (result["documents"] or [[]])[0]
        metadatas = (result["metadatas"] or [[]])[0]
        distances = (result["distances"] or [[]])[0]
        hits = [
            Hit(
                text=text,
                score=min(1.0, max(0.0, 1.0 - float(distance))),
                filename=str(meta["filename"]),
                page_start=int(str(meta["page_start"])),
                page_end=int(str(meta["page_end"])),
                index=int(str(meta["index"])),
            )
            for text, meta, distance in zip(documents, metadatas, distances, strict=True)
        ]
        return sorted(hits, key=lambda hit: hit.score, reverse=True)

    async def close(self) -> None:
        """Release the Chroma client and the store's lock."""
        with self._connect_lock:
            self._closed = True
            client, self._client = self._client, None
            self._chunks = self._manifest = None
        if client is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(client.close)  # type: ignore[attr-defined]
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    @contextlib.asynccontextmanager
    async def _key_lock(self, key: str) -> AsyncIterator[None]:
        # One indexing run per document; the lock disappears with its last user.
        lock = self._key_locks.setdefault(key, asyncio.Lock())
        self._key_users[key] += 1
        try:
            async with lock:
                yield
        finally:
            self._key_users[key] -= 1
            if not self._key_users[key]:
                del self._key_users[key]
                del self._key_locks[key]

    async def _run(self, call: Callable[[], T]) -> T:
        """Run a Chroma call off the event loop; a failing server becomes an UpstreamError."""
        try:
            return await asyncio.to_thread(call)
        except ProxyError:
            raise
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"[:300]
            if self.server_url is None:
                message = f"vector store {self.path}: {reason}"
                raise ProxyError(
                    message, status=500, type="server_error", code="vector_store_failed"
                ) from exc
            # The server may have restarted with other data: look the collections up again.
            self._chunks = self._manifest = None
            raise UpstreamError(
                f"Chroma server {self.server_url}: {reason}", code="vector_store_failed"
            ) from exc

    def _collections(self) -> tuple[Collection, Collection]:
        with self._connect_lock:
            if self._closed:
                raise RuntimeError("the vector index is closed")
            if self._chunks is None or self._manifest is None:
                client = self._client or self._connect()
                self._client = client
                name = self.embedder.name
                self._chunks = client.get_or_create_collection(
                    name,
                    configuration={"hnsw": {"space": "cosine"}},
                    embedding_function=None,
                )
                self._manifest = client.get_or_create_collection(
                    f"{name}.manifest", embedding_function=None
                )
            return self._chunks, self._manifest

    def _stored_texts(self, doc_sha256: str) -> dict[str, str]:
        found = self._collections()[0].get(where={"sha256": doc_sha256}, include=["documents"])
        return dict(zip(found["ids"], found["documents"] or [], strict=False))

    def _upsert(self, batch: Sequence[Chunk], vectors: list[list[float]]) -> None:
        if len(vectors) != len(batch):
            raise ValueError(f"{len(vectors)} vectors for {len(batch)} chunks")
        metadatas: list[Any] = [
            {
                "sha256": chunk.doc_sha256,
                "filename": chunk.filename,
                "page_start": chunk.page_start,
                "page_end": chunk.page_end,
                "index": chunk.index,
            }
            for chunk in batch
        ]
        self._collections()[0].upsert(
            ids=[_chunk_id(chunk) for chunk in batch],
            embeddings=np.asarray(vectors, dtype=np.float32),
            documents=[chunk.text for chunk in batch],
            metadatas=metadatas,
        )

    def _mark_complete(self, doc: ParsedDocument, count: int) -> None:
        # The manifest needs a vector per record but is only ever read by id.
        self._collections()[1].upsert(
            ids=[doc.sha256],
            embeddings=np.array([[_position(doc.sha256)]], dtype=np.float32),
            metadatas=[{"sha256": doc.sha256, "filename": doc.name, "chunks": count}],
        )


def _chunk_id(chunk: Chunk) -> str:
    return f"{chunk.doc_sha256}:{chunk.index}"


def _position(doc_sha256: str) -> float:
    # Spread the manifest's dummy 1-d vectors: identical vectors make HNSW inserts slow.
    return int.from_bytes(doc_sha256.encode()[:8], "big") / 2**64


def _lock_exclusively(path: Path) -> int:
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
