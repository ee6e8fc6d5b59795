"""Vector stores in the object store the replicas share (a real SeaweedFS; skipped without
it): records updated by compare-and-swap, stores seen and changed from any replica."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from proxy.config import FileStoreSettings
from proxy.files.objects import make_object_store
from proxy.stores.bucket import BucketRecords
from proxy.stores.registry import StoreRegistry
from tests.callers import sdk
from tests.stores.support import FAST, upload_topics, wait_until

CATS = "What did the keeper feed the cats?"


def test_concurrent_updates_all_land(s3_files: FileStoreSettings) -> None:
    records = BucketRecords(make_object_store(s3_files))
    records.put("counters/c.json", b"0")

    def bump(_: int) -> None:
        records.update("counters/c.json", lambda data: str(int(data or b"0") + 1).encode())

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(bump, range(12)))
    assert records.get("counters/c.json") == b"12"
    assert records.names("counters/") == ["c.json"]
    records.delete("counters/c.json")
    records.delete("counters/c.json")  # a missing record is no error
    assert records.get("counters/c.json") is None
    # An update of a record that is gone does not bring it back.
    assert records.update("counters/c.json", lambda data: None if data is None else b"1") is None
    assert StoreRegistry(records).stores() == []


def test_replicas_share_the_stores(
    make_proxy: Callable[..., str], s3_files: FileStoreSettings, tmp_path: Path
) -> None:
    first, second = (
        make_proxy(
            server={"data_dir": str(tmp_path / f"replica-{n}")},
            files=s3_files.model_dump(),
            vector_stores=FAST,
        )
        for n in range(2)
    )
    a, b = sdk(first), sdk(second)
    ids = upload_topics(a)
    store = a.vector_stores.create(name="shared", file_ids=list(ids.values()))
    wait_until(lambda: b.vector_stores.retrieve(store.id).status == "completed")
    assert [s.id for s in b.vector_stores.list()] == [store.id]
    # The other replica has neither the passages nor the vectors: it reads the parsed text
    # from the bucket and indexes it on the way.
    assert next(iter(b.vector_stores.search(store.id, query=CATS))).file_id == ids["lighthouse.txt"]
    b.vector_stores.files.delete(ids["lighthouse.txt"], vector_store_id=store.id)
    assert ids["lighthouse.txt"] not in {
        r.file_id for r in a.vector_stores.search(store.id, query=CATS)
    }
    a.vector_stores.delete(store.id)
    assert list(b.vector_stores.list()) == []
