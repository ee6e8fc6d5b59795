"""The Files API store in an S3-compatible bucket that every replica shares.

Under `files.prefix`:
    blobs/<object-id>                  the bytes, streamed there by the upload that brought them
    refs/<sha256>.json                 which blob holds those bytes, which uploads use it
    files/<file-id>.json               one record per upload (owner, name, purpose, bytes, ...)
    owners/<owner-hex>/<file-id>.<n>   an empty marker: a key's files and usage in one LIST

Each upload streams to its own new object (no shared key to race on while bytes arrive); at
commit it joins the blob already holding the same bytes, by compare-and-swap on the refs
record (`proxy/files/blob_refs.py`), and its own copy is deleted — or its object becomes the
blob. Deletes retire the refs record by the same swap before deleting a blob, so no replica
can join a blob that is being deleted. What failures leave all the same (a record without its
marker, a copy nobody names, ...) is swept by `proxy/files/s3_sweep.py`. The methods block
(obstore's synchronous calls; the I/O runs in obstore's own runtime, without the GIL): call
them off the event loop.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, fields
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

import obstore
from obstore.exceptions import BaseError

from proxy.files.blob_refs import BlobReferences, with_file, without_file
from proxy.files.objects import CONFLICTS, MISSING, StoreUnavailable
from proxy.files.protocol import (
    FILE_ID,
    FileNotFound,
    Owner,
    QuotaExceeded,
    Room,
    StoredFile,
    nothing_else,
)

if TYPE_CHECKING:
    from obstore import WritableFile
    from obstore.store import S3Store

T = TypeVar("T")
PART_BYTES = 8 * 1024 * 1024  # multipart part size (S3's minimum is 5 MiB)
PARTS_IN_FLIGHT = 2  # memory per upload: at most this many parts buffered
SWAP_ATTEMPTS = 50  # compare-and-swap retries on one refs record before giving up (503)
STORED_FIELDS = tuple(f.name for f in fields(StoredFile))
UNDONE_KEPT = 1000
"""Clean-ups that failed while the store was down, kept to be tried again (the oldest go)."""
# Records are read in parallel for listings; duplicate copies are deleted off the request path.
_POOL = ThreadPoolExecutor(8, thread_name_prefix="s3-files")


def owner_key(owner: str) -> str:
    """An owner name as one safe key segment (names are free text in principle)."""
    return owner.encode().hex()


def record_key(file_id: str) -> str:
    """Where an upload's record lives."""
    return f"files/{file_id}.json"


def marker_key(stored: StoredFile) -> str:
    """Where an upload's owner marker lives (its size in the name: one LIST gives usage)."""
    return f"owners/{owner_key(stored.owner)}/{stored.id}.{stored.bytes}"


def calling(what: str, call: Callable[[], T]) -> T:
    """`call()`, its failure (the store unreachable, refusing) raised as the store being down,
    named by `what`; a missing object or a lost race is raised as it is, for the caller."""
    try:
        return call()
    except (*MISSING, *CONFLICTS):
        raise  # answers, not failures: the callers decide
    except (BaseError, OSError) as error:
        raise StoreUnavailable(what, error) from error


