"""The Files API store on local disk: content-addressed blobs shared by reference count, one
metadata record per upload, every change made under one lock that all worker processes share."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any, BinaryIO

from proxy.disk import DiskRoom
from proxy.files.protocol import (
    FILE_ID,
    FileNotFound,
    Owner,
    QuotaExceeded,
    Room,
    StoredFile,
    nothing_else,
)

UPLOAD_PREFIX = ".upload-"
TEMP_PREFIX = ".tmp-"


def atomic_write(path: Path, data: bytes) -> None:
    """`data` at `path` whole or not at all: written to a temp file beside it, synced, renamed."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=TEMP_PREFIX)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


def _record(data: bytes) -> StoredFile:
    return StoredFile(**json.loads(data))


def _visible(stored: StoredFile, owner: Owner) -> bool:
    return owner is None or stored.owner == owner


class DiskFileStore:
    """Uploads under `root`: `blobs/<sha256>` (stored once), `meta/<id>.json` (one per upload)
    and `ledger.json` (reference count per blob, bytes per owner).

    Every write goes to a temp file first and is renamed into place, so a crash never leaves a
    half-written file that later reads as complete. Commits and deletes hold `.lock` (an
    fcntl lock, so it holds across the worker processes sharing `root` as well as across
    threads): a delete can never remove a blob that an upload of the same bytes has just
    counted. Reads take no lock. The methods block: call them off the loop.
    """

    def __init__(
        self,
        root: Path,
        max_bytes: int,
        quota_bytes: int | None = None,
        disk: DiskRoom | None = None,
    ) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.quota_bytes = quota_bytes
        self.disk = disk  # uploads are refused below its reserve
        self.other_usage: Callable[[str], int] = nothing_else
        self.blobs = root / "blobs"
        self.meta = root / "meta"
        self.ledger_path = root / "ledger.json"
        self.blobs.mkdir(parents=True, exist_ok=True)
        self.meta.mkdir(parents=True, exist_ok=True)
        self.recover()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        # A new open file description per call: flock then excludes other threads of this
        # process too, not only other processes.
        with open(self.root / ".lock", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _ledger(self) -> dict[str, dict[str, int]]:
        try:
            data: dict[str, dict[str, int]] = json.loads(self.ledger_path.read_bytes())
        except FileNotFoundError:
            return {"refs": {}, "usage": {}}
        return data

    def _records(self) -> Iterator[StoredFile]:
        for entry in self.meta.glob("file-*.json"):
            with contextlib.suppress(FileNotFoundError, ValueError, TypeError):
                yield _record(entry.read_bytes())

    def recover(self) -> None:
        """After a crash: drop temp files nobody writes any more, count references again from
        the metadata records, and remove blobs no record uses."""
        with self._locked():
            for directory in (self.blobs, self.meta, self.root):
                for temp in directory.glob(".*-*"):
                    if temp.name.startswith((UPLOAD_PREFIX, TEMP_PREFIX)) and _abandoned(temp):
                        with contextlib.suppress(FileNotFoundError):
                            temp.unlink()
            refs: dict[str, int] = {}
            usage: dict[str, int] = {}
            for stored in self._records():
                refs[stored.sha256] = refs.get(stored.sha256, 0) + 1
                usage[stored.owner] = usage.get(stored.owner, 0) + stored.bytes
            for blob in self.blobs.iterdir():
                if not blob.name.startswith(".") and blob.name not in refs:
                    with contextlib.suppress(FileNotFoundError):
                        blob.unlink()
            atomic_write(self.ledger_path, json.dumps({"refs": refs, "usage": usage}).encode())

    def usage(self, owner: str) -> int:
        return self._ledger()["usage"].get(owner, 0)

    def begin_upload(self, owner: str) -> DiskUpload:
        if self.disk is not None:
            self.disk.check("the upload")
        used = 0 if self.quota_bytes is None else self.usage(owner) + self.other_usage(owner)
        room = Room.for_owner(self.max_bytes, self.quota_bytes, used)
        return DiskUpload(self, owner, room)

    def _commit(self, upload: DiskUpload, filename: str, purpose: str) -> StoredFile:
        sha = upload.hasher.hexdigest()
        stored = StoredFile(
            id=f"file-{uuid.uuid4().hex[:24]}",
            bytes=upload.size,
            created_at=int(time.time()),
            filename=filename,
            purpose=purpose,
            sha256=sha,
            owner=upload.owner,
        )
        other = self.other_usage(upload.owner) if self.quota_bytes is not None else 0
        with self._locked():
            ledger = self._ledger()
            used = ledger["usage"].get(upload.owner, 0)
            if self.quota_bytes is not None and other + used + upload.size > self.quota_bytes:
                raise QuotaExceeded(self.quota_bytes)
            # Always renamed over the blob, whether or not the same bytes are stored already:
            # the same work either way, so no caller can time whether another holds them.
            os.replace(upload.temp, self.blobs / sha)
            atomic_write(self.meta / f"{stored.id}.json", json.dumps(asdict(stored)).encode())
            ledger["refs"][sha] = ledger["refs"].get(sha, 0) + 1
            ledger["usage"][upload.owner] = used + upload.size
            atomic_write(self.ledger_path, json.dumps(ledger).encode())
        return stored

    def get(self, file_id: str, owner: Owner) -> StoredFile:
        if not FILE_ID.match(file_id):
            raise FileNotFound(file_id)
        try:
            stored = _record((self.meta / f"{file_id}.json").read_bytes())
        except FileNotFoundError:
            raise FileNotFound(file_id) from None
        if not _visible(stored, owner):
            raise FileNotFound(file_id)
        return stored

    def open(self, file_id: str, owner: Owner) -> tuple[StoredFile, BinaryIO]:
        stored = self.get(file_id, owner)
        try:
            return stored, open(self.blobs / stored.sha256, "rb")
        except FileNotFoundError:
            raise FileNotFound(file_id) from None  # deleted since the record was read

    def read(self, file_id: str, owner: Owner) -> tuple[StoredFile, bytes]:
        stored, handle = self.open(file_id, owner)
        with handle:
            return stored, handle.read()

    def list(self, owner: Owner, purpose: str | None = None) -> list[StoredFile]:
        files = [
            stored
            for stored in self._records()
            if _visible(stored, owner) and (purpose is None or stored.purpose == purpose)
        ]
        return sorted(files, key=lambda f: (f.created_at, f.id), reverse=True)

    def delete(self, file_id: str, owner: Owner) -> StoredFile:
        with self._locked():
            stored = self.get(file_id, owner)
            os.unlink(self.meta / f"{file_id}.json")
            ledger = self._ledger()
            left = ledger["refs"].get(stored.sha256, 1) - 1
            if left > 0:
                ledger["refs"][stored.sha256] = left
            else:
                ledger["refs"].pop(stored.sha256, None)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.blobs / stored.sha256)
            used = ledger["usage"].get(stored.owner, 0) - stored.bytes
            ledger["usage"][stored.owner] = max(0, used)
            atomic_write(self.ledger_path, json.dumps(ledger).encode())
        return stored


