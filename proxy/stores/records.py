"""A vector store, its files and its file batches as they are kept, and the states they are in."""

from __future__ import annotations

import re
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

DAY_S = 86_400
STORE_ID = re.compile(r"^vs_[a-f0-9]{24}$")
BATCH_ID = re.compile(r"^vsfb_[a-f0-9]{24}$")

FileStatus = Literal["in_progress", "completed", "failed", "cancelled"]
ErrorCode = Literal["server_error", "unsupported_file", "invalid_file"]
Attributes = dict[str, str | bool | int | float]


def new_store_id() -> str:
    return f"vs_{uuid.uuid4().hex[:24]}"


def new_batch_id() -> str:
    return f"vsfb_{uuid.uuid4().hex[:24]}"


class Record(BaseModel):
    """Records written by a newer proxy may hold more fields: they are ignored, not an error."""

    model_config = ConfigDict(extra="ignore")


class ExpiresAfter(Record):
    anchor: Literal["last_active_at"] = "last_active_at"
    days: int


class Chunking(Record):
    """How a file is cut into passages: `auto` (the proxy's retrieval settings) or `static`,
    in the embedding model's tokens."""

    type: Literal["auto", "static"] = "auto"
    max_chunk_size_tokens: int | None = None
    chunk_overlap_tokens: int | None = None

    def sizes(self, default_tokens: int, default_overlap: int) -> tuple[int, int]:
        if self.type == "static" and self.max_chunk_size_tokens is not None:
            return self.max_chunk_size_tokens, self.chunk_overlap_tokens or 0
        return default_tokens, default_overlap


class StoreRecord(Record):
    """One vector store: who owns it, what it is called, when it was last used."""

    id: str
    owner: str
    created: float  # time.time() at creation: orders listings (created_at is whole seconds)
    name: str = ""
    description: str | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    expires_after: ExpiresAfter | None = None
    last_active_at: int = 0

    @property
    def created_at(self) -> int:
        return int(self.created)

    def expires_at(self) -> int | None:
        if self.expires_after is None:
            return None
        return self.last_active_at + self.expires_after.days * DAY_S

    def expired(self, now: float) -> bool:
        until = self.expires_at()
        return until is not None and now >= until


class LastError(Record):
    code: ErrorCode
    message: str


class FileRecord(Record):
    """One file of a store: its indexing state, attributes, and (once parsed) its content's
    sha256 and kind, which find its passages and its parsed text again."""

    id: str  # the File's id (file-...)
    store_id: str
    created: float
    status: FileStatus = "in_progress"
    filename: str = ""
    attributes: dict[str, Any] = Field(default_factory=dict)
    chunking: Chunking = Field(default_factory=Chunking)
    batch_id: str | None = None
    last_error: LastError | None = None
    usage_bytes: int = 0
    sha256: str = ""
    kind: str = ""
    # The process indexing it right now, and until when its claim holds without renewal.
    runner: str | None = None
    runner_until: float = 0.0

    @property
    def created_at(self) -> int:
        return int(self.created)

    def claimable(self, runner: str, now: float) -> bool:
        """Nobody works on it, we do, or its runner stopped renewing its claim."""
        return self.status == "in_progress" and (
            self.runner is None or self.runner == runner or self.runner_until <= now
        )


class BatchRecord(Record):
    id: str
    store_id: str
    created: float
    file_ids: list[str]
    cancelled: bool = False

    @property
    def created_at(self) -> int:
        return int(self.created)


def file_counts(files: list[FileRecord]) -> dict[str, int]:
    counts = {"in_progress": 0, "completed": 0, "failed": 0, "cancelled": 0}
    for record in files:
        counts[record.status] += 1
    return {**counts, "total": len(files)}


def store_status(store: StoreRecord, files: list[FileRecord], now: float) -> str:
    if store.expired(now):
        return "expired"
    if any(record.status == "in_progress" for record in files):
        return "in_progress"
    return "completed"


def batch_status(batch: BatchRecord, files: list[FileRecord]) -> str:
    if batch.cancelled:
        return "cancelled"
    if any(record.status == "in_progress" for record in files):
        return "in_progress"
    if files and all(record.status == "failed" for record in files):
        return "failed"
    return "completed"
