"""Which uploads share one stored blob in the object store: pure decisions over a small record.

One record per content (`refs/<sha256>.json`) names the blob object holding those bytes and
the uploads using it. Replicas change it only by compare-and-swap (a create with
If-None-Match, a replace with If-Match on its ETag), so of two changes made from the same
version one fails and is redone from the new version. When its last upload goes, the record
is *retired* (no uploads) by the same swap, and only then is the blob deleted: an upload that
arrives later finds a retired record and starts a new one naming its own blob, never the one
being deleted. Every version carries a fresh `rev`, so equal contents never share an ETag
(no ABA) and a writer can recognise its own write after a lost reply.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field


def new_rev() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True)
class BlobReferences:
    """The blob object holding some bytes and the ids of the uploads that use it."""

    blob: str
    files: tuple[str, ...]
    rev: str = field(default_factory=new_rev)

    @property
    def retired(self) -> bool:
        """No upload uses the blob: it is being (or has been) deleted; never add to it."""
        return not self.files

    def encode(self) -> bytes:
        return json.dumps({"blob": self.blob, "files": list(self.files), "rev": self.rev}).encode()

    @classmethod
    def decode(cls, data: bytes) -> BlobReferences:
        entry = json.loads(data)
        return cls(str(entry["blob"]), tuple(str(f) for f in entry["files"]), str(entry["rev"]))


def with_file(current: BlobReferences | None, file_id: str, own_blob: str) -> BlobReferences:
    """`file_id` added: to the live blob if there is one, else a new record naming its own."""
    if current is None or current.retired:
        return BlobReferences(own_blob, (file_id,))
    if file_id in current.files:
        return BlobReferences(current.blob, current.files)
    return BlobReferences(current.blob, (*current.files, file_id))


def without_file(current: BlobReferences, file_id: str) -> BlobReferences:
    """`file_id` removed; with nobody left the record is retired and its blob may go."""
    return BlobReferences(current.blob, tuple(f for f in current.files if f != file_id))