def _abandoned(temp: Path) -> bool:
    """A temp file whose writer is gone: its writer holds an fcntl lock on it while alive."""
    try:
        with open(temp, "rb") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
    except BlockingIOError:
        return False
    except FileNotFoundError:
        return False


class DiskUpload:
    """Bytes of one upload on their way to disk, hashed and size-checked as they arrive."""

    def __init__(self, store: DiskFileStore, owner: str, room: Room) -> None:
        self.store = store
        self.owner = owner
        self.room = room
        self.hasher = hashlib.sha256()
        self.size = 0
        # Made and locked under the store's lock, which recovery sweeps under: another
        # process starting never sees the file in the instant before its lock and takes it
        # for a crash's leftover (the commit's rename then found nothing).
        with store._locked():
            fd, temp = tempfile.mkstemp(dir=store.blobs, prefix=UPLOAD_PREFIX)
            self.temp = Path(temp)
            self.handle: Any = os.fdopen(fd, "wb")
            fcntl.flock(self.handle, fcntl.LOCK_EX)  # alive: recovery leaves this file alone

    def write(self, chunk: bytes) -> None:
        self.size += len(chunk)
        self.room.check(self.size)
        self.hasher.update(chunk)
        self.handle.write(chunk)

    def commit(self, filename: str, purpose: str) -> StoredFile:
        self.handle.flush()
        os.fsync(self.handle.fileno())
        try:
            return self.store._commit(self, filename, purpose)
        finally:
            self.handle.close()

    def abort(self) -> None:
        self.handle.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.temp)
