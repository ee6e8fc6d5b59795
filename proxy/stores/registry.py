"""Vector stores, their files and batches kept as records (blocking: call off the event loop).

    stores/<store-id>.json              one per store
    files/<store-id>/<file-id>.json     one per file of a store
    batches/<store-id>/<batch-id>.json  one per file batch

File records change under `RecordBackend.update`, so an indexing job finishing and a client
changing attributes at the same moment both land, whichever process or replica does them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from proxy.stores.backend import RecordBackend
from proxy.stores.records import BatchRecord, FileRecord, StoreRecord

R = TypeVar("R", bound=BaseModel)


def _decode(model: type[R], data: bytes | None) -> R | None:
    if data is None:
        return None
    try:
        return model.model_validate_json(data)
    except ValidationError:
        return None  # a torn or foreign record reads as missing


def _encode(record: BaseModel) -> bytes:
    return record.model_dump_json().encode()


class StoreRegistry:
    """Typed reads and writes of the records in one backend."""

    def __init__(self, backend: RecordBackend) -> None:
        self.backend = backend

    # -- stores --------------------------------------------------------------------------------

    def save_store(self, store: StoreRecord) -> None:
        self.backend.put(f"stores/{store.id}.json", _encode(store))

    def store(self, store_id: str) -> StoreRecord | None:
        return _decode(StoreRecord, self.backend.get(f"stores/{store_id}.json"))

    def stores(self) -> list[StoreRecord]:
        found = (self.store(name.removesuffix(".json")) for name in self.backend.names("stores/"))
        return [store for store in found if store is not None]

    def change_store(
        self, store_id: str, change: Callable[[StoreRecord], StoreRecord | None]
    ) -> StoreRecord | None:
        return self._change(f"stores/{store_id}.json", StoreRecord, change)

    def delete_store(self, store_id: str) -> None:
        """The store record first (from then on it is gone), then its files and batches."""
        self.backend.delete(f"stores/{store_id}.json")
        for name in self.backend.names(f"files/{store_id}/"):
            self.backend.delete(f"files/{store_id}/{name}")
        for name in self.backend.names(f"batches/{store_id}/"):
            self.backend.delete(f"batches/{store_id}/{name}")

    # -- files ---------------------------------------------------------------------------------

    def save_file(self, record: FileRecord) -> None:
        self.backend.put(f"files/{record.store_id}/{record.id}.json", _encode(record))

    def file(self, store_id: str, file_id: str) -> FileRecord | None:
        return _decode(FileRecord, self.backend.get(f"files/{store_id}/{file_id}.json"))

    def files(self, store_id: str) -> list[FileRecord]:
        names = self.backend.names(f"files/{store_id}/")
        found = (self.file(store_id, name.removesuffix(".json")) for name in names)
        return [record for record in found if record is not None]

    def change_file(
        self, store_id: str, file_id: str, change: Callable[[FileRecord], FileRecord | None]
    ) -> FileRecord | None:
        """Apply `change` to the file's record (None from it: leave it); the record after, or
        None when there is no such file."""
        return self._change(f"files/{store_id}/{file_id}.json", FileRecord, change)

    def delete_file(self, store_id: str, file_id: str) -> None:
        self.backend.delete(f"files/{store_id}/{file_id}.json")

    # -- batches -------------------------------------------------------------------------------

    def save_batch(self, batch: BatchRecord) -> None:
        self.backend.put(f"batches/{batch.store_id}/{batch.id}.json", _encode(batch))

    def batch(self, store_id: str, batch_id: str) -> BatchRecord | None:
        return _decode(BatchRecord, self.backend.get(f"batches/{store_id}/{batch_id}.json"))

    # -- changes -------------------------------------------------------------------------------

    def _change(self, key: str, model: type[R], change: Callable[[R], R | None]) -> R | None:
        def apply(data: bytes | None) -> bytes | None:
            current = _decode(model, data)
            if current is None:
                return None
            wanted = change(current)
            return None if wanted is None else _encode(wanted)

        return _decode(model, self.backend.update(key, apply))
