"""Embedding documents' passages: what a request needs now, the rest in the background, once."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
import structlog

from proxy.disk import DiskFull
from proxy.documents.model import ParsedDocument
from proxy.retrieval.chunking import Chunk, head
from proxy.retrieval.embeddings import Embedder
from proxy.retrieval.index import WRITE_BATCH, VectorIndex, VectorStoreUnavailable
from proxy.retrieval.lease import Leases
from proxy.retrieval.passages import DocumentPassages
from proxy.retrieval.vectors import DocumentVectors, chunk_id

log = structlog.get_logger(__name__)

BACKGROUND_BATCH = 4
"""Passages per background round (embedded side by side on the embedder's lanes, then stored
together). A request's embedding goes before the next round, and never waits for the round
under way (it has lanes of its own: proxy.retrieval.embeddings). Rounds of 4 to 32 cost the
same per passage (bench/indexing.py); small ones leave the order the questions ask for less
to wait for."""

NEARBY = 1
"""Passages on either side of a question's hit that the background embeds first with it (the
answer often starts or ends in the passage next to the one that matched)."""

RESUME_AFTER_S = 1.0
"""A background run stopped by the vector store (a Chroma server restarting) tries again after
this, then twice as long each time up to RESUME_EVERY_S, for RESUME_FOR_S at most."""
RESUME_EVERY_S = 30.0
RESUME_FOR_S = 15 * 60.0
STORE_DOWN = (VectorStoreUnavailable, DiskFull)
"""Failures that are the store's, not the document's (a Chroma server down, the embedded
store's disk full): requests rank by words meanwhile, and the run waits for the store."""

Vector = npt.NDArray[np.float32]
Vectors = dict[int, Vector]
"""Passage index to vector; float32 arrays (a list of Python floats takes ~6x the memory)."""


class EmbeddingPace:
    """How long the embedder takes per character of text a request waits for, as measured on
    its recent runs of several texts (a moving average): what embedding a whole document now
    would cost, on this machine and at its present load. Characters, not tokens: counting a
    long book's tokens at every question would cost more than the estimate is worth."""

    WEIGHT = 0.3
    """The newest measurement's share in the average."""

    def __init__(self) -> None:
        self.seconds_per_char: float | None = None

    def record(self, chars: int, seconds: float) -> None:
        if chars <= 0 or seconds <= 0:
            return
        rate = seconds / chars
        known = self.seconds_per_char
        self.seconds_per_char = rate if known is None else known + self.WEIGHT * (rate - known)

    def estimate(self, chars: int) -> float | None:
        """Seconds to embed `chars` characters of passages; None until something was measured."""
        known = self.seconds_per_char
        return None if known is None else known * chars


@runtime_checkable
class BackgroundEmbedder(Protocol):
    """An embedder with lanes for work nobody waits for (proxy.retrieval.embeddings)."""

    async def embed_in_background(self, texts: Sequence[str]) -> list[list[float]]: ...


class ForegroundGate:
    """Embedding for a waiting request goes before background indexing (one CPU, one model)."""

    def __init__(self) -> None:
        self._waiting = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @contextlib.asynccontextmanager
    async def foreground(self) -> AsyncIterator[None]:
        self._waiting += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._waiting -= 1
            if not self._waiting:
                self._idle.set()

    async def background_turn(self) -> None:
        await self._idle.wait()


@dataclass
class Progress:
    """How far one document's dense index is: vectors made here, and passages stored before."""

    total: int
    vectors: Vectors = field(default_factory=dict)
    stored: set[int] = field(default_factory=set)
    held_elsewhere: bool = False
    embedding: dict[int, asyncio.Future[Vector]] = field(default_factory=dict)
    """Passages being embedded right now: others wanting them wait instead of embedding too."""
    previews: dict[int, asyncio.Future[Vector]] = field(default_factory=dict)
    """Vectors of passages' heads, made for first questions while the document is indexed:
    concurrent first questions share them (they are never stored)."""
    first: list[int] = field(default_factory=list)
    """Passages the background embeds before the rest: around the lexical hits of the questions
    asked meanwhile, the latest question's first."""
    unsaved: set[int] = field(default_factory=set)
    """Passages embedded here whose vectors the store did not take (it was down): written
    before the document is recorded complete, never embedded again."""

    @property
    def percent(self) -> int:
        if not self.total:
            return 100
        return min(100, (len(self.stored | set(self.vectors)) * 100) // self.total)


class Indexer:
    """One process's embedding of documents into the vector index.

    `vectors_for` embeds the passages a request needs right away (before any background work);
    `complete_later` finishes a document in the background, once per document in this process
    and, with leases, once across the proxies sharing a Chroma server.
    """

    def __init__(
        self,
        index: VectorIndex,
        embedder: Embedder,
        settings: str,
        *,
        leases: Leases | None = None,
        batch: int = BACKGROUND_BATCH,
        resume_after_s: float = RESUME_AFTER_S,
        resume_every_s: float = RESUME_EVERY_S,
        resume_for_s: float = RESUME_FOR_S,
    ) -> None:
        self.index = index
        self.embedder = embedder
        self.settings = settings
        self.leases = leases
        self.batch = batch
        self.resume_after_s = resume_after_s
        self.resume_every_s = resume_every_s
        self.resume_for_s = resume_for_s
        self.gate = ForegroundGate()
        self.pace = EmbeddingPace()
        self._progress: dict[str, Progress] = {}
        self._tasks: dict[str, asyncio.Task[bool]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def progress(self, passages: DocumentPassages) -> Progress:
        found = self._progress.get(passages.sha256)
        if found is None or found.total != len(passages.chunks):
            found = self._progress[passages.sha256] = Progress(len(passages.chunks))
        return found

    def prefer(self, passages: DocumentPassages, ranked: Sequence[int]) -> None:
        """Have the background embed the passages around `ranked` (a question's candidates and
        lexical hits, best first) before the rest, so that the next question on the same part
        of the document finds them with dense scores."""
        progress = self.progress(passages)
        nearby = nearby_first(ranked, len(passages.chunks))
        progress.first = list(dict.fromkeys([*nearby, *progress.first]))

    def running(self, doc_sha256: str) -> bool:
        task = self._tasks.get(doc_sha256)
        return task is not None and not task.done()

    async def vectors_for(self, passages: DocumentPassages, wanted: Sequence[int]) -> Vectors:
        """Vectors of the `wanted` passages: made here before, stored before, or embedded now.

        Other requests and the background work on the same document meanwhile: whatever one
        of them is embedding is awaited, never embedded twice, and a passage whose embedding
        elsewhere failed is embedded here after all.
        """
        progress = self.progress(passages)
        found: Vectors = {}
        asked_store = False
        while True:
            found.update({i: progress.vectors[i] for i in wanted if i in progress.vectors})
            missing = [i for i in wanted if i not in found and i not in progress.embedding]
            if missing and not asked_store:
                # Stored before: by an earlier run, or by another proxy sharing the store.
                asked_store = True
                stored = await self.index.stored_vectors(passages.sha256, missing, self.settings)
                found.update({i: np.asarray(v, dtype=np.float32) for i, v in stored.items()})
                continue  # the store was asked: others may have made some meanwhile
            waiting = {
                i: progress.embedding[i]
                for i in wanted
                if i not in found and i in progress.embedding
            }
            if missing:
                chunks = [passages.chunks[i] for i in missing]
                async with self.gate.foreground():
                    found.update(await self._embed(chunks, progress))
            for i, pending in waiting.items():
                with contextlib.suppress(Exception):  # failed there: embedded here next round
                    found[i] = await asyncio.shield(pending)
            if all(i in found for i in wanted):
                return found

    async def previews_for(
        self, passages: DocumentPassages, wanted: Sequence[int], tokens: int
    ) -> Vectors:
        """Vectors good enough to rank the `wanted` passages now: those made already, else of
        each passage's first `tokens` tokens (not stored: the background embeds them whole)."""
        progress = self.progress(passages)
        count = self.embedder.count_tokens
        heads = {
            i: head(passages.chunks[i].embedded, tokens, count)
            for i in wanted
            if i not in progress.vectors
        }
        # A passage no longer than its head is embedded whole, stored and shared as usual.
        whole = [i for i in wanted if i not in heads or heads[i] == passages.chunks[i].embedded]
        found = await self.vectors_for(passages, whole)
        cut = [
            i
            for i in heads
            if heads[i] != passages.chunks[i].embedded
            and i not in found
            and i not in progress.previews
        ]
        if cut:
            loop = asyncio.get_running_loop()
            pending = {i: loop.create_future() for i in cut}
            progress.previews.update(pending)
            try:
                async with self.gate.foreground():
                    vectors = await self._timed([heads[i] for i in cut])
            except BaseException as exc:
                for i, future in pending.items():
                    progress.previews.pop(i, None)
                    future.set_exception(exc)
                    future.exception()  # read here: nobody else may be waiting for it
                raise
            for i, vector in zip(cut, vectors, strict=True):
                pending[i].set_result(np.asarray(vector, dtype=np.float32))
        for i in heads:
            if i not in found and i in progress.previews:
                found[i] = await asyncio.shield(progress.previews[i])
        return found

    async def complete_now(self, doc: ParsedDocument, passages: DocumentPassages) -> None:
        """Embed every passage while the request waits (documents no bigger than a request's
        candidates): once per document, concurrent requests wait for the first."""
        lock = self._locks.setdefault(doc.sha256, asyncio.Lock())
        async with lock:
            if await self.index.is_indexed(doc.sha256, self.settings):
                return
            await self.vectors_for(passages, range(len(passages.chunks)))
            await self._finish(doc, passages)

    def complete_later(self, doc: ParsedDocument, passages: DocumentPassages) -> None:
        """Start finishing the document in the background, unless that is under way here."""
        self._start(doc, passages)

    async def complete(self, doc: ParsedDocument, passages: DocumentPassages) -> bool:
        """Finish the document at the background's pace (requests' embeddings go first) and
        wait for it: True once it is indexed, False when another proxy holds its lease. What
        stopped the work is raised (the next attempt resumes from what was stored)."""
        return await asyncio.shield(self._start(doc, passages))

    def _start(self, doc: ParsedDocument, passages: DocumentPassages) -> asyncio.Task[bool]:
        task = self._tasks.get(doc.sha256)
        if task is None or task.done():
            task = asyncio.create_task(self._complete(doc, passages))
            task.add_done_callback(functools.partial(_log_failure, doc.name))
            self._tasks[doc.sha256] = task
        return task

    async def _complete(self, doc: ParsedDocument, passages: DocumentPassages) -> bool:
        """Finish the document; while the vector store is down (a Chroma server restarting),
        wait for it and go on from where the run stopped, for `resume_for_s` at most."""
        pause, waited = self.resume_after_s, 0.0
        try:
            while True:
                try:
                    return await self._complete_once(doc, passages)
                except STORE_DOWN as error:
                    if waited >= self.resume_for_s:
                        raise
                    log.warning(
                        "indexing waits for the vector store: it resumes by itself",
                        file=doc.name,
                        retry_in_s=pause,
                        error=str(error)[:300],
                    )
                await asyncio.sleep(pause)
                waited += pause
                pause = min(pause * 2, self.resume_every_s)
        finally:
            if self._tasks.get(doc.sha256) is asyncio.current_task():
                self._tasks.pop(doc.sha256, None)

    async def _complete_once(self, doc: ParsedDocument, passages: DocumentPassages) -> bool:
        progress = self.progress(passages)
        claimed = False
        try:
            if self.leases is not None:
                claimed = await self.leases.claim(doc.sha256)
                progress.held_elsewhere = not claimed
                if not claimed:
                    return False
            progress.stored |= await self.index.stored_indexes(doc.sha256, self.settings)
            # Similar lengths in a batch pad less (MiniLM pads each batch to its longest).
            rest = sorted(
                (chunk.index for chunk in passages.chunks),
                key=lambda i: len(passages.chunks[i].text),
            )
            renewed = time.monotonic()
            while True:
                await self.gate.background_turn()
                await self._store_unsaved(passages, progress)
                # Passages a request embedded meanwhile, or is embedding now, are left to it.
                batch = self._next_batch(progress, rest)
                if not batch:
                    left = [
                        i
                        for i in range(len(passages.chunks))
                        if i not in progress.vectors and i not in progress.stored
                    ]
                    if not left:
                        break
                    # Left to a request that is still embedding them: what fails there is
                    # embedded here, so the document is never recorded complete without them.
                    for i in left:
                        if (pending := progress.embedding.get(i)) is not None:
                            with contextlib.suppress(Exception):
                                await asyncio.shield(pending)
                    rest.extend(left)
                    continue
                await self._embed([passages.chunks[i] for i in batch], progress, background=True)
                if self.leases is not None and time.monotonic() - renewed > self.leases.lease_s / 3:
                    renewed = time.monotonic()
                    if not await self.leases.renew(doc.sha256):
                        progress.held_elsewhere = True
                        return False
            await self._finish(doc, passages)
            return True
        finally:
            if claimed and self.leases is not None:
                with contextlib.suppress(Exception):
                    await self.leases.release(doc.sha256)

    def _next_batch(self, progress: Progress, rest: list[int]) -> list[int]:
        """The next passages to embed in the background: the preferred ones first, then the
        rest in order; passages done, stored or being embedded are dropped from both lists."""

        def wanted(i: int) -> bool:
            return (
                i not in progress.vectors
                and i not in progress.stored
                and i not in progress.embedding
            )

        batch: list[int] = []
        for queue in (progress.first, rest):
            taken = 0
            while taken < len(queue) and len(batch) < self.batch:
                if wanted(queue[taken]) and queue[taken] not in batch:
                    batch.append(queue[taken])
                taken += 1
            del queue[:taken]
        return batch

    async def _embed(
        self, batch: list[Chunk], progress: Progress, *, background: bool = False
    ) -> Vectors:
        """Embed and store passages, announcing them so that nobody embeds them twice. Vectors
        the store did not take are kept (`Progress.unsaved`) and the store's error raised."""
        loop = asyncio.get_running_loop()
        pending = {chunk.index: loop.create_future() for chunk in batch}
        progress.embedding.update(pending)
        texts = [chunk.embedded for chunk in batch]
        try:
            try:
                if background and isinstance(self.embedder, BackgroundEmbedder):
                    vectors = await self.embedder.embed_in_background(texts)
                else:
                    vectors = await self._timed(texts)
            except BaseException as error:
                for future in pending.values():
                    future.set_exception(error if isinstance(error, Exception) else RuntimeError())
                    future.exception()  # retrieved: nobody may be waiting
                raise
            made = {
                chunk.index: np.asarray(vector, dtype=np.float32)
                for chunk, vector in zip(batch, vectors, strict=True)
            }
            progress.vectors.update(made)
            for index, vector in made.items():
                pending[index].set_result(vector)
            try:
                await self.index.add(batch, vectors, self.settings)
            except BaseException:
                progress.unsaved.update(made)
                raise
        finally:
            for index in pending:
                progress.embedding.pop(index, None)
        return made

    async def _store_unsaved(self, passages: DocumentPassages, progress: Progress) -> None:
        """Write the vectors made while the store was down (they are not embedded again)."""
        while progress.unsaved:
            indexes = sorted(progress.unsaved)[:WRITE_BATCH]
            chunks = [passages.chunks[i] for i in indexes]
            rows = [progress.vectors[i].tolist() for i in indexes]
            await self.index.add(chunks, rows, self.settings)
            progress.unsaved.difference_update(indexes)

    async def _timed(self, texts: list[str]) -> list[list[float]]:
        """The embedder's vectors of texts a request waits for, its pace measured on the way
        (runs of one text are mostly overhead: they are not counted)."""
        started = time.perf_counter()
        vectors = await self.embedder.embed_documents(texts)
        if len(texts) > 1:
            self.pace.record(sum(map(len, texts)), time.perf_counter() - started)
        return vectors

    def whole_now_costs(self, passages: DocumentPassages) -> float | None:
        """Seconds that embedding the rest of the document while a request waits would take,
        at the pace measured (None: not measured yet)."""
        progress = self.progress(passages)
        done = progress.vectors.keys() | progress.stored
        return self.pace.estimate(
            sum(len(chunk.embedded) for chunk in passages.chunks if chunk.index not in done)
        )

    async def _finish(self, doc: ParsedDocument, passages: DocumentPassages) -> None:
        progress = self.progress(passages)
        await self._store_unsaved(passages, progress)
        await self.index.finish(doc, len(passages.chunks), self.settings)
        if len(progress.vectors) == len(passages.chunks):
            ids = [chunk_id(doc.sha256, i) for i in range(len(passages.chunks))]
            rows = [progress.vectors[i] for i in range(len(passages.chunks))]
            self.index.remember(doc.sha256, DocumentVectors.build(ids, rows))
        self._progress.pop(doc.sha256, None)
        self._locks.pop(doc.sha256, None)
        log.info("document indexed", file=doc.name, passages=len(passages.chunks))

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task


def nearby_first(ranked: Sequence[int], total: int, reach: int = NEARBY) -> list[int]:
    """Each of the `ranked` passages followed by its neighbours within `reach`, best first, each
    passage once (indexes within 0..total-1)."""
    order: dict[int, None] = {}
    for index in ranked:
        for step in range(reach + 1):
            for near in (index - step, index + step):
                if 0 <= near < total:
                    order.setdefault(near)
    return list(order)


def _log_failure(name: str, task: asyncio.Task[bool]) -> None:
    """A background run that failed is logged (and its error retrieved): the next request or
    store job resumes from the passages it stored."""
    if not task.cancelled() and (error := task.exception()) is not None:
        log.warning("background indexing failed", file=name, error=str(error)[:300])
