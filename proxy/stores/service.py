"""The vector stores of one proxy process: what the routes and the pipeline ask of them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from proxy.config import Settings
from proxy.errors import BadRequest
from proxy.files.protocol import FILE_ID, FileNotFound, StoredFile
from proxy.stores import params as p
from proxy.stores.chunking import Variants, keyed
from proxy.stores.errors import BatchNotFound, StoreExpired, StoreFileNotFound, StoreNotFound
from proxy.stores.filters import Filter
from proxy.stores.jobs import IndexingJobs
from proxy.stores.pagination import page_request, paginate
from proxy.stores.records import (
    BATCH_ID,
    STORE_ID,
    BatchRecord,
    Chunking,
    FileRecord,
    StoreRecord,
    new_batch_id,
    new_store_id,
)
from proxy.stores.registry import StoreRegistry
from proxy.stores.search import StoreHit, best_hits, search_files, searchable
from proxy.stores.shapes import batch_object, deleted, file_object, list_page, store_object

if TYPE_CHECKING:
    from proxy.documents.model import ParsedDocument
    from proxy.documents.parser import DocumentParser
    from proxy.files.protocol import FileStore
    from proxy.retrieval.retriever import Retriever

T = TypeVar("T")
TOUCH_EVERY_S = 60
"""`last_active_at` moves at most once a minute: a search is not a write each time."""
CANDIDATES_PER_FILE = 20
"""Passages each file offers to the ranking across files (before the threshold and limit)."""


class Caller(Protocol):
    """Who asks: the key's name (what it makes is its own) and whose things it sees (None:
    everyone's, an admin)."""

    @property
    def name(self) -> str: ...

    @property
    def scope(self) -> str | None: ...


def _sort_key(record: StoreRecord | FileRecord | BatchRecord) -> tuple[float, str]:
    return record.created, record.id


