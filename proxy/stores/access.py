"""Who asks, and what the stores' files and batches use of the stores (no import of the service)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from proxy.config import Settings
    from proxy.documents.parser import DocumentParser
    from proxy.files.protocol import FileStore
    from proxy.stores.jobs import IndexingJobs
    from proxy.stores.records import StoreRecord
    from proxy.stores.registry import StoreRegistry
    from proxy.stores.usage import IndexUsage


class Caller(Protocol):
    """Who asks: the key's name (what it makes is its own) and whose things it sees (None:
    everyone's, an admin)."""

    @property
    def name(self) -> str: ...

    @property
    def scope(self) -> str | None: ...


class Stores(Protocol):
    """The part of `VectorStores` that its files (`StoreFiles`) and batches (`FileBatches`) use."""

    settings: Settings
    registry: StoreRegistry
    uploads: FileStore
    parser: DocumentParser
    jobs: IndexingJobs
    clock: Callable[[], float]
    quota_bytes: int | None
    usage: IndexUsage

    def index_usage(self, owner: str) -> int: ...

    @property
    def sizes(self) -> tuple[int, int]: ...

    async def owned(self, caller: Caller, store_id: str) -> StoreRecord: ...

    async def touch(self, store: StoreRecord) -> None: ...
