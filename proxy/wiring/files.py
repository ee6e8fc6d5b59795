"""The file store and what hangs off the bucket the replicas share, made from the settings."""

from __future__ import annotations

import asyncio
import contextvars
import os
import socket
import uuid
from typing import TYPE_CHECKING

import structlog

from proxy.config import Settings
from proxy.files.protocol import FileStore
from proxy.files.store import DiskFileStore
from proxy.pipeline.services import Services
from proxy.wiring.folders import data_dir, disk_room

if TYPE_CHECKING:
    from obstore.store import S3Store

    from proxy.documents.shared import SharedParseCache
    from proxy.responses.owners import Owners
    from proxy.stores.service import VectorStores

log = structlog.get_logger(__name__)


def replica_name() -> str:
    """This process among the replicas: who holds a lease."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def make_object_store(settings: Settings) -> S3Store | None:
    """`files.backend: s3`: the bucket every replica shares, checked before first use (blocks:
    one probe object written, replaced and deleted); None for local files."""
    if settings.files.backend != "s3":
        return None
    from proxy.files.objects import check_conditional_writes, make_object_store

    store = make_object_store(settings.files)
    check_conditional_writes(store)
    log.info(
        "files in object storage",
        bucket=settings.files.bucket,
        prefix=settings.files.prefix,
        endpoint=settings.files.endpoint_url or "aws",
    )
    return store


def make_files(settings: Settings, objects: S3Store | None = None) -> FileStore:
    quota = settings.server.max_storage_mb_per_key
    max_bytes = int(settings.documents.max_file_mb * 1024 * 1024)
    quota_bytes = None if quota is None else int(quota * 1024 * 1024)
    if objects is not None:
        from proxy.files.s3 import S3FileStore

        return S3FileStore(objects, max_bytes, quota_bytes)
    return DiskFileStore(
        data_dir(settings) / "files", max_bytes, quota_bytes=quota_bytes, disk=disk_room(settings)
    )


def start_file_sweep(
    settings: Settings, files: FileStore, objects: S3Store | None
) -> asyncio.Task[None] | None:
    """`files.backend: s3`: orphans swept now and every `files.sweep_every_min` (0: never), by
    one process of all the replicas per interval."""
    every_min = settings.files.sweep_every_min
    if objects is None or every_min <= 0:
        return None
    from proxy.files.lease import ObjectLeases
    from proxy.files.s3 import S3FileStore
    from proxy.files.s3_sweep import OrphanSweep, sweep_forever

    assert isinstance(files, S3FileStore)
    sweep = OrphanSweep(files, settings.files.orphan_age_min * 60)
    # One process of all the replicas sweeps per interval: the lease lasts the interval.
    leases = ObjectLeases(objects, replica_name(), lease_s=every_min * 60)
    # A context of its own: the sweep outlives whatever started the process (its logs too).
    return asyncio.create_task(
        sweep_forever(sweep, every_min * 60, leases),
        name="file-store-sweep",
        context=contextvars.Context(),
    )


def make_shared_cache(settings: Settings, objects: S3Store | None) -> SharedParseCache | None:
    if objects is None or not settings.files.share_parsed:
        return None
    from proxy.documents.shared import SharedParseCache
    from proxy.files.lease import ObjectLeases

    return SharedParseCache(objects, ObjectLeases(objects, replica_name()))


def make_vector_stores(services: Services, objects: S3Store | None) -> VectorStores:
    """The vector stores API: records under <data_dir>/vector_stores, or in the bucket the
    replicas share; their indexing resumes in the background."""
    from proxy.stores.backend import DiskRecords, RecordBackend
    from proxy.stores.registry import StoreRegistry
    from proxy.stores.service import VectorStores

    backend: RecordBackend
    if objects is not None:
        from proxy.stores.bucket import BucketRecords

        backend = BucketRecords(objects)
    else:
        backend = DiskRecords(data_dir(services.settings) / "vector_stores")
    stores = VectorStores(
        services.settings,
        StoreRegistry(backend),
        services.files,
        services.parser,
        services.retriever,
        runner=replica_name(),
    )
    stores.start()
    # A key's quota holds its uploads and the indexes its stores built from them.
    services.files.other_usage = stores.index_usage
    return stores


def make_owners(settings: Settings, objects: S3Store | None) -> Owners | None:
    """`upstream.responses: native`: the owners of the upstream's response and conversation
    ids, under <data_dir>/responses or in the bucket the replicas share."""
    if settings.upstream.responses != "native":
        return None
    from proxy.responses.owners import Owners
    from proxy.stores.backend import DiskRecords, RecordBackend

    backend: RecordBackend
    if objects is not None:
        from proxy.stores.bucket import BucketRecords

        backend = BucketRecords(objects, root="responses")
    else:
        backend = DiskRecords(data_dir(settings) / "responses")
    return Owners(backend, keep_s=settings.upstream.responses_keep_days * 86400)
