"""The files of vector stores: adding (and indexing), listing, attributes, content, removing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from proxy.errors import BadRequest
from proxy.files.protocol import FILE_ID, FileNotFound, QuotaExceeded, StoredFile
from proxy.stores import params as p
from proxy.stores.chunking import keyed
from proxy.stores.errors import StoreExpired, StoreFileNotFound
from proxy.stores.pagination import page_request, paginate
from proxy.stores.records import Chunking, FileRecord, StoreRecord
from proxy.stores.shapes import deleted, file_object, list_page

if TYPE_CHECKING:
    from proxy.documents.model import ParsedDocument
    from proxy.stores.access import Caller, Stores

T = TypeVar("T")


async def _run(call: Callable[..., T], *args: Any) -> T:
    return await asyncio.to_thread(call, *args)


def _sort_key(record: FileRecord) -> tuple[float, str]:
    return record.created, record.id


class StoreFiles:
    """What happens to the files of the stores; ownership is checked on the store."""

    def __init__(self, stores: Stores) -> None:
        self.stores = stores

    async def visible(
        self, caller: Caller, attachments: list[p.AttachFile], param: str
    ) -> list[StoredFile]:
        """The Files being attached, each one the caller may see (404 otherwise)."""
        found = []
        for index, attachment in enumerate(attachments):
            p.attributes(attachment.attributes, f"{param}[{index}].attributes")
            if not FILE_ID.match(attachment.file_id):
                raise FileNotFound(attachment.file_id)
            found.append(await _run(self.stores.uploads.get, attachment.file_id, caller.scope))
        return found

    async def add(
        self,
        store: StoreRecord,
        attachments: list[p.AttachFile],
        found: list[StoredFile],
        batch_id: str | None = None,
    ) -> list[FileRecord]:
        """New file records (in progress) and their indexing jobs; a file attached again is
        indexed again with its new attributes and chunking."""
        if store.expired(self.stores.clock()):
            raise StoreExpired(store.id)
        await self.admit(store.owner, len(attachments))
        limit = self.stores.settings.vector_stores.max_files_per_store
        present = {record.id for record in await _run(self.stores.registry.files, store.id)}
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
                created=self.stores.clock(),
                filename=stored.filename,
                attributes=p.attributes(attachment.attributes),
                chunking=strategy.record() if strategy else Chunking(),
                batch_id=batch_id,
            )
            self.stores.jobs.cancel(store.id, record.id)  # an earlier run of the same file
            await _run(self.stores.registry.save_file, record)
            records.append(record)
        for record in records:
            self.stores.jobs.submit(store.id, record.id, store.owner)
        await self.stores.touch(store)
        return records

    async def admit(self, owner: str, count: int) -> None:
        """Refused before anything is saved: `count` more files to index for `owner`, with
        the queue full or the key's quota full already."""
        if count:
            self.stores.jobs.check_room(owner, count)
            await _run(self._check_storage, owner)

    def _check_storage(self, owner: str) -> None:
        """507 when the key's uploads and indexes fill its quota already (what a new index
        takes is known once its passages are cut: the indexing job checks that)."""
        quota = self.stores.quota_bytes
        if quota is None:
            return
        if self.stores.uploads.usage(owner) + self.stores.index_usage(owner) >= quota:
            raise QuotaExceeded(quota)

    def describe(self, record: FileRecord) -> dict[str, Any]:
        return file_object(record, *self.stores.sizes)

    async def attach(self, caller: Caller, store_id: str, body: Any) -> dict[str, Any]:
        asked = p.validated(p.AttachFile, body)
        store = await self.stores.owned(caller, store_id)
        found = await self.visible(caller, [asked], "file_id")
        (record,) = await self.add(store, [asked], found)
        return self.describe(record)

    async def _file(self, caller: Caller, store_id: str, file_id: str) -> FileRecord:
        await self.stores.owned(caller, store_id)
        # The id's pattern first: it becomes part of a file name (or an object key).
        record = (
            await _run(self.stores.registry.file, store_id, file_id)
            if FILE_ID.match(file_id)
            else None
        )
        if record is None:
            raise StoreFileNotFound(store_id, file_id)
        return record

    async def page(
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
        await self.stores.owned(caller, store_id)
        records = [
            record
            for record in await _run(self.stores.registry.files, store_id)
            if (wanted is None or record.status == wanted)
            and (batch_id is None or record.batch_id == batch_id)
        ]
        page, more = paginate(records, request, _sort_key)
        return list_page([self.describe(record) for record in page], more)

    async def get(self, caller: Caller, store_id: str, file_id: str) -> dict[str, Any]:
        return self.describe(await self._file(caller, store_id, file_id))

    async def update(
        self, caller: Caller, store_id: str, file_id: str, body: Any
    ) -> dict[str, Any]:
        asked = p.validated(p.UpdateFile, body)
        attributes = p.attributes(asked.attributes)
        await self._file(caller, store_id, file_id)
        record = await _run(
            self.stores.registry.change_file,
            store_id,
            file_id,
            lambda r: r.model_copy(update={"attributes": attributes}),
        )
        if record is None:
            raise StoreFileNotFound(store_id, file_id)
        return self.describe(record)

    async def detach(self, caller: Caller, store_id: str, file_id: str) -> dict[str, Any]:
        """The file leaves the store (and its search); the File itself stays."""
        await self._file(caller, store_id, file_id)
        self.stores.jobs.cancel(store_id, file_id)
        await _run(self.stores.registry.delete_file, store_id, file_id)
        return deleted(file_id, "vector_store.file")

    async def content(self, caller: Caller, store_id: str, file_id: str) -> dict[str, Any]:
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
            cached = self.stores.parser.cache.get(record.sha256, record.kind)
            if cached is not None:
                return cached
        try:
            stored, data = await _run(self.stores.uploads.read, record.id, None)
        except FileNotFound:
            raise StoreFileNotFound(record.store_id, record.id) from None
        return await self.stores.parser.parse(stored.filename, data, owner=stored.owner)

    async def load(self, record: FileRecord, key: str) -> ParsedDocument:
        return keyed(await self.document(record), key)

    async def forget(self, file_id: str, owner: str | None = None) -> None:
        """A File was deleted: it leaves every store (its text must not be found any more),
        and its indexes count against its `owner` no more."""
        if owner is not None:
            await _run(self.stores.usage.release, owner, file_id)
        for store in await _run(self.stores.registry.stores):
            if await _run(self.stores.registry.file, store.id, file_id) is not None:
                self.stores.jobs.cancel(store.id, file_id)
                await _run(self.stores.registry.delete_file, store.id, file_id)