class VectorStores:
    """Stores, their files and batches (records in a StoreRegistry), indexing jobs, search."""

    def __init__(
        self,
        settings: Settings,
        registry: StoreRegistry,
        files: FileStore,
        parser: DocumentParser,
        retriever: Callable[[], Awaitable[Retriever]],
        *,
        runner: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.files = files
        self.parser = parser
        self._retriever = retriever
        self._variants: Variants | None = None
        self.clock = clock
        config = settings.vector_stores
        self.jobs = IndexingJobs(
            registry,
            files,
            parser,
            self.variants,
            runner=runner,
            concurrency=config.indexing_concurrency,
            lease_s=config.indexing_lease_s,
            clock=clock,
        )

    async def variants(self) -> Variants:
        """The retrievers for the stores' chunkings (opening the index on first use)."""
        if self._variants is None:
            retriever = await self._retriever()
            self._variants = self._variants or Variants(retriever)
        return self._variants

    def start(self) -> None:
        self.jobs.start()

    async def close(self) -> None:
        await self.jobs.close()
        if self._variants is not None:
            await self._variants.close()

    @staticmethod
    async def _run(call: Callable[..., T], *args: Any) -> T:
        return await asyncio.to_thread(call, *args)

    @property
    def _sizes(self) -> tuple[int, int]:
        retrieval = self.settings.retrieval
        return retrieval.chunk_tokens, retrieval.chunk_overlap

    # -- stores ---------------------------------------------------------------------------------

    async def owned(self, caller: Caller, store_id: str) -> StoreRecord:
        """The store, if the caller may see it (its owner, or an admin)."""
        store = await self._run(self.registry.store, store_id) if STORE_ID.match(store_id) else None
        if store is None or (caller.scope is not None and store.owner != caller.scope):
            raise StoreNotFound(store_id)
        return store

    async def usable(self, caller: Caller, store_id: str) -> StoreRecord:
        """The store, if the caller may see it and it has not expired."""
        store = await self.owned(caller, store_id)
        if store.expired(self.clock()):
            raise StoreExpired(store_id)
        return store

    async def describe(self, store: StoreRecord) -> dict[str, Any]:
        records = await self._run(self.registry.files, store.id)
        return store_object(store, records, self.clock())

    async def create(self, caller: Caller, body: Any) -> dict[str, Any]:
        asked = p.validated(p.CreateStore, body)
        now = self.clock()
        store = StoreRecord(
            id=new_store_id(),
            owner=caller.name,
            created=now,
            name=asked.name or "",
            description=asked.description,
            metadata=p.metadata(asked.metadata),
            expires_after=asked.expires_after.record() if asked.expires_after else None,
            last_active_at=int(now),
        )
        attachments = [
            p.AttachFile(file_id=file_id, chunking_strategy=asked.chunking_strategy)
            for file_id in asked.file_ids
        ]
        found = await self._visible_files(caller, attachments, "file_ids")
        await self._run(self.registry.save_store, store)
        await self._attach(store, attachments, found)
        return await self.describe(store)

    async def list_stores(self, caller: Caller, query: Mapping[str, str]) -> dict[str, Any]:
        request = page_request(query)
        stores = [
            store
            for store in await self._run(self.registry.stores)
            if caller.scope is None or store.owner == caller.scope
        ]
        page, more = paginate(stores, request, _sort_key)
        return list_page([await self.describe(store) for store in page], more)

    async def retrieve(self, caller: Caller, store_id: str) -> dict[str, Any]:
        return await self.describe(await self.owned(caller, store_id))

    async def modify(self, caller: Caller, store_id: str, body: Any) -> dict[str, Any]:
        asked = p.validated(p.ModifyStore, body)
        await self.owned(caller, store_id)
        changes: dict[str, Any] = {}
        if asked.name is not None:
            changes["name"] = asked.name
        if "metadata" in asked.model_fields_set:
            changes["metadata"] = p.metadata(asked.metadata)
        if "expires_after" in asked.model_fields_set:  # null: never expires
            changes["expires_after"] = asked.expires_after.record() if asked.expires_after else None
        store = await self._run(
            self.registry.change_store, store_id, lambda s: s.model_copy(update=changes)
        )
        if store is None:
            raise StoreNotFound(store_id)
        return await self.describe(store)

    async def delete(self, caller: Caller, store_id: str) -> dict[str, Any]:
        """The store and its files' membership go; the uploaded Files stay, as on OpenAI."""
        await self.owned(caller, store_id)
        for record in await self._run(self.registry.files, store_id):
            self.jobs.cancel(store_id, record.id)
        await self._run(self.registry.delete_store, store_id)
        return deleted(store_id, "vector_store")

    async def touch(self, store: StoreRecord) -> None:
        """The store was used: its expiry counts from now."""
        now = int(self.clock())
        if now - store.last_active_at < TOUCH_EVERY_S:
            return

        def moved(current: StoreRecord) -> StoreRecord | None:
            if now - current.last_active_at < TOUCH_EVERY_S:
                return None
            return current.model_copy(update={"last_active_at": now})

        await self._run(self.registry.change_store, store.id, moved)

    # -- files of a store -----------------------------------------------------------------------

    async def _visible_files(
        self, caller: Caller, attachments: list[p.AttachFile], param: str
    ) -> list[StoredFile]:
        """The Files being attached, each one the caller may see (404 otherwise)."""
        found = []
        for index, attachment in enumerate(attachments):
            p.attributes(attachment.attributes, f"{param}[{index}].attributes")
            if not FILE_ID.match(attachment.file_id):
                raise FileNotFound(attachment.file_id)
            found.append(await self._run(self.files.get, attachment.file_id, caller.scope))
        return found

    async def _attach(
        self,
        store: StoreRecord,
        attachments: list[p.AttachFile],
        found: list[StoredFile],
        batch_id: str | None = None,
    ) -> list[FileRecord]:
        """New file records (in progress) and their indexing jobs; a file attached again is
        indexed again with its new attributes and chunking."""
        if store.expired(self.clock()):
            raise StoreExpired(store.id)
        limit = self.settings.vector_stores.max_files_per_store
        present = {record.id for record in await self._run(self.registry.files, store.id)}
        if len(present | {a.file_id for a in attachments}) > limit:
            raise BadRequest(
                f"a vector store holds at most {limit} files (vector_stores.max_files_per_store)",
                param="file_ids",
                code="too_many_files",
            )
        records = []
        for attachment, stored in zip(attachments, found, strict=True):
            strategy = attachment.chunking_strategy
            record = FileRecord(
                id=stored.id,
                store_id=store.id,
                created=self.clock(),
                filename=stored.filename,
                attributes=p.attributes(attachment.attributes),
                chunking=strategy.record() if strategy else Chunking(),
                batch_id=batch_id,
            )
            self.jobs.cancel(store.id, record.id)  # an earlier run of the same file
            await self._run(self.registry.save_file, record)
            records.append(record)
        for record in records:
            self.jobs.submit(store.id, record.id)
        await self.touch(store)
        return records

    def _file_object(self, record: FileRecord) -> dict[str, Any]:
        return file_object(record, *self._sizes)

    async def attach(self, caller: Caller, store_id: str, body: Any) -> dict[str, Any]:
        asked = p.validated(p.AttachFile, body)
        store = await self.owned(caller, store_id)
        found = await self._visible_files(caller, [asked], "file_id")
        (record,) = await self._attach(store, [asked], found)
        return self._file_object(record)

    async def _file(self, caller: Caller, store_id: str, file_id: str) -> FileRecord:
        await self.owned(caller, store_id)
        record = await self._run(self.registry.file, store_id, file_id)
        if record is None or not FILE_ID.match(file_id):
            raise StoreFileNotFound(store_id, file_id)
        return record

    async def list_files(
        self, caller: Caller, store_id: str, query: Mapping[str, str], batch_id: str | None = None
    ) -> dict[str, Any]:
        request = page_request(query)
        wanted = query.get("filter")
        if wanted is not None and wanted not in ("in_progress", "completed", "failed", "cancelled"):
            raise BadRequest(
                "filter must be in_progress, completed, failed or cancelled",
                param="filter",
                code="invalid_value",
            )
        await self.owned(caller, store_id)
        records = [
            record
            for record in await self._run(self.registry.files, store_id)
            if (wanted is None or record.status == wanted)
            and (batch_id is None or record.batch_id == batch_id)
        ]
        page, more = paginate(records, request, _sort_key)
        return list_page([self._file_object(record) for record in page], more)

    async def get_file(self, caller: Caller, store_id: str, file_id: str) -> dict[str, Any]:
        return self._file_object(await self._file(caller, store_id, file_id))

    async def update_file(
        self, caller: Caller, store_id: str, file_id: str, body: Any
    ) -> dict[str, Any]:
        asked = p.validated(p.UpdateFile, body)
        attributes = p.attributes(asked.attributes)
        await self._file(caller, store_id, file_id)
        record = await self._run(
            self.registry.change_file,
            store_id,
            file_id,
            lambda r: r.model_copy(update={"attributes": attributes}),
        )
        if record is None:
            raise StoreFileNotFound(store_id, file_id)
        return self._file_object(record)

    async def detach(self, caller: Caller, store_id: str, file_id: str) -> dict[str, Any]:
        """The file leaves the store (and its search); the File itself stays."""
        await self._file(caller, store_id, file_id)
        self.jobs.cancel(store_id, file_id)
        await self._run(self.registry.delete_file, store_id, file_id)
        return deleted(file_id, "vector_store.file")

    async def file_content(self, caller: Caller, store_id: str, file_id: str) -> dict[str, Any]:
        """The file's parsed text, unit by unit (pages, sections, sheets, slides)."""
        record = await self._file(caller, store_id, file_id)
        document = await self.document(record)
        return {
            "object": "vector_store.file_content.page",
            "data": [{"type": "text", "text": page.text} for page in document.pages if page.text],
            "has_more": False,
            "next_page": None,
            "file_id": record.id,
            "filename": record.filename,
            "attributes": record.attributes,
        }

    async def document(self, record: FileRecord) -> ParsedDocument:
        """The file's parsed text: from the parse cache, else parsed again from its bytes."""
        if record.sha256 and record.kind:
            cached = self.parser.cache.get(record.sha256, record.kind)
            if cached is not None:
                return cached
        try:
            stored, data = await self._run(self.files.read, record.id, None)
        except FileNotFound:
            raise StoreFileNotFound(record.store_id, record.id) from None
        return await self.parser.parse(stored.filename, data)

    async def _load(self, record: FileRecord, key: str) -> ParsedDocument:
        return keyed(await self.document(record), key)

    async def forget_file(self, file_id: str) -> None:
        """A File was deleted: it leaves every store (its text must not be found any more)."""
        for store in await self._run(self.registry.stores):
            if await self._run(self.registry.file, store.id, file_id) is not None:
                self.jobs.cancel(store.id, file_id)
                await self._run(self.registry.delete_file, store.id, file_id)

    # -- batches --------------------------------------------------------------------------------

    async def _batch(self, caller: Caller, store_id: str, batch_id: str) -> BatchRecord:
        await self.owned(caller, store_id)
        batch = None
        if BATCH_ID.match(batch_id):
            batch = await self._run(self.registry.batch, store_id, batch_id)
        if batch is None:
            raise BatchNotFound(store_id, batch_id)
        return batch

    async def _describe_batch(self, batch: BatchRecord) -> dict[str, Any]:
        records = [
            record
            for record in await self._run(self.registry.files, batch.store_id)
            if record.batch_id == batch.id
        ]
        return batch_object(batch, records)

    async def create_batch(self, caller: Caller, store_id: str, body: Any) -> dict[str, Any]:
        asked = p.validated(p.CreateBatch, body)
        store = await self.owned(caller, store_id)
        attachments = asked.attachments()
        param = "files" if asked.files is not None else "file_ids"
        if not attachments:
            raise BadRequest(f"{param}: give at least one file", param=param, code="invalid_value")
        p.attributes(asked.attributes)
        found = await self._visible_files(caller, attachments, param)
        batch = BatchRecord(
            id=new_batch_id(),
            store_id=store.id,
            created=self.clock(),
            file_ids=[a.file_id for a in attachments],
        )
        await self._run(self.registry.save_batch, batch)
        await self._attach(store, attachments, found, batch.id)
        return await self._describe_batch(batch)

    async def get_batch(self, caller: Caller, store_id: str, batch_id: str) -> dict[str, Any]:
        return await self._describe_batch(await self._batch(caller, store_id, batch_id))

    async def cancel_batch(self, caller: Caller, store_id: str, batch_id: str) -> dict[str, Any]:
        """Files of the batch not indexed yet are cancelled (and leave the store's search)."""
        batch = await self._batch(caller, store_id, batch_id)
        batch = batch.model_copy(update={"cancelled": True})
        await self._run(self.registry.save_batch, batch)

        def cancelled(record: FileRecord) -> FileRecord | None:
            if record.batch_id != batch_id or record.status != "in_progress":
                return None
            return record.model_copy(update={"status": "cancelled", "runner": None})

        for file_id in batch.file_ids:
            self.jobs.cancel(store_id, file_id)
            await self._run(self.registry.change_file, store_id, file_id, cancelled)
        return await self._describe_batch(batch)

    async def batch_files(
        self, caller: Caller, store_id: str, batch_id: str, query: Mapping[str, str]
    ) -> dict[str, Any]:
        await self._batch(caller, store_id, batch_id)
        return await self.list_files(caller, store_id, query, batch_id=batch_id)

    # -- search ---------------------------------------------------------------------------------

    async def search(self, caller: Caller, store_id: str, body: Any) -> dict[str, Any]:
        asked = p.validated(p.Search, body)
        queries = asked.queries()
        rule = asked.filter()
        store = await self.usable(caller, store_id)
        ranking = asked.ranking_options
        threshold = ranking.score_threshold if ranking and ranking.score_threshold else 0.0
        limit = asked.max_num_results or self.settings.vector_stores.default_max_results
        hits = await self.search_stores([store], queries, rule, limit, threshold)
        return {
            "object": "vector_store.search_results.page",
            "search_query": queries,
            "data": [hit.result() for hit in hits],
            "has_more": False,
            "next_page": None,
        }

    async def search_stores(
        self,
        stores: list[StoreRecord],
        queries: list[str],
        rule: Filter | None,
        limit: int,
        threshold: float,
    ) -> list[StoreHit]:
        """The best passages of the stores' completed files passing the filter, across files."""
        files: list[FileRecord] = []
        for store in stores:
            files += searchable(await self._run(self.registry.files, store.id), rule)
            await self.touch(store)
        if not files:
            return []
        depth = max(limit, CANDIDATES_PER_FILE)
        found = await search_files(await self.variants(), files, queries, depth, self._load)
        return best_hits(found, threshold, limit)
