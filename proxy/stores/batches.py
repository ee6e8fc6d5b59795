"""File batches of vector stores: many files added at once, followed and cancelled together."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from proxy.errors import BadRequest
from proxy.stores import params as p
from proxy.stores.errors import BatchNotFound
from proxy.stores.records import BATCH_ID, BatchRecord, FileRecord, new_batch_id
from proxy.stores.shapes import batch_object

if TYPE_CHECKING:
    from proxy.stores.access import Caller, Stores
    from proxy.stores.members import StoreFiles

T = TypeVar("T")


async def _run(call: Callable[..., T], *args: Any) -> T:
    return await asyncio.to_thread(call, *args)


class FileBatches:
    """Batches are records of which files came together; their states come from the files."""

    def __init__(self, stores: Stores, files: StoreFiles) -> None:
        self.stores = stores
        self.members = files

    async def _find(self, caller: Caller, store_id: str, batch_id: str) -> BatchRecord:
        await self.stores.owned(caller, store_id)
        batch = None
        if BATCH_ID.match(batch_id):
            batch = await _run(self.stores.registry.batch, store_id, batch_id)
        if batch is None:
            raise BatchNotFound(store_id, batch_id)
        return batch

    async def _describe(self, batch: BatchRecord) -> dict[str, Any]:
        records = [
            record
            for record in await _run(self.stores.registry.files, batch.store_id)
            if record.batch_id == batch.id
        ]
        return batch_object(batch, records)

    async def create(self, caller: Caller, store_id: str, body: Any) -> dict[str, Any]:
        asked = p.validated(p.CreateBatch, body)
        store = await self.stores.owned(caller, store_id)
        attachments = asked.attachments()
        param = "files" if asked.files is not None else "file_ids"
        if not attachments:
            raise BadRequest(f"{param}: give at least one file", param=param, code="invalid_value")
        p.attributes(asked.attributes)
        found = await self.members.visible(caller, attachments, param)
        batch = BatchRecord(
            id=new_batch_id(),
            store_id=store.id,
            created=self.stores.clock(),
            file_ids=[a.file_id for a in attachments],
        )
        await _run(self.stores.registry.save_batch, batch)
        await self.members.add(store, attachments, found, batch.id)
        return await self._describe(batch)

    async def get(self, caller: Caller, store_id: str, batch_id: str) -> dict[str, Any]:
        return await self._describe(await self._find(caller, store_id, batch_id))

    async def cancel(self, caller: Caller, store_id: str, batch_id: str) -> dict[str, Any]:
        """Files of the batch not indexed yet are cancelled (and leave the store's search)."""
        batch = await self._find(caller, store_id, batch_id)
        batch = batch.model_copy(update={"cancelled": True})
        await _run(self.stores.registry.save_batch, batch)

        def cancelled(record: FileRecord) -> FileRecord | None:
            if record.batch_id != batch_id or record.status != "in_progress":
                return None
            return record.model_copy(update={"status": "cancelled", "runner": None})

        for file_id in batch.file_ids:
            self.stores.jobs.cancel(store_id, file_id)
            await _run(self.stores.registry.change_file, store_id, file_id, cancelled)
        return await self._describe(batch)

    async def files(
        self, caller: Caller, store_id: str, batch_id: str, query: Mapping[str, str]
    ) -> dict[str, Any]:
        await self._find(caller, store_id, batch_id)
        return await self.members.page(caller, store_id, query, batch_id=batch_id)
