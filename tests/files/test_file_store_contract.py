"""What every FileStore backend promises (proxy/files/protocol.py), run against each backend:
a new backend adds itself to BACKENDS and must pass unchanged. The S3 one runs against a real
SeaweedFS on loopback (skipped when it is not installed)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from proxy.config import FileStoreSettings
from proxy.errors import PayloadTooLarge
from proxy.files.objects import make_object_store
from proxy.files.protocol import FileNotFound, FileStore, QuotaExceeded, StoredFile
from proxy.files.s3 import S3FileStore
from proxy.files.store import DiskFileStore

MakeStore = Callable[..., FileStore]


def disk(request: pytest.FixtureRequest, root: Path) -> MakeStore:
    return lambda max_bytes=1000, quota_bytes=None: DiskFileStore(root, max_bytes, quota_bytes)


def s3(request: pytest.FixtureRequest, root: Path) -> MakeStore:
    files: FileStoreSettings = request.getfixturevalue("s3_files")
    return lambda max_bytes=1000, quota_bytes=None: S3FileStore(
        make_object_store(files), max_bytes, quota_bytes
    )


BACKENDS: dict[str, Callable[[pytest.FixtureRequest, Path], MakeStore]] = {"disk": disk, "s3": s3}


@pytest.fixture(params=sorted(BACKENDS))
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> MakeStore:
    return BACKENDS[request.param](request, tmp_path)


def put(store: FileStore, owner: str, data: bytes, name: str = "a.txt") -> StoredFile:
    upload = store.begin_upload(owner)
    upload.write(data)
    return upload.commit(name, "user_data")


def test_a_file_has_its_owner_name_purpose_size_and_digest(make_store: MakeStore) -> None:
    store = make_store()
    stored = put(store, "team-a", b"hello", "notes.txt")
    assert (stored.owner, stored.filename, stored.purpose, stored.bytes) == (
        "team-a",
        "notes.txt",
        "user_data",
        5,
    )
    assert stored.sha256 == "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    assert stored.created_at > 0
    assert store.get(stored.id, "team-a") == stored
    assert store.read(stored.id, "team-a") == (stored, b"hello")
    record, handle = store.open(stored.id, "team-a")
    with handle:
        assert (record, handle.read()) == (stored, b"hello")


def test_another_owner_sees_nothing_and_an_admin_sees_all(make_store: MakeStore) -> None:
    store = make_store()
    mine = put(store, "team-a", b"a's")
    theirs = put(store, "team-b", b"b's")
    for call in (store.get, store.read, store.open, store.delete):
        with pytest.raises(FileNotFound):
            call(mine.id, "team-b")
    assert [f.id for f in store.list("team-b")] == [theirs.id]
    assert {f.id for f in store.list(None)} == {mine.id, theirs.id}
    assert store.read(mine.id, None)[1] == b"a's"
    assert store.get(mine.id, "team-a") == mine  # untouched by the attempts


def test_same_bytes_are_independent_uploads(make_store: MakeStore) -> None:
    store = make_store()
    first, second = put(store, "team-a", b"same"), put(store, "team-b", b"same")
    assert first.id != second.id and first.sha256 == second.sha256
    assert store.usage("team-a") == store.usage("team-b") == 4
    store.delete(first.id, "team-a")
    assert store.read(second.id, "team-b")[1] == b"same"
    assert store.usage("team-a") == 0
    with pytest.raises(FileNotFound):
        store.get(first.id, None)


def test_unknown_and_malformed_ids_are_not_found(make_store: MakeStore) -> None:
    store = make_store()
    for file_id in ("file-" + "0" * 24, "nope", "../meta/x", ""):
        with pytest.raises(FileNotFound) as missing:
            store.get(file_id, None)
        assert f"'{file_id}'" in missing.value.message  # the id the client asked for


def test_sizes_and_quotas(make_store: MakeStore) -> None:
    store = make_store(max_bytes=10, quota_bytes=15)
    too_big = store.begin_upload("team-a")
    with pytest.raises(PayloadTooLarge):
        too_big.write(b"x" * 11)
    too_big.abort()
    put(store, "team-a", b"x" * 10)
    over = store.begin_upload("team-a")
    with pytest.raises(QuotaExceeded):
        over.write(b"y" * 6)
    over.abort()
    put(store, "team-b", b"z" * 10)  # each owner has its own quota
    assert store.usage("team-a") == store.usage("team-b") == 10


def test_an_aborted_upload_leaves_nothing(make_store: MakeStore) -> None:
    store = make_store()
    upload = store.begin_upload("team-a")
    upload.write(b"half")
    upload.abort()
    assert store.list(None) == [] and store.usage("team-a") == 0


def test_the_quota_holds_for_uploads_that_were_under_way_together(make_store: MakeStore) -> None:
    # Each upload alone fits while it is written; the commit counts what landed meanwhile.
    store = make_store(max_bytes=10, quota_bytes=15)
    first, second, third = (store.begin_upload("team-a") for _ in range(3))
    first.write(b"a" * 10)
    second.write(b"b" * 5)
    third.write(b"c" * 1)
    first.commit("first.txt", "user_data")
    second.commit("second.txt", "user_data")  # 15 of 15: an exact fit is kept
    with pytest.raises(QuotaExceeded) as refused:
        third.commit("third.txt", "user_data")
    assert "(1.43051e-05 MiB)" in refused.value.message
    assert store.usage("team-a") == 15
    assert sorted(f.filename for f in store.list("team-a")) == ["first.txt", "second.txt"]


def test_listing_is_newest_first_and_filters_by_purpose(
    make_store: MakeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store()
    clock = iter([1_000, 2_000, 3_000])
    monkeypatch.setattr("time.time", lambda: next(clock))
    older = put(store, "team-a", b"1", "older.txt")
    upload = store.begin_upload("team-a")
    upload.write(b"2")
    batch = upload.commit("batch.jsonl", "batch")
    newer = put(store, "team-a", b"3", "newer.txt")
    monkeypatch.undo()
    assert [f.id for f in store.list("team-a")] == [newer.id, batch.id, older.id]
    assert [f.id for f in store.list("team-a", "user_data")] == [newer.id, older.id]
    assert [f.id for f in store.list("team-a", "batch")] == [batch.id]


def test_an_upload_written_in_pieces_counts_them_all(make_store: MakeStore) -> None:
    store = make_store(max_bytes=10)
    upload = store.begin_upload("team-a")
    upload.write(b"ab")
    upload.write(b"cde")
    stored = upload.commit("pieces.txt", "user_data")
    assert stored.bytes == 5 and store.read(stored.id, "team-a")[1] == b"abcde"
    too_big = store.begin_upload("team-a")
    too_big.write(b"x" * 6)
    with pytest.raises(PayloadTooLarge):
        too_big.write(b"x" * 5)
    too_big.abort()


def test_deleting_a_file_leaves_the_owners_other_files_counted(make_store: MakeStore) -> None:
    store = make_store()
    small = put(store, "team-a", b"1234")
    put(store, "team-a", b"123456")
    put(store, "team-b", b"xyz")
    store.delete(small.id, "team-a")
    assert (store.usage("team-a"), store.usage("team-b")) == (6, 3)


def test_a_restart_counts_usage_again_from_the_records(tmp_path: Path) -> None:
    store = DiskFileStore(tmp_path, 1000)
    put(store, "team-a", b"1234")
    put(store, "team-a", b"123456")
    put(store, "team-b", b"xyz")
    (tmp_path / "ledger.json").unlink()  # lost in a crash: the records are the truth
    again = DiskFileStore(tmp_path, 1000)
    assert (again.usage("team-a"), again.usage("team-b")) == (10, 3)