class S3FileStore:
    """Uploads in an object store shared by every replica; see the module docstring."""

    def __init__(self, store: S3Store, max_bytes: int, quota_bytes: int | None = None) -> None:
        self.store = store
        self.max_bytes = max_bytes
        self.quota_bytes = quota_bytes
        self.other_usage: Callable[[str], int] = nothing_else
        # Keys a failed upload left (its record, marker or own copy) whose delete failed too,
        # the store being down: deleted on the next listing or upload that reaches it, so
        # nothing half-done stays once it is back. Each key belongs to that upload alone.
        self._undone: dict[str, None] = {}
        self._undone_lock = threading.Lock()

    # -- reading ---------------------------------------------------------------------------

    def record_of(self, file_id: str) -> tuple[StoredFile, str]:
        """A file's record, whoever owns it, and the key of the blob holding its bytes."""
        if not FILE_ID.match(file_id):
            raise FileNotFound(file_id)
        try:
            data = calling("read a file record", lambda: self._get(record_key(file_id)))
        except MISSING:
            raise FileNotFound(file_id) from None
        entry = json.loads(data)
        return StoredFile(**{k: entry[k] for k in STORED_FIELDS}), str(entry["blob"])

    def _get(self, key: str) -> bytes:
        return bytes(obstore.get(self.store, key).bytes())

    def _visible(self, file_id: str, owner: Owner) -> tuple[StoredFile, str]:
        stored, blob = self.record_of(file_id)
        if owner is not None and stored.owner != owner:
            raise FileNotFound(file_id)
        return stored, blob

    def get(self, file_id: str, owner: Owner) -> StoredFile:
        return self._visible(file_id, owner)[0]

    def read(self, file_id: str, owner: Owner) -> tuple[StoredFile, bytes]:
        stored, blob = self._visible(file_id, owner)
        try:
            return stored, calling("read a file", lambda: self._get(f"blobs/{blob}"))
        except MISSING:
            raise FileNotFound(file_id) from None  # deleted since the record was read

    def open(self, file_id: str, owner: Owner) -> tuple[StoredFile, BinaryIO]:
        stored, blob = self._visible(file_id, owner)
        try:
            result = calling("read a file", lambda: obstore.get(self.store, f"blobs/{blob}"))
        except MISSING:
            raise FileNotFound(file_id) from None
        # One GET, streamed: the answer is under way before the last byte has been read.
        chunks = iter(result.stream(min_chunk_size=1024 * 1024))
        return stored, io.BufferedReader(_ChunkReader(chunks), 1024 * 1024)

    def _markers(self, prefix: str) -> list[str]:
        self.retry_clean_ups()

        def listing() -> list[str]:
            return [m["path"] for batch in obstore.list(self.store, prefix) for m in batch]

        return calling("list files", listing)

    def list(self, owner: Owner, purpose: str | None = None) -> list[StoredFile]:
        if owner is None:
            ids = [k.rsplit("/", 1)[1].removesuffix(".json") for k in self._markers("files/")]
        else:
            ids = [_marker_id(k)[0] for k in self._markers(f"owners/{owner_key(owner)}/")]

        def record(file_id: str) -> StoredFile | None:
            try:
                return self._visible(file_id, owner)[0]
            except FileNotFound:
                return None  # deleted meanwhile

        found = [f for f in _POOL.map(record, ids) if f is not None]
        files = [f for f in found if purpose is None or f.purpose == purpose]
        return sorted(files, key=lambda f: (f.created_at, f.id), reverse=True)

    def usage(self, owner: str) -> int:
        return sum(_marker_id(k)[1] for k in self._markers(f"owners/{owner_key(owner)}/"))

    # -- writing ---------------------------------------------------------------------------

    def begin_upload(self, owner: str) -> S3Upload:
        self.retry_clean_ups()
        used = 0 if self.quota_bytes is None else self.usage(owner) + self.other_usage(owner)
        room = Room.for_owner(self.max_bytes, self.quota_bytes, used)
        return S3Upload(self, owner, room)

    def _commit(self, upload: S3Upload, filename: str, purpose: str) -> StoredFile:
        stored = StoredFile(
            id=upload.file_id,
            bytes=upload.size,
            created_at=int(time.time()),
            filename=filename,
            purpose=purpose,
            sha256=upload.hasher.hexdigest(),
            owner=upload.owner,
        )
        # Checked again with what other replicas stored meanwhile (uploads in flight at the
        # same moment on several replicas can still pass together: see docs/replicas.md).
        quota = self.quota_bytes
        used = self.usage(upload.owner) + self.other_usage(upload.owner) if quota else 0
        if quota is not None and used + upload.size > quota:
            self._delete_quietly(f"blobs/{upload.file_id}")
            raise QuotaExceeded(quota)
        blob = self._reference(stored.sha256, stored.id, upload.file_id)
        record = json.dumps({**asdict(stored), "blob": blob}).encode()
        marker = marker_key(stored)
        try:
            calling("save a file record", lambda: self._put(record_key(stored.id), record))
            calling("save a file record", lambda: self._put(marker, b""))
        except BaseException:
            # Undone as a delete would: the blob goes only if this upload was its last user.
            self._delete_quietly(record_key(stored.id))
            self._delete_quietly(marker)
            with contextlib.suppress(Exception):
                self.release(stored.sha256, stored.id)
            raise
        if blob != upload.file_id:
            # Same bytes were stored already: this copy goes, off the request path, so an
            # upload takes as long whether or not anyone else holds the bytes.
            _POOL.submit(self._delete_quietly, f"blobs/{upload.file_id}")
        return stored

    def _refs(self, sha256: str) -> tuple[BlobReferences, str] | None:
        try:
            result = obstore.get(self.store, f"refs/{sha256}.json")
        except MISSING:
            return None
        return BlobReferences.decode(bytes(result.bytes())), str(result.meta["e_tag"])

    def _swap(
        self, sha256: str, change: Callable[[BlobReferences | None], BlobReferences | None]
    ) -> tuple[BlobReferences | None, BlobReferences | None]:
        """Apply `change` to the refs record by compare-and-swap, retried on conflict; the
        versions before and after (`change` returning None: nothing to write)."""
        key = f"refs/{sha256}.json"
        for attempt in range(SWAP_ATTEMPTS):
            found = calling("read a blob's references", lambda: self._refs(sha256))
            current, etag = found if found is not None else (None, None)
            wanted = change(current)
            if wanted is None:
                return current, current
            mode: Any = "create" if etag is None else {"e_tag": etag}
            data = wanted.encode()
            try:
                calling(
                    "save a blob's references",
                    lambda: obstore.put(self.store, key, data, mode=mode),  # noqa: B023
                )
                return current, wanted
            except CONFLICTS:
                # Another replica changed it first, or our own write landed and its reply
                # was lost (the retry then conflicts with ourselves): look again.
                again = self._refs(sha256)
                if again is not None and again[0].rev == wanted.rev:
                    return current, wanted
                time.sleep(random.uniform(0, 0.005 * min(attempt + 1, 20)))
        raise StoreUnavailable(
            "record a file's bytes", RuntimeError(f"{SWAP_ATTEMPTS} conflicting updates in a row")
        )

    def _reference(self, sha256: str, file_id: str, own_blob: str) -> str:
        """The blob `file_id` uses from now on: the live one for these bytes, or its own."""
        _, after = self._swap(sha256, lambda current: with_file(current, file_id, own_blob))
        assert after is not None
        return after.blob

    def delete(self, file_id: str, owner: Owner) -> StoredFile:
        stored, _ = self._visible(file_id, owner)
        # The record first: from here on the file is gone for every replica.
        calling("delete a file", lambda: obstore.delete(self.store, record_key(file_id)))
        marker = marker_key(stored)
        calling("delete a file", lambda: obstore.delete(self.store, marker))
        self.release(stored.sha256, file_id)
        return stored

    def release(self, sha256: str, *file_ids: str) -> bool:
        """`file_ids` no longer use their blob; the blob is deleted if they were its last users
        (True then)."""

        def drop(current: BlobReferences | None) -> BlobReferences | None:
            if current is None or not set(file_ids) & set(current.files):
                return None  # a concurrent delete of the same ids did it
            for file_id in file_ids:
                current = without_file(current, file_id)
            return current

        before, after = self._swap(sha256, drop)
        if after is not None and after is not before and after.retired:
            # Retired by our swap: no upload can join this blob any more.
            calling("delete a file", lambda: obstore.delete(self.store, f"blobs/{after.blob}"))
            return True
        return False

    def _put(self, key: str, data: bytes) -> None:
        obstore.put(self.store, key, data)

    def _delete_quietly(self, key: str) -> None:
        """Delete `key`, a failed upload's own; if the store cannot be reached, later."""
        try:
            obstore.delete(self.store, key)
        except MISSING:
            pass  # gone already
        except (BaseError, OSError):
            with self._undone_lock:
                self._undone[key] = None
                while len(self._undone) > UNDONE_KEPT:
                    del self._undone[next(iter(self._undone))]

    def retry_clean_ups(self) -> None:
        """The deletes that failed while the store was down, tried again (kept if they fail)."""
        with self._undone_lock:
            keys, self._undone = list(self._undone), {}
        for key in keys:
            self._delete_quietly(key)


