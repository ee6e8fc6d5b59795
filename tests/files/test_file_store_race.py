"""Blob reference counts under concurrency: a delete racing an upload of the same bytes, in
threads and in separate processes sharing one directory, never loses the upload; a crash's
leftovers are cleaned at the next start."""

from __future__ import annotations

import multiprocessing
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

from proxy.files import store as disk_store
from proxy.files.protocol import StoredFile
from proxy.files.store import DiskFileStore

DATA = b"the same bytes every time"
ROUNDS = 150


def upload(store: DiskFileStore, owner: str = "team-a") -> StoredFile:
    pending = store.begin_upload(owner)
    pending.write(DATA)
    return pending.commit("same.txt", "user_data")


def test_deletes_racing_uploads_of_the_same_bytes_lose_nothing(tmp_path: Path) -> None:
    # Two store objects on one directory, as two worker processes would have.
    deleter, uploader = DiskFileStore(tmp_path, 1000), DiskFileStore(tmp_path, 1000)
    lost = 0

    def delete_old(start: threading.Barrier, file_id: str) -> None:
        start.wait()
        deleter.delete(file_id, "team-a")

    def upload_new(start: threading.Barrier, kept: list[StoredFile]) -> None:
        start.wait()
        kept.append(upload(uploader, "team-b"))

    for _ in range(ROUNDS):
        old = upload(deleter)
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
        try:
            assert uploader.read(kept[0].id, "team-b")[1] == DATA
        except Exception:
            lost += 1
        uploader.delete(kept[0].id, "team-b")
    assert lost == 0
    assert not [p for p in (tmp_path / "blobs").iterdir()]


def _churn(root: str, owner: str, rounds: int, lost: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    store = DiskFileStore(Path(root), 1000)
    missing = 0
    for _ in range(rounds):
        mine = upload(store, owner)
        try:
            if store.read(mine.id, owner)[1] != DATA:
                missing += 1
        except Exception:
            missing += 1
        store.delete(mine.id, owner)
    lost.put(missing)


def test_processes_sharing_a_directory_lose_nothing(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    lost = context.Queue()
    workers = [
        context.Process(target=_churn, args=(str(tmp_path), f"owner-{n}", ROUNDS, lost))
        for n in range(3)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert [worker.exitcode for worker in workers] == [0, 0, 0]
    assert sum(lost.get(timeout=5) for _ in workers) == 0
    assert not [p for p in (tmp_path / "blobs").iterdir()]


def test_a_crashed_uploads_temp_file_is_removed_at_start(tmp_path: Path) -> None:
    store = DiskFileStore(tmp_path, 1000)
    kept = upload(store)
    live = store.begin_upload("team-a")  # still being written by a live upload
    live.write(b"half")
    orphan = tmp_path / "blobs" / ".upload-crashed"
    orphan.write_bytes(b"half an upload")
    stray_blob = tmp_path / "blobs" / ("f" * 64)  # renamed in, then the crash: no record
    stray_blob.write_bytes(b"nobody's")
    DiskFileStore(tmp_path, 1000)
    assert not orphan.exists()
    assert not stray_blob.exists()
    assert live.temp.exists()  # another process's upload in progress is left alone
    assert store.read(kept.id, "team-a")[1] == DATA
    live.write(b" more")
    finished = live.commit("live.txt", "user_data")
    assert store.read(finished.id, "team-a")[1] == b"half more"
    assert set(os.listdir(tmp_path / "blobs")) == {kept.sha256, finished.sha256}


def test_a_store_starting_while_an_upload_begins_leaves_the_upload_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another worker starts (and sweeps leftovers) in the instant after the upload's temp file
    # is made and before it is locked: it must not take it for a crash's leftover.
    store = DiskFileStore(tmp_path, 1000)
    made = tempfile.mkstemp
    starting: list[threading.Thread] = []

    def made_then_another_starts(*args: Any, **kwargs: Any) -> tuple[int, str]:
        found = made(*args, **kwargs)
        other = threading.Thread(target=DiskFileStore, args=(tmp_path, 1000))
        other.start()
        other.join(0.5)  # it sweeps now, or waits for the upload to hold its lock
        starting.append(other)
        return found

    monkeypatch.setattr(disk_store.tempfile, "mkstemp", made_then_another_starts)
    pending = store.begin_upload("team-a")
    monkeypatch.setattr(disk_store.tempfile, "mkstemp", made)
    starting[0].join()
    pending.write(DATA)
    stored = pending.commit("same.txt", "user_data")
    assert store.read(stored.id, "team-a")[1] == DATA
