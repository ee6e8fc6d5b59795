"""The S3 file store with several replicas acting at once on one bucket (a real SeaweedFS): the
same bytes are stored once, and a delete racing an upload of the same bytes never loses it."""

from __future__ import annotations

import multiprocessing
import threading
import time

import obstore
import pytest

from proxy.config import FileStoreSettings
from proxy.files.blob_refs import BlobReferences
from proxy.files.objects import StoreUnavailable, make_object_store
from proxy.files.protocol import StoredFile
from proxy.files.s3 import S3FileStore

DATA = b"the same bytes every time"
ROUNDS = 60


def replica(files: FileStoreSettings) -> S3FileStore:
    """A store object with its own client, as each proxy replica has."""
    return S3FileStore(make_object_store(files), 1000)


def upload(store: S3FileStore, owner: str, data: bytes = DATA) -> StoredFile:
    pending = store.begin_upload(owner)
    pending.write(data)
    return pending.commit("same.txt", "user_data")


def keys(store: S3FileStore, prefix: str) -> list[str]:
    return [m["path"] for batch in obstore.list(store.store, prefix) for m in batch]


def settled_blobs(store: S3FileStore, expected: int) -> list[str]:
    """The blob objects once the duplicate copies (deleted off the request path) are gone."""
    deadline = time.monotonic() + 20
    while len(found := keys(store, "blobs/")) != expected and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def test_same_bytes_from_several_replicas_are_stored_once(s3_files: FileStoreSettings) -> None:
    replicas = [replica(s3_files) for _ in range(3)]
    stored = [upload(r, f"owner-{n}") for n, r in enumerate(replicas)]
    assert len({s.id for s in stored}) == 3
    assert len(settled_blobs(replicas[0], 1)) == 1
    for n, (r, s) in enumerate(zip(replicas, stored, strict=True)):
        assert replicas[(n + 1) % 3].read(s.id, f"owner-{n}")[1] == DATA
        r.delete(s.id, f"owner-{n}")
    assert settled_blobs(replicas[0], 0) == []
    # What is left of the bytes is one retired refs record, naming no upload.
    [refs] = keys(replicas[0], "refs/")
    assert BlobReferences.decode(bytes(obstore.get(replicas[0].store, refs).bytes())).retired


def test_deletes_racing_uploads_of_the_same_bytes_lose_nothing(
    s3_files: FileStoreSettings,
) -> None:
    deleter, uploader = replica(s3_files), replica(s3_files)
    lost = 0

    def delete_old(start: threading.Barrier, file_id: str) -> None:
        start.wait()
        deleter.delete(file_id, "team-a")

    def upload_new(start: threading.Barrier, kept: list[StoredFile]) -> None:
        start.wait()
        kept.append(upload(uploader, "team-b"))

    for _ in range(ROUNDS):
        old = upload(deleter, "team-a")
        kept: list[StoredFile] = []
        start = threading.Barrier(2)
        threads = [
            threading.Thread(target=delete_old, args=(start, old.id)),
            threading.Thread(target=upload_new, args=(start, kept)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        time.sleep(0.01)  # let a duplicate's deferred delete run, as it would between requests
        try:
            assert uploader.read(kept[0].id, "team-b")[1] == DATA
        except Exception:
            lost += 1
        uploader.delete(kept[0].id, "team-b")
    assert lost == 0
    assert settled_blobs(uploader, 0) == []


def _churn(
    files: FileStoreSettings,
    owner: str,
    rounds: int,
    lost: multiprocessing.Queue,  # type: ignore[type-arg]
) -> None:
    store = replica(files)
    missing = 0
    for _ in range(rounds):
        mine = upload(store, owner)
        time.sleep(0.002)
        try:
            if store.read(mine.id, owner)[1] != DATA:
                missing += 1
        except Exception:
            missing += 1
        store.delete(mine.id, owner)
    lost.put(missing)


def test_replica_processes_churning_the_same_bytes_lose_nothing(
    s3_files: FileStoreSettings,
) -> None:
    context = multiprocessing.get_context("spawn")  # obstore's runtime does not survive fork
    lost = context.Queue()
    workers = [
        context.Process(target=_churn, args=(s3_files, f"owner-{n}", ROUNDS, lost))
        for n in range(3)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(180)
    assert [worker.exitcode for worker in workers] == [0, 0, 0]
    assert sum(lost.get(timeout=5) for _ in workers) == 0
    assert settled_blobs(replica(s3_files), 0) == []


def test_a_store_that_ignores_conditional_writes_is_refused(
    s3_files: FileStoreSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from proxy.config import ConfigError
    from proxy.files import objects

    real_put = obstore.put

    def unconditional(store: object, key: str, data: bytes, **kwargs: object) -> object:
        kwargs.pop("mode", None)
        return real_put(store, key, data)  # type: ignore[arg-type]

    monkeypatch.setattr(objects.obstore, "put", unconditional)
    with pytest.raises(ConfigError, match="ignores conditional writes"):
        objects.check_conditional_writes(make_object_store(s3_files))


def test_a_failed_uploads_record_left_while_the_store_was_down_goes_once_it_is_back(
    s3_files: FileStoreSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = replica(s3_files)
    put, delete = store._put, obstore.delete

    def marker_refused(key: str, data: bytes) -> None:
        if key.startswith("owners/"):
            raise OSError("connection refused")  # the store stops between record and marker
        put(key, data)

    def down(*args: object, **kwargs: object) -> None:
        raise OSError("connection refused")

    monkeypatch.setattr(store, "_put", marker_refused)
    monkeypatch.setattr(obstore, "delete", down)
    pending = store.begin_upload("team-a")
    pending.write(DATA)
    with pytest.raises(StoreUnavailable):
        pending.commit("a.txt", "user_data")
    assert keys(store, "files/")  # its record stayed: the clean-up could not reach the store
    monkeypatch.setattr(store, "_put", put)
    monkeypatch.setattr(obstore, "delete", delete)  # back
    assert store.list("team-a") == []
    assert keys(store, "files/") == []  # the next listing deleted it
