"""The Chroma vector index: each document embedded once, ever, and searched by its sha256."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import chromadb
import numpy as np
from chromadb.api import ClientAPI
from chromadb.api.models.Collection import Collection
from chromadb.config import Settings

from proxy.disk import DiskFull, DiskRoom
from proxy.documents.model import ParsedDocument
from proxy.errors import ProxyError, UpstreamError
from proxy.retrieval.chunking import Chunk
from proxy.retrieval.embeddings import Embedder
from proxy.retrieval.vectors import (
    DocumentVectors,
    VectorCache,
    chunk_id,
    hit_from,
    lock_exclusively,
    manifest_position,
    release,
)
from proxy.retrieval.vectors import Hit as Hit
from proxy.retrieval.vectors import IndexLockedError as IndexLockedError

T = TypeVar("T")


class VectorStoreUnavailable(UpstreamError):
    """The Chroma server failed or is unreachable (502): requests rank by words meanwhile,
    and background indexing waits for it (proxy.retrieval.indexing)."""


# Chunks per embed-and-upsert round: big enough for efficient batches, small enough that
# an interrupted run loses little and a resumed one skips what was stored.
WRITE_BATCH = 128
# Vectors of recently searched documents kept in memory: ~43k MiniLM chunks (30 books).
CACHE_BYTES = 64 * 2**20


def dimensions_changed(query: int, stored: int) -> ProxyError:
    """A query's vector and a document's stored ones have different sizes."""
    return ProxyError(
        f"vector store: the query has {query} dimensions, the document's vectors {stored}: the"
        " embedding model changed under the same name; give embeddings.model its new name, so"
        " documents are indexed again",
        status=500,
        type="server_error",
        code="vector_store_failed",
    )


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
        cache_bytes: int = CACHE_BYTES,
        owns_client: bool = True,
        disk: DiskRoom | None = None,
    ) -> None:
        self.embedder = embedder
        self.disk = disk  # embedded: no write below its reserve (Chroma fails on a full disk)
        self._owns_client = owns_client
        self.server_url = server_url
        self.path = path
        self._connect = connect
        self._lock_fd = lock_fd
        self._client: ClientAPI | None = None
        self._chunks: Collection | None = None
        self._manifest: Collection | None = None
        self._connect_lock = threading.Lock()
        self._closed = False
        self._cache = VectorCache(cache_bytes)
        self._key_locks: dict[str, asyncio.Lock] = {}
        self._key_users: Counter[str] = Counter()

    @classmethod
    def embedded(
        cls,
        path: Path,
        embedder: Embedder,
        *,
        cache_bytes: int = CACHE_BYTES,
        disk_reserve_bytes: int = 0,
    ) -> VectorIndex:
        """A store in `path`, served by this process alone (locked against other processes);
        its writes stop while its disk has less than `disk_reserve_bytes` free."""
        path.mkdir(parents=True, exist_ok=True)
        lock_fd = lock_exclusively(path)
        settings = Settings(anonymized_telemetry=False)
        return cls(
            lambda: chromadb.PersistentClient(path=str(path), settings=settings),
            embedder,
            path=path,
            lock_fd=lock_fd,
            cache_bytes=cache_bytes,
            disk=DiskRoom(path, disk_reserve_bytes) if disk_reserve_bytes else None,
        )

    @classmethod
    def server(
        cls, host: str, port: int, embedder: Embedder, *, cache_bytes: int = CACHE_BYTES
    ) -> VectorIndex:
        """A `chroma run` server, shared by any number of proxy processes."""
        settings = Settings(anonymized_telemetry=False)
        return cls(
            lambda: chromadb.HttpClient(host=host, port=port, settings=settings),
            embedder,
            server_url=f"http://{host}:{port}",
            cache_bytes=cache_bytes,
        )

    def sibling(self, embedder: Embedder) -> VectorIndex:
        """Another embedder's collections in the same store, through this index's client:
        closing the sibling leaves the client and the store's lock to this index."""
        return VectorIndex(
            self._shared_client,
            embedder,
            server_url=self.server_url,
            path=self.path,
            cache_bytes=self._cache.max_bytes,
            owns_client=False,
            disk=self.disk,
        )

    def _shared_client(self) -> ClientAPI:
        with self._connect_lock:
            if self._closed:
                raise RuntimeError("the vector index is closed")
            self._client = self._client or self._connect()
            return self._client

    def settings_of(self, fingerprint: str | None) -> str:
        """What a document's passages were made with; by default the embedder's fingerprint."""
        if fingerprint is not None:
            return fingerprint
        return str(getattr(self.embedder, "fingerprint", self.embedder.name))

    async def is_indexed(self, doc_sha256: str, fingerprint: str | None = None) -> bool:
        """Whether the document was completely indexed with these settings."""
        settings = self.settings_of(fingerprint)
        found = await self._run(
            lambda: self._collections()[1].get(ids=[doc_sha256], include=["metadatas"])
        )
        metadatas = found["metadatas"] or []
        # Records written before settings were recorded count as made with the defaults.
        return bool(found["ids"]) and str(metadatas[0].get("settings", settings)) == settings

    async def stored_indexes(self, doc_sha256: str, fingerprint: str | None = None) -> set[int]:
        """Passages of the document already stored with these settings (to resume)."""
        settings = self.settings_of(fingerprint)
        found = await self._run(
            lambda: self._collections()[0].get(where={"sha256": doc_sha256}, include=["metadatas"])
        )
        return {
            int(str(meta["index"]))
            for meta in found["metadatas"] or []
            if str(meta.get("settings", settings)) == settings
        }

    async def stored_vectors(
        self, doc_sha256: str, indexes: Sequence[int], fingerprint: str | None = None
    ) -> dict[int, list[float]]:
        """Vectors already stored for some passages of an incomplete document, by index."""
        settings = self.settings_of(fingerprint)
        ids = [chunk_id(doc_sha256, i) for i in indexes]
        found = await self._run(
            lambda: self._collections()[0].get(ids=ids, include=["embeddings", "metadatas"])
        )
        embeddings = found["embeddings"]
        if embeddings is None:
            return {}
        return {
            int(str(meta["index"])): [float(x) for x in vector]
            for meta, vector in zip(found["metadatas"] or [], embeddings, strict=False)
            if str(meta.get("settings", settings)) == settings
        }

    async def add(
        self, chunks: Sequence[Chunk], vectors: list[list[float]], fingerprint: str | None = None
    ) -> None:
        """Store passages with their vectors (replacing what their ids held)."""
        settings = self.settings_of(fingerprint)
        self._room_to_write()
        await self._run(functools.partial(self._upsert, chunks, vectors, settings))

    async def finish(self, doc: ParsedDocument, count: int, fingerprint: str | None = None) -> None:
        """Drop passages past `count` (left by other settings) and record the document complete."""
        settings = self.settings_of(fingerprint)
        self._room_to_write()
        stored = await self._run(lambda: self._stored_texts(doc.sha256))
        wanted = {chunk_id(doc.sha256, i) for i in range(count)}
        stale = [key for key in stored if key not in wanted]
        if stale:
            await self._run(lambda: self._collections()[0].delete(ids=stale))
        self._cache.drop(doc.sha256)
        # Written last, so a crash at any earlier point leaves the document incomplete.
        await self._run(lambda: self._mark_complete(doc, count, settings))

    async def vectors(
        self, doc_sha256: str, fingerprint: str | None = None
    ) -> DocumentVectors | None:
        """The vectors of a document complete with these settings (kept in memory), else None."""
        cached = self._cache.get(doc_sha256)
        if cached is not None:
            return cached
        if not await self.is_indexed(doc_sha256, fingerprint):
            return None
        found = await self._run(lambda: self._document_vectors(doc_sha256))
        if found is not None:
            self._cache.put(doc_sha256, found)
        return found

    def remember(self, doc_sha256: str, vectors: DocumentVectors) -> None:
        """Vectors just stored for a complete document: the next search needs no round trip."""
        self._cache.put(doc_sha256, vectors)

    async def ensure_indexed(
        self,
        doc: ParsedDocument,
        chunks: Callable[[], list[Chunk]],
        fingerprint: str | None = None,
    ) -> bool:
        """Embed and store `doc` unless already complete; False means nothing had to be done."""
        if await self.is_indexed(doc.sha256, fingerprint):
            return False
        async with self._key_lock(doc.sha256):
            if await self.is_indexed(doc.sha256, fingerprint):
                return False
            items = await asyncio.to_thread(chunks)
            if [chunk.index for chunk in items] != list(range(len(items))):
                raise ValueError("chunk indexes must be 0, 1, 2, ... in order")
            # Resuming after an interruption: passages stored with the same settings stay.
            done = await self.stored_indexes(doc.sha256, fingerprint)
            todo = [chunk for chunk in items if chunk.index not in done]
            embedded: list[list[float]] = []
            for start in range(0, len(todo), WRITE_BATCH):
                batch = todo[start : start + WRITE_BATCH]
                vectors = await self.embedder.embed_documents([chunk.embedded for chunk in batch])
                await self.add(batch, vectors, fingerprint)
                embedded.extend(vectors)
            await self.finish(doc, len(items), fingerprint)
            if items and len(todo) == len(items):  # the usual next step is a search
                ids = [chunk_id(chunk.doc_sha256, chunk.index) for chunk in items]
                self._cache.put(doc.sha256, DocumentVectors.build(ids, embedded))
            return True

    async def search(self, doc_sha256: str, query_embedding: list[float], limit: int) -> list[Hit]:
        """The `limit` passages of one document closest to the query, best first."""
        if limit < 1:
            return []
        vectors = self._cache.get(doc_sha256)
        if vectors is None:
            vectors = await self._run(lambda: self._document_vectors(doc_sha256))
            if vectors is None:  # not (completely) indexed: let Chroma filter by metadata
                return await self._run(
                    lambda: self._query_where(doc_sha256, query_embedding, limit)
                )
            self._cache.put(doc_sha256, vectors)
        if vectors.ids and vectors.matrix.shape[1] != len(query_embedding):
            raise dimensions_changed(len(query_embedding), vectors.matrix.shape[1])
        best = dict(vectors.top(query_embedding, limit))
        if not best:
            return []
        found = await self._run(
            lambda: self._collections()[0].get(ids=list(best), include=["documents", "metadatas"])
        )
        hits = [
            hit_from(text, meta, best[chunk_id])
            for chunk_id, text, meta in zip(
                found["ids"], found["documents"] or [], found["metadatas"] or [], strict=True
            )
        ]
        return sorted(hits, key=lambda hit: hit.score, reverse=True)

    def _room_to_write(self) -> None:
        if self.disk is not None:
            self.disk.check("the document's vector index")

    def release_unused(self) -> None:
        """Give the store's lock back when nothing was built around the index (no client was
        made yet): the next try takes it again instead of finding it held by this process."""
        if self._lock_fd is not None:
            release(self._lock_fd)
            self._lock_fd = None

    async def close(self) -> None:
        """Release the Chroma client and the store's lock."""
        with self._connect_lock:
            self._closed = True
            client, self._client = self._client, None
            self._chunks = self._manifest = None
        if client is not None and self._owns_client:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(client.close)  # type: ignore[attr-defined]
        self._cache.clear()
        if self._lock_fd is not None:
            release(self._lock_fd)
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

    async def call(self, call: Callable[[], T]) -> T:
        """Run a call on the store's collections off the event loop (errors as `_run`)."""
        return await self._run(call)

    async def _run(self, call: Callable[[], T]) -> T:
        """Run a Chroma call off the event loop; failures become OpenAI-shaped errors."""
        try:
            return await asyncio.to_thread(call)
        except ProxyError:
            raise
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"[:300]
            if self.server_url is None and self.disk is not None and self.disk.low():
                # Chroma's errors do not say so (`Failed to apply logs to the metadata segment`).
                raise DiskFull("the document's vector index") from exc
            if self.server_url is None:
                message = (
                    f"vector store {self.path}: {reason}; ask again, and if this repeats, check"
                    " the disk under vector_store.path (space, permissions)"
                )
                raise ProxyError(
                    message, status=500, type="server_error", code="vector_store_failed"
                ) from exc
            # The server may have restarted with other data: look the collections up again.
            self._chunks = self._manifest = None
            raise VectorStoreUnavailable(
                f"Chroma server {self.server_url}: {reason}; check that it runs (chroma run) at"
                " vector_store.host and port, then ask again",
                code="vector_store_failed",
            ) from exc

    def _collections(self) -> tuple[Collection, Collection]:
        with self._connect_lock:
            if self._closed:
                raise RuntimeError("the vector index is closed")
            if self._chunks is None or self._manifest is None:
                self._client = client = self._client or self._connect()
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

    def _document_vectors(self, doc_sha256: str) -> DocumentVectors | None:
        # Fetching a document's vectors by id and scoring them here is exact, and at 100k
        # chunks ~5x faster than Chroma's query with `where` (see bench/retrieval.py).
        chunks, manifest = self._collections()
        record = manifest.get(ids=[doc_sha256], include=["metadatas"])
        if not record["ids"] or not record["metadatas"]:
            return None
        count = int(str(record["metadatas"][0]["chunks"]))
        ids = [chunk_id(doc_sha256, i) for i in range(count)]
        if not ids:
            return DocumentVectors([], np.zeros((0, 0), dtype=np.float32))
        found = chunks.get(ids=ids, include=["embeddings"])
        if len(found["ids"]) != count or found["embeddings"] is None:
            return None
        return DocumentVectors.build(found["ids"], found["embeddings"])

    def _query_where(self, doc_sha256: str, query: list[float], limit: int) -> list[Hit]:
        result = self._collections()[0].query(
            query_embeddings=np.asarray([query], dtype=np.float32),
            n_results=limit,
            where={"sha256": doc_sha256},
            include=["documents", "metadatas", "distances"],
        )
        documents = (result["documents"] or [[]])[0]
        metadatas = (result["metadatas"] or [[]])[0]
        distances = (result["distances"] or [[]])[0]
        return [
            hit_from(text, meta, 1.0 - float(distance))
            for text, meta, distance in zip(documents, metadatas, distances, strict=True)
        ]

    def _stored_texts(self, doc_sha256: str) -> dict[str, str]:
        found = self._collections()[0].get(where={"sha256": doc_sha256}, include=["documents"])
        return dict(zip(found["ids"], found["documents"] or [], strict=False))

    def _upsert(self, batch: Sequence[Chunk], vectors: list[list[float]], settings: str) -> None:
        if len(vectors) != len(batch):
            raise ValueError(f"{len(vectors)} vectors for {len(batch)} chunks")
        metadatas: list[Any] = [
            {
                "sha256": chunk.doc_sha256,
                "filename": chunk.filename,
                "page_start": chunk.page_start,
                "page_end": chunk.page_end,
                "location": chunk.location,
                "index": chunk.index,
                "settings": settings,
            }
            for chunk in batch
        ]
        self._collections()[0].upsert(
            ids=[chunk_id(chunk.doc_sha256, chunk.index) for chunk in batch],
            embeddings=np.asarray(vectors, dtype=np.float32),
            documents=[chunk.text for chunk in batch],
            metadatas=metadatas,
        )

    def _mark_complete(self, doc: ParsedDocument, count: int, settings: str) -> None:
        # The manifest needs a vector per record but is only ever read by id.
        self._collections()[1].upsert(
            ids=[doc.sha256],
            embeddings=np.array([[manifest_position(doc.sha256)]], dtype=np.float32),
            metadatas=[
                {"sha256": doc.sha256, "filename": doc.name, "chunks": count, "settings": settings}
            ],
        )

    def manifest(self) -> Collection:
        """The collection of completion records and leases."""
        return self._collections()[1]
