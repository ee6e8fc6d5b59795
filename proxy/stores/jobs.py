"""Indexing a vector store's files in the background: parse, chunk, embed, once per file.

A job claims its file's record before it works (a runner name and a time its claim holds),
renews the claim while it works and writes the outcome only if the claim is still its own and
the file still wants it (not deleted, not cancelled). A process that stops gracefully releases
its claims; one that crashed stops renewing them, and the sweep that every process runs at
start and then every `lease_s` takes its files over once their claims run out: a store left
`in_progress` by a crash finishes after a restart, or on another replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from proxy.errors import DocumentError, PayloadTooLarge, ProxyError
from proxy.files.protocol import FileNotFound, QuotaExceeded
from proxy.stores.chunking import Variants, keyed
from proxy.stores.errors import TooManyChunkings
from proxy.stores.footprint import ASSUMED_DIMENSIONS, index_footprint
from proxy.stores.records import ErrorCode, FileRecord, LastError
from proxy.stores.registry import StoreRegistry
from proxy.stores.usage import IndexUsage

if TYPE_CHECKING:
    from proxy.documents.model import ParsedDocument
    from proxy.documents.parser import DocumentParser
    from proxy.files.protocol import FileStore
    from proxy.retrieval.embeddings import Embedder
    from proxy.retrieval.retriever import Retriever

log = structlog.get_logger(__name__)

# Parse failures a client can do something about: another file, another format.
UNSUPPORTED = frozenset({"unsupported_format", "image_not_document", "encrypted_document"})


@dataclass(frozen=True)
class Outcome:
    """What indexing one file came to."""

    status: str
    usage_bytes: int = 0
    sha256: str = ""
    kind: str = ""
    error: LastError | None = None


def failed(code: ErrorCode, message: str) -> Outcome:
    return Outcome("failed", error=LastError(code=code, message=message[:1000]))


class IndexingJobs:
    """This process's indexing of store files: at most `concurrency` at once."""

    def __init__(
        self,
        registry: StoreRegistry,
        files: FileStore,
        parser: DocumentParser,
        variants: Callable[[], Awaitable[Variants]],
        *,
        runner: str,
        concurrency: int = 2,
        lease_s: float = 30.0,
        clock: Callable[[], float] = time.time,
        usage: IndexUsage | None = None,
        quota_bytes: int | None = None,
        max_queued_per_key: int = 2000,
        max_queued: int = 10_000,
        max_chunkings_per_file: int | None = None,
    ) -> None:
        self.registry = registry
        self.files = files
        self.parser = parser
        self.variants = variants
        self.runner = runner
        self.lease_s = lease_s
        self.clock = clock
        self.usage = usage
        self.quota_bytes = quota_bytes
        self.max_queued_per_key = max_queued_per_key
        self.max_queued = max_queued
        self.max_chunkings_per_file = max_chunkings_per_file
        # Each embedder's vector size, once it has made one: what an index is charged for.
        self._dimensions: dict[str, int] = {}
        self._slots = asyncio.Semaphore(concurrency)
        self._tasks: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._owners: dict[tuple[str, str], str] = {}  # who asked for each job
        self._sweeper: asyncio.Task[None] | None = None
        self._serial = itertools.count(1)

    # -- starting and stopping ------------------------------------------------------------------

    def start(self) -> None:
        """Resume what was left in progress, now and every `lease_s` (claims that ran out)."""
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(
                self._sweep_forever(), context=contextvars.Context()
            )

    async def close(self) -> None:
        tasks = [t for t in [self._sweeper, *self._tasks.values()] if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task

    def check_room(self, owner: str, count: int) -> None:
        """429 unless `count` more jobs of `owner` fit in this process's queue (its own share
        and the whole); checked before anything is saved."""
        queued = sum(1 for key in self._tasks if not self._tasks[key].done())
        mine = sum(
            1
            for key, task in self._tasks.items()
            if not task.done() and self._owners.get(key) == owner
        )
        for held, limit, setting, what in (
            (mine, self.max_queued_per_key, "max_queued_per_key", "this key's files waiting"),
            (queued, self.max_queued, "max_queued", "files waiting"),
        ):
            if held + count > limit:
                raise ProxyError(
                    f"{what} to be indexed: {held}, and {count} more would pass"
                    f" vector_stores.{setting}"
                    f" ({limit}); try again once some are indexed",
                    status=429,
                    type="rate_limit_error",
                    code="indexing_queue_full",
                )

    def submit(self, store_id: str, file_id: str, owner: str = "") -> None:
        """Index the file in the background, unless this process does already."""
        key = (store_id, file_id)
        running = self._tasks.get(key)
        if running is not None and not running.done() and not running.cancelling():
            return
        # A context of its own: the job outlives the request that started it (its logs too).
        task = asyncio.create_task(self._run(store_id, file_id), context=contextvars.Context())
        self._tasks[key] = task
        self._owners[key] = owner
        task.add_done_callback(lambda done: self._forget(key, done))

    def cancel(self, store_id: str, file_id: str) -> None:
        task = self._tasks.get((store_id, file_id))
        if task is not None:
            task.cancel()

    def running(self) -> int:
        return sum(1 for task in self._tasks.values() if not task.done())

    def _forget(self, key: tuple[str, str], done: asyncio.Task[None]) -> None:
        if self._tasks.get(key) is done:
            del self._tasks[key]
            self._owners.pop(key, None)
        if not done.cancelled() and (error := done.exception()) is not None:
            log.warning("vector store job failed", file=key[1], error=repr(error)[:300])

    async def sweep(self) -> int:
        """Start a job for every file left in progress that nobody holds; how many."""
        started = 0
        stores = await asyncio.to_thread(self.registry.stores)
        now = self.clock()
        for store in stores:
            records = await asyncio.to_thread(self.registry.files, store.id)
            for record in records:
                if record.claimable(self.runner, now):
                    self.submit(store.id, record.id, store.owner)
                    started += 1
        return started

    async def _sweep_forever(self) -> None:
        while True:
            try:
                await self.sweep()
            except Exception as error:  # the store was unreachable: try at the next turn
                log.warning("vector store sweep failed", error=repr(error)[:300])
            await asyncio.sleep(self.lease_s)

    async def _charge(
        self,
        owner: str,
        file_id: str,
        index_key: str,
        retriever: Retriever,
        document: ParsedDocument,
    ) -> None:
        """The upload's owner pays for each index built from it, before it is built (nothing of
        it is written when it does not fit): what it will take on disk, known from its passages
        cut here (and only kept once it is paid for), within the quota, and for at most
        max_chunkings_per_file indexes of one upload."""
        assert self.usage is not None
        if await asyncio.to_thread(self.usage.counted, owner, file_id, index_key):
            return
        space = retriever.vectors_space(document)
        chunks = await asyncio.to_thread(retriever.chunks_of, document)
        size = index_footprint(
            [chunk.text for chunk in chunks], await self._vector_size(space.embedder)
        )
        await asyncio.to_thread(
            self.usage.charge,
            owner,
            file_id,
            index_key,
            size,
            quota=self.quota_bytes,
            uploads=self.files.usage,
            max_indexes=self.max_chunkings_per_file,
        )

    async def _vector_size(self, embedder: Embedder) -> int:
        """How many dimensions the embedder's vectors have: asked once per process (a server's
        model is known only by what it answers)."""
        found = self._dimensions.get(embedder.name)
        if found is None:
            unavailable = getattr(embedder, "unavailable", None)
            if unavailable is not None and unavailable() is not None:
                return ASSUMED_DIMENSIONS  # its model is not on disk yet: asked again next time
            found = self._dimensions[embedder.name] = len(await embedder.embed_query("size"))
        return found

    # -- one file -------------------------------------------------------------------------------

    def _claim(self, record: FileRecord, job: str) -> FileRecord | None:
        if not record.claimable(job, self.clock()):
            return None
        return record.model_copy(
            update={"runner": job, "runner_until": self.clock() + self.lease_s}
        )

    def _release(self, record: FileRecord, job: str) -> FileRecord | None:
        if record.runner != job:
            return None
        return record.model_copy(update={"runner": None, "runner_until": 0.0})

    async def _run(self, store_id: str, file_id: str) -> None:
        async with self._slots:
            # Each job claims under a name of its own: a job being cancelled must not release
            # (or settle) the claim of the job that replaced it in this same process.
            job = f"{self.runner}/{next(self._serial)}"
            change = self.registry.change_file
            claiming = asyncio.ensure_future(
                asyncio.to_thread(change, store_id, file_id, lambda r: self._claim(r, job))
            )
            renewing: asyncio.Task[None] | None = None
            try:
                record = await asyncio.shield(claiming)
                if record is None or record.runner != job:
                    return  # gone, finished, cancelled, or someone else's
                if record.status != "in_progress":
                    return
                renewing = asyncio.create_task(self._renew(store_id, file_id, job))
                outcome = await self._index(record)
            except asyncio.CancelledError:
                # Stopping (shutdown, cancel, delete): the claim goes back at once, even one
                # landing right now, so that a restart or another replica need not wait for it
                # to run out.
                with contextlib.suppress(Exception):
                    await claiming
                await asyncio.to_thread(change, store_id, file_id, lambda r: self._release(r, job))
                raise
            finally:
                if renewing is not None:
                    renewing.cancel()
            await asyncio.to_thread(
                change, store_id, file_id, lambda r: self._settle(r, outcome, job)
            )
            log.info(
                "vector store file indexed", store=store_id, file=file_id, status=outcome.status
            )

    def _settle(self, record: FileRecord, outcome: Outcome, job: str) -> FileRecord | None:
        if record.runner != job or record.status != "in_progress":
            return None  # cancelled meanwhile, or taken over: the outcome is not ours to write
        return record.model_copy(
            update={
                "status": outcome.status,
                "usage_bytes": outcome.usage_bytes,
                "sha256": outcome.sha256 or record.sha256,
                "kind": outcome.kind or record.kind,
                "last_error": outcome.error,
                "runner": None,
                "runner_until": 0.0,
            }
        )

    async def _renew(self, store_id: str, file_id: str, job: str) -> None:
        def extend(record: FileRecord) -> FileRecord | None:
            if record.runner != job:
                return None
            return record.model_copy(update={"runner_until": self.clock() + self.lease_s})

        while True:
            await asyncio.sleep(self.lease_s / 3)
            with contextlib.suppress(Exception):  # a hiccup: the next turn tries again
                await asyncio.to_thread(self.registry.change_file, store_id, file_id, extend)

    async def _index(self, record: FileRecord) -> Outcome:
        """Read, parse and index the file; what went wrong as the file's `last_error`."""
        try:
            return await self._read_parse_index(record)
        except FileNotFound:
            return failed("invalid_file", "the file was deleted from the Files API")
        except DocumentError as error:
            code: ErrorCode = "unsupported_file" if error.code in UNSUPPORTED else "invalid_file"
            return failed(code, error.message)
        except (PayloadTooLarge, QuotaExceeded, TooManyChunkings) as error:
            return failed("invalid_file", error.message)
        except ProxyError as error:  # the embedder, the vector store, the parser pool
            return failed("server_error", error.message)
        except Exception as error:
            log.warning("vector store file failed", file=record.id, error=repr(error)[:300])
            return failed("server_error", f"{type(error).__name__}: {error}")

    async def _read_parse_index(self, record: FileRecord) -> Outcome:
        stored, data = await asyncio.to_thread(self.files.read, record.id, None)
        document = await self.parser.parse(stored.filename, data, owner=stored.owner)
        variants = await self.variants()
        retriever = variants.for_chunking(record.chunking)
        index_key = variants.key(document.sha256, record.chunking)
        indexed = keyed(document, index_key)
        if self.usage is not None:
            await self._charge(stored.owner, stored.id, index_key, retriever, indexed)
        # Another proxy sharing the Chroma server may be indexing the same content.
        while not await retriever.index_document(indexed):
            await asyncio.sleep(min(5.0, self.lease_s / 6))
        space = retriever.vectors_space(indexed)
        passages = await retriever.passages(indexed)
        texts = [chunk.text for chunk in passages.chunks]
        usage = index_footprint(texts, await self._vector_size(space.embedder))
        return Outcome("completed", usage, document.sha256, document.kind)
