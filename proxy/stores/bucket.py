"""Vector store records in the S3-compatible bucket the replicas share (files.backend: s3),
under `vector_stores/` of the files prefix; updates are compare-and-swap on the ETag."""

from __future__ import annotations

import contextlib
import random
import time
from typing import TYPE_CHECKING, Any

import obstore
from obstore.exceptions import BaseError

from proxy.files.objects import CONFLICTS, MISSING, StoreUnavailable
from proxy.stores.backend import Change

if TYPE_CHECKING:
    from obstore.store import S3Store

ROOT = "vector_stores"
SWAP_ATTEMPTS = 50


def _calling(what: str, call: Any) -> Any:
    try:
        return call()
    except (*MISSING, *CONFLICTS):
        raise
    except (BaseError, OSError) as error:
        raise StoreUnavailable(what, error) from error


class BucketRecords:
    """The same calls as DiskRecords, against the object store (blocking: obstore's sync API),
    under `root` (vector_stores/ unless said otherwise)."""

    def __init__(self, store: S3Store, root: str = ROOT) -> None:
        self.store = store
        self.root = root

    def _get(self, key: str) -> tuple[bytes, str] | None:
        try:
            found = obstore.get(self.store, f"{self.root}/{key}")
        except MISSING:
            return None
        return bytes(found.bytes()), str(found.meta["e_tag"])

    def get(self, key: str) -> bytes | None:
        found = _calling("read a vector store record", lambda: self._get(key))
        return None if found is None else found[0]

    def put(self, key: str, data: bytes) -> None:
        _calling(
            "save a vector store record",
            lambda: obstore.put(self.store, f"{self.root}/{key}", data),
        )

    def delete(self, key: str) -> None:
        with contextlib.suppress(*MISSING):
            _calling(
                "delete a vector store record",
                lambda: obstore.delete(self.store, f"{self.root}/{key}"),
            )

    def names(self, folder: str) -> list[str]:
        prefix = f"{self.root}/{folder}"

        def listing() -> list[str]:
            found = obstore.list_with_delimiter(self.store, prefix.rstrip("/") + "/")
            return sorted(str(meta["path"]).rsplit("/", 1)[1] for meta in found["objects"])

        return list(_calling("list vector store records", listing))

    def update(self, key: str, change: Change) -> bytes | None:
        path = f"{self.root}/{key}"
        for attempt in range(SWAP_ATTEMPTS):
            found = _calling("read a vector store record", lambda: self._get(key))
            current, etag = found if found is not None else (None, None)
            wanted = change(current)
            if wanted is None:
                return current
            mode: Any = "create" if etag is None else {"e_tag": etag}
            try:
                _calling(
                    "save a vector store record",
                    lambda: obstore.put(self.store, path, wanted, mode=mode),  # noqa: B023
                )
                return wanted
            except CONFLICTS:
                time.sleep(random.uniform(0, 0.005 * min(attempt + 1, 20)))
        raise StoreUnavailable(
            "update a vector store record",
            RuntimeError(f"{SWAP_ATTEMPTS} conflicting updates in a row"),
        )
