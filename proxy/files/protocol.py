"""What the Files API routes and the references stage need from a file store, whatever backs it."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol

from proxy.errors import PayloadTooLarge, ProxyError

FILE_ID = re.compile(r"^file-[a-f0-9]{24}$")

# `owner=None` in a call means "any owner": what an admin key sees.
Owner = str | None


class FileNotFound(ProxyError):
    """No stored file has this id, or it belongs to another key (404 either way: ids never leak
    whose they are)."""

    status = 404
    type = "invalid_request_error"

    def __init__(self, file_id: str) -> None:
        super().__init__(f"no such file: {file_id!r}", param="file_id", code="file_not_found")


class QuotaExceeded(ProxyError):
    """The key's stored files and the indexes built from them would exceed
    server.max_storage_mb_per_key (507)."""

    status = 507
    type = "insufficient_storage"

    def __init__(self, limit_bytes: int) -> None:
        super().__init__(
            "this key's stored files and their vector store indexes would exceed "
            f"server.max_storage_mb_per_key ({limit_bytes / (1024 * 1024):g} MiB); delete some"
            " files first",
            param="file",
            code="storage_quota_exceeded",
        )


def nothing_else(owner: str) -> int:
    """A file store's `other_usage` until the vector stores are there."""
    return 0


@dataclass(frozen=True)
class StoredFile:
    """What OpenAI's Files API returns for a file, plus who owns it and the sha256 of its bytes."""

    id: str
    bytes: int
    created_at: int
    filename: str
    purpose: str
    sha256: str
    owner: str = "anonymous"  # records written before files had owners belong to nobody's key

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


@dataclass
class Room:
    """How much one upload may still hold: the smaller of documents.max_file_mb and what the
    owner's quota leaves. Every backend checks each chunk against it the same way."""

    max_bytes: int
    quota_bytes: int | None
    limit: int

    @classmethod
    def for_owner(cls, max_bytes: int, quota_bytes: int | None, used: int) -> Room:
        """The room of a new upload by an owner who already stores `used` bytes."""
        limit = max_bytes
        if quota_bytes is not None:
            left = quota_bytes - used
            if left <= 0:
                raise QuotaExceeded(quota_bytes)
            limit = min(limit, left)
        return cls(max_bytes, quota_bytes, limit)

    def check(self, size: int) -> None:
        """Refuse an upload that has grown to `size` bytes past its room."""
        if size <= self.limit:
            return
        if size <= self.max_bytes and self.quota_bytes is not None:
            raise QuotaExceeded(self.quota_bytes)
        raise PayloadTooLarge(
            "the file is larger than documents.max_file_mb "
            f"({self.max_bytes / (1024 * 1024):g} MiB)",
            param="file",
            code="file_too_large",
        )


class Upload(Protocol):
    """Bytes of one upload on their way into the store; nothing is visible before `commit`."""

    def write(self, chunk: bytes) -> None: ...

    def commit(self, filename: str, purpose: str) -> StoredFile: ...

    def abort(self) -> None: ...


class FileStore(Protocol):
    """A store of uploads that each belong to one owner. The methods block: call them off the
    event loop. A file another owner holds is reported exactly as a missing one (FileNotFound).
    Same bytes may be stored once, but nothing an owner sees (ids, timing, quota) tells whether
    another owner holds them."""

    def begin_upload(self, owner: str) -> Upload: ...

    def get(self, file_id: str, owner: Owner) -> StoredFile: ...

    def open(self, file_id: str, owner: Owner) -> tuple[StoredFile, BinaryIO]:
        """The record and a readable handle on its bytes (the caller closes it)."""
        ...

    def read(self, file_id: str, owner: Owner) -> tuple[StoredFile, bytes]: ...

    def list(self, owner: Owner, purpose: str | None = None) -> list[StoredFile]: ...

    def delete(self, file_id: str, owner: Owner) -> StoredFile: ...

    def usage(self, owner: str) -> int:
        """Bytes of the files `owner` holds (each upload counts in full, shared bytes or not)."""
        ...

    # What else counts against the owner's quota (the vector stores' indexes, set by wiring).
    other_usage: Callable[[str], int]
