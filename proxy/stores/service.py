"""The vector stores of one proxy process: what the routes and the pipeline ask of them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from proxy.config import Settings
from proxy.errors import BadRequest
from proxy.stores import params as p
from proxy.stores.access import Caller
from proxy.stores.batches import FileBatches
from proxy.stores.chunking import Variants
from proxy.stores.errors import StoreExpired, StoreNotFound
from proxy.stores.filters import Filter
from proxy.stores.jobs import IndexingJobs
from proxy.stores.members import StoreFiles
from proxy.stores.pagination import page_request, paginate
from proxy.stores.records import (
    STORE_ID,
    BatchRecord,
    FileRecord,
    StoreRecord,
    new_store_id,
)
from proxy.stores.registry import StoreRegistry
from proxy.stores.search import StoreHit, best_hits, search_files, searchable
from proxy.stores.shapes import deleted, list_page, store_object
from proxy.stores.usage import IndexUsage

if TYPE_CHECKING:
    from proxy.documents.parser import DocumentParser
    from proxy.files.protocol import FileStore
    from proxy.retrieval.history import SearchText
    from proxy.retrieval.retriever import Retriever

T = TypeVar("T")
TOUCH_EVERY_S = 60
"""`last_active_at` moves at most once a minute: a search is not a write each time."""
CANDIDATES_PER_FILE = 20
"""Passages each file offers to the ranking across files (before the threshold and limit)."""


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
        self.uploads = files
        self.parser = parser
        self._retriever = retriever
        self._variants: Variants | None = None
        self.clock = clock
        config = settings.vector_stores
        quota = settings.server.max_storage_mb_per_key
        self.quota_bytes = None if quota is None else int(quota * 1024 * 1024)
        self.usage = IndexUsage(registry.backend)
        self.jobs = IndexingJobs(
            registry,
            files,
            parser,
            self.variants,
            runner=runner,
            concurrency=config.indexing_concurrency,
            lease_s=config.indexing_lease_s,
            clock=clock,
            usage=self.usage,
            quota_bytes=self.quota_bytes,
            max_queued_per_key=config.max_queued_per_key,
            max_queued=config.max_queued,
            max_chunkings_per_file=config.max_chunkings_per_file,
        )
        self.files = StoreFiles(self)
        self.batches = FileBatches(self, self.files)

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
    def sizes(self) -> tuple[int, int]:
        """The passage sizes of the `auto` chunking strategy."""
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

    def index_usage(self, owner: str) -> int:
        """Bytes of the indexes built from `owner`'s uploads (blocking)."""
        return self.usage.total(owner)

    def _count_of(self, owner: str) -> int:
        return sum(1 for store in self.registry.stores() if store.owner == owner)

    async def create(self, caller: Caller, body: Any) -> dict[str, Any]:
        asked = p.validated(p.CreateStore, body)
        limit = self.settings.server.max_vector_stores_per_key
        if await self._run(self._count_of, caller.name) >= limit:
            raise BadRequest(
                f"a key has at most {limit} vector stores (server.max_vector_stores_per_key);"
                " delete one first",
                param="vector_store",
                code="too_many_vector_stores",
            )
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
        found = await self.files.visible(caller, attachments, "file_ids")
        await self.files.admit(store.owner, len(attachments))
        await self._run(self.registry.save_store, store)
        await self.files.add(store, attachments, found)
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
        also: Sequence[SearchText] = (),
        carried: dict[str, list[str]] | None = None,
    ) -> list[StoreHit]:
        """The best passages of the stores' completed files passing the filter, across files;
        each query searched with `also` (a follow-up's conversation: proxy.retrieval.history)."""
        files: list[FileRecord] = []
        for store in stores:
            files += searchable(await self._run(self.registry.files, store.id), rule)
            await self.touch(store)
        if not files:
            return []
        depth = max(limit, CANDIDATES_PER_FILE)
        variants = await self.variants()
        found = await search_files(variants, files, queries, depth, self.files.load, also, carried)
        return best_hits(found, threshold, limit)
