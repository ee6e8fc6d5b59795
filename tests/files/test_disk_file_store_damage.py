"""The disk file store keeps working through races and damage: records that vanish or do not
parse, a ledger that lost count or is gone, blobs removed by hand, uploads cut off midway."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from proxy.files import store as disk_store
from proxy.files.protocol import FileNotFound, StoredFile
from proxy.files.store import DiskFileStore, atomic_write


def put(store: DiskFileStore, owner: str, data: bytes, name: str = "a.txt") -> StoredFile:
    upload = store.begin_upload(owner)
    upload.write(data)
    return upload.commit(name, "user_data")


def ledger(root: Path) -> dict[str, dict[str, int]]:
    data: dict[str, dict[str, int]] = json.loads((root / "ledger.json").read_bytes())
    return data


def test_records_that_vanish_or_do_not_parse_are_skipped(tmp_path: Path) -> None:
    store = DiskFileStore(tmp_path, 1000)
    kept = put(store, "team-a", b"kept")
    meta = tmp_path / "meta"
    (meta / "file-gone.json").symlink_to(meta / "deleted-meanwhile.json")  # listed, then gone
    (meta / "file-broken.json").write_bytes(b'{"id": "file-broken", ')  # not JSON
    (meta / "file-alien.json").write_text('{"id": "file-alien", "colour": "red"}')  # not a record
    (meta / "file-list.json").write_text("[1, 2]")  # JSON, not an object
    assert store.list("team-a") == [kept]
    assert store.list(None) == [kept]
    # A start counts what it can read and keeps the blob the readable record uses.
    again = DiskFileStore(tmp_path, 1000)
    assert again.read(kept.id, "team-a") == (kept, b"kept")
    assert ledger(tmp_path) == {"refs": {kept.sha256: 1}, "usage": {"team-a": 4}}


def test_a_ledger_removed_while_running_counts_from_zero(tmp_path: Path) -> None:
    store = DiskFileStore(tmp_path, 1000, quota_bytes=100)
    put(store, "team-a", b"before")
    (tmp_path / "ledger.json").unlink()
    assert store.usage("team-a") == 0
    stored = put(store, "team-a", b"after")
    assert ledger(tmp_path) == {"refs": {stored.sha256: 1}, "usage": {"team-a": 5}}
    # The next start counts every record again.
    DiskFileStore(tmp_path, 1000)
    assert ledger(tmp_path)["usage"] == {"team-a": 11}


@pytest.mark.parametrize("data", [b"some bytes", b""])
def test_a_delete_the_ledger_never_counted_still_removes_the_file(
    tmp_path: Path, data: bytes
) -> None:
    # A worker that died between writing a record and counting it leaves the ledger short
    # until the next start; deleting that file meanwhile must neither fail nor leak its blob.
    store = DiskFileStore(tmp_path, 1000)
    stored = put(store, "team-a", data)
    atomic_write(tmp_path / "ledger.json", json.dumps({"refs": {}, "usage": {}}).encode())
    assert store.delete(stored.id, "team-a") == stored
    assert not (tmp_path / "blobs" / stored.sha256).exists()
    assert ledger(tmp_path) == {"refs": {}, "usage": {"team-a": 0}}
    with pytest.raises(FileNotFound):
        store.get(stored.id, "team-a")


def test_a_blob_removed_by_hand_is_not_found_and_its_record_can_be_deleted(
    tmp_path: Path,
) -> None:
    store = DiskFileStore(tmp_path, 1000)
    stored = put(store, "team-a", b"soon gone")
    (tmp_path / "blobs" / stored.sha256).unlink()
    with pytest.raises(FileNotFound, match=stored.id):
        store.open(stored.id, "team-a")
    assert store.delete(stored.id, "team-a") == stored
    assert store.list("team-a") == []
    assert store.usage("team-a") == 0


def test_not_found_names_the_file_asked_for(tmp_path: Path) -> None:
    store = DiskFileStore(tmp_path, 1000)
    stored = put(store, "team-a", b"private")
    with pytest.raises(FileNotFound) as caught:
        store.get(stored.id, "team-b")  # another key's file: not found, by the id asked for
    assert caught.value.message == f"no such file: {stored.id!r}"


def test_an_upload_whose_writer_died_is_removed_at_the_next_start(tmp_path: Path) -> None:
    store = DiskFileStore(tmp_path, 1000)
    upload = store.begin_upload("team-a")
    upload.write(b"half an upl")
    upload.handle.close()  # the process died: its lock went with it, nothing was committed
    assert upload.temp.exists()
    DiskFileStore(tmp_path, 1000)
    assert not upload.temp.exists()
    assert os.listdir(tmp_path / "blobs") == []


def test_an_abort_after_recovery_took_the_temp_file_is_quiet(tmp_path: Path) -> None:
    upload = DiskFileStore(tmp_path, 1000).begin_upload("team-a")
    upload.write(b"abandoned")
    upload.temp.unlink()  # another worker's start removed it first
    upload.abort()
    assert os.listdir(tmp_path / "blobs") == []


def test_recovery_tolerates_a_temp_file_its_writer_removes_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    DiskFileStore(tmp_path, 1000)
    temp = tmp_path / "blobs" / ".upload-finishing"
    temp.write_bytes(b"x")

    def writer_cleans_up_first(path: Path) -> bool:
        path.unlink()  # the writer's own abort, between the check and the removal
        return True

    monkeypatch.setattr(disk_store, "_abandoned", writer_cleans_up_first)
    DiskFileStore(tmp_path, 1000)
    assert not temp.exists()


def test_a_failed_write_raises_its_own_error_and_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "record.json"
    target.write_bytes(b"old")

    def disk_full_after_cleanup(source: str, destination: Path) -> None:
        os.unlink(source)  # whoever failed the rename already took the temp file away
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(disk_store.os, "replace", disk_full_after_cleanup)
    with pytest.raises(OSError) as caught:
        atomic_write(target, b"new")
    assert caught.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["record.json"]