def _marker_id(key: str) -> tuple[str, int]:
    name = key.rsplit("/", 1)[1]
    file_id, _, size = name.partition(".")
    return file_id, int(size or 0)


class _ChunkReader(io.RawIOBase):
    """A readable file over an iterator of byte chunks (a streamed GET)."""

    def __init__(self, chunks: Iterator[Any]) -> None:
        self._chunks = chunks
        self._left = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if not self._left:
            try:
                self._left = bytes(calling("read a file", lambda: next(self._chunks)))
            except StopIteration:
                return 0
        size = min(len(buffer), len(self._left))
        buffer[:size] = self._left[:size]
        self._left = self._left[size:]
        return size


class S3Upload:
    """One upload streamed into its own new object: multipart once past PART_BYTES, so at most
    PARTS_IN_FLIGHT parts are ever held in memory; hashed and size-checked as it arrives."""

    def __init__(self, store: S3FileStore, owner: str, room: Room) -> None:
        self.store = store
        self.owner = owner
        self.room = room
        self.file_id = f"file-{uuid.uuid4().hex[:24]}"
        self.hasher = hashlib.sha256()
        self.size = 0
        self._writer: WritableFile | None = None

    def _open(self) -> WritableFile:
        if self._writer is None:
            key = f"blobs/{self.file_id}"
            self._writer = calling(
                "store the upload",
                lambda: obstore.open_writer(
                    self.store.store,
                    key,
                    buffer_size=PART_BYTES,
                    max_concurrency=PARTS_IN_FLIGHT,
                ),
            )
        return self._writer

    def write(self, chunk: bytes) -> None:
        self.size += len(chunk)
        self.room.check(self.size)
        self.hasher.update(chunk)
        writer = self._open()
        calling("store the upload", lambda: writer.write(chunk))

    def commit(self, filename: str, purpose: str) -> StoredFile:
        writer = self._open()
        calling("store the upload", writer.close)
        return self.store._commit(self, filename, purpose)

    def abort(self) -> None:
        """Nothing of it stays: obstore's writer has no abort, so what was sent is completed
        and deleted (a crash instead leaves an incomplete multipart upload, which a bucket
        lifecycle rule removes; see docs/replicas.md)."""
        if self._writer is not None:
            with contextlib.suppress(BaseError, OSError):
                self._writer.close()
        self.store._delete_quietly(f"blobs/{self.file_id}")
