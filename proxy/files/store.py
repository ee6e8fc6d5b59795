"""The Files API store: content-addressed blobs plus one metadata record per upload, on disk."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from proxy.errors import PayloadTooLarge, ProxyError

FILE_ID = re.compile(r"^file-[a-f0-9]{24}$")


class FileNotFound(ProxyError):
    """No stored file has this id (404)."""

    status = 404
    type = "invalid_request_error"


@dataclass(frozen=True)
class StoredFile:
    """What OpenAI's Files API returns for a file, plus the sha256 of its bytes."""

    id: str
    bytes: int
    created_at: int
    filename: str
    purpose: str
    sha256: str

    def to_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.bytes,
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "expires_at": None,
            "status_details": None,
        }


def _atomic_write(path: Path, data: bytes) -> None:
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
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


class FileStore:
    """Uploads under `root`: `blobs/<sha256>` (stored once) and `meta/<id>.json` (one per upload).

    Every write goes to a temp file first and is renamed into place, so a crash never leaves a
    half-written file that later reads as complete. The methods block: call them off the loop.
    """

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.blobs = root / "blobs"
        self.meta = root / "meta"
        self.blobs.mkdir(parents=True, exist_ok=True)
        self.meta.mkdir(parents=True, exist_ok=True)

    def begin_upload(self) -> Upload:
        return Upload(self)

    def _commit(self, upload: Upload, filename: str, purpose: str) -> StoredFile:
        sha = upload.hasher.hexdigest()
        blob = self.blobs / sha
        if blob.exists():
            os.unlink(upload.temp)
        else:
            os.replace(upload.temp, blob)
        stored = StoredFile(
            id=f"file-{uuid.uuid4().hex[:24]}",
            bytes=upload.size,
            created_at=int(time.time()),
            filename=filename,
            purpose=purpose,
            sha256=sha,
        )
        _atomic_write(self.meta / f"{stored.id}.json", json.dumps(asdict(stored)).encode())
        return stored

    def get(self, file_id: str) -> StoredFile:
        if not FILE_ID.match(file_id):
            raise FileNotFound(f"no such file: {file_id!r}", param="file_id", code="file_not_found")
        try:
            data = json.loads((self.meta / f"{file_id}.json").read_bytes())
        except FileNotFoundError:
            raise FileNotFound(
                f"no such file: {file_id!r}", param="file_id", code="file_not_found"
            ) from None
        return StoredFile(**data)

    def read(self, file_id: str) -> tuple[StoredFile, bytes]:
        stored = self.get(file_id)
        return stored, (self.blobs / stored.sha256).read_bytes()

    def path(self, stored: StoredFile) -> Path:
        return self.blobs / stored.sha256

    def list(self, purpose: str | None = None) -> list[StoredFile]:
        files = []
        for entry in self.meta.glob("file-*.json"):
            with contextlib.suppress(FileNotFoundError, ValueError, TypeError):
                stored = StoredFile(**json.loads(entry.read_bytes()))
                if purpose is None or stored.purpose == purpose:
                    files.append(stored)
        return sorted(files, key=lambda f: (f.created_at, f.id), reverse=True)

    def delete(self, file_id: str) -> StoredFile:
        stored = self.get(file_id)
        os.unlink(self.meta / f"{file_id}.json")
        if not any(other.sha256 == stored.sha256 for other in self.list()):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.blobs / stored.sha256)
        return stored


class Upload:
    """Bytes of one upload on their way to disk, hashed and size-checked as they arrive."""

    def __init__(self, store: FileStore) -> None:
        self.store = store
        self.hasher = hashlib.sha256()
        self.size = 0
        fd, temp = tempfile.mkstemp(dir=store.blobs, prefix=".upload-")
        self.temp = Path(temp)
        self.handle = os.fdopen(fd, "wb")

    def write(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.store.max_bytes:
            raise PayloadTooLarge(
                f"the file is larger than documents.max_file_mb "
                f"({self.store.max_bytes // (1024 * 1024)} MiB)",
                param="file",
                code="file_too_large",
            )
        self.hasher.update(chunk)
        self.handle.write(chunk)

    def commit(self, filename: str, purpose: str) -> StoredFile:
        self.handle.flush()
        os.fsync(self.handle.fileno())
        self.handle.close()
        return self.store._commit(self, filename, purpose)

    def abort(self) -> None:
        self.handle.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.temp)
