"""What vector stores hold in the index, counted against the storage quota of the key whose
upload it was built from (blocking: call off the event loop).

    usage/<owner-hex>/<file-id>.json    {"<index key>": bytes, ...}

An upload's passages are an index of their own for each chunking asked of it (see
proxy.stores.chunking), and each stays in the index once built: attaching the same upload with
other chunk sizes builds another. So every index built from an upload counts, once, for as
long as the upload exists: detaching it or deleting a store frees nothing, deleting the upload
frees all of it. An index counts what it takes on disk (proxy.stores.footprint), not the bytes
of its passages' text (about 15 times less), and an upload has at most
`vector_stores.max_chunkings_per_file` of them.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from proxy.files.protocol import QuotaExceeded
from proxy.stores.backend import RecordBackend
from proxy.stores.errors import TooManyChunkings


def _folder(owner: str) -> str:
    return f"usage/{owner.encode().hex()}/"


def _decode(data: bytes | None) -> dict[str, int]:
    if data is None:
        return {}
    try:
        found = json.loads(data)
    except ValueError:
        return {}
    if not isinstance(found, dict):
        return {}
    return {str(k): int(v) for k, v in found.items() if isinstance(v, int) and v >= 0}


class IndexUsage:
    """Bytes of passages indexed per owner, per upload, per index."""

    def __init__(self, backend: RecordBackend) -> None:
        self.backend = backend

    def total(self, owner: str) -> int:
        folder = _folder(owner)
        return sum(
            sum(_decode(self.backend.get(folder + name)).values())
            for name in self.backend.names(folder)
        )

    def counted(self, owner: str, file_id: str, index_key: str) -> bool:
        """Whether the index `index_key` built from `file_id` is counted already."""
        return index_key in _decode(self.backend.get(f"{_folder(owner)}{file_id}.json"))

    def charge(
        self,
        owner: str,
        file_id: str,
        index_key: str,
        size: int,
        *,
        quota: int | None,
        uploads: Callable[[str], int],
        max_indexes: int | None = None,
    ) -> None:
        """Count `size` bytes of the index `index_key` built from `file_id` against `owner`,
        unless counted already; QuotaExceeded (nothing counted) when it does not fit,
        TooManyChunkings when the upload has `max_indexes` other indexes already."""
        key = f"{_folder(owner)}{file_id}.json"
        held = _decode(self.backend.get(key))
        if index_key in held:
            return
        if max_indexes is not None and len(held) >= max_indexes:
            raise TooManyChunkings(max_indexes)
        if quota is not None and uploads(owner) + self.total(owner) + size > quota:
            raise QuotaExceeded(quota)

        def counted(data: bytes | None) -> bytes | None:
            held = _decode(data)
            if index_key in held:
                return None
            return json.dumps({**held, index_key: size}).encode()

        self.backend.update(key, counted)

    def release(self, owner: str, file_id: str) -> None:
        """The upload is gone: its indexes count no more."""
        self.backend.delete(f"{_folder(owner)}{file_id}.json")
