"""Which objects of the S3 file store failed uploads and deletes left: decided from listings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from proxy.files.blob_refs import BlobReferences
from proxy.files.protocol import FILE_ID


@dataclass(frozen=True)
class Listed:
    """One object as a LIST gave it: its key under the store's prefix, when it was written."""

    key: str
    modified: float  # seconds since the epoch, by the store's clock


@dataclass(frozen=True)
class ListedRefs:
    """A refs object as listed, and what it said when read."""

    listed: Listed
    references: BlobReferences

    @property
    def sha256(self) -> str:
        return self.listed.key.removeprefix("refs/").removesuffix(".json")


@dataclass(frozen=True)
class BucketListing:
    """The four kinds of keys the file store writes, and which listings stopped short (at the
    sweep's bound, or a refs object that could not be read): a decision that needs a whole
    listing is not made from part of one."""

    records: Sequence[Listed]  # files/<file-id>.json
    markers: Sequence[Listed]  # owners/<owner-hex>/<file-id>.<bytes>
    blobs: Sequence[Listed]  # blobs/<object-id>
    refs: Sequence[ListedRefs]  # refs/<sha256>.json
    cut: frozenset[str] = frozenset()  # of "files", "owners", "blobs", "refs"


@dataclass(frozen=True)
class Orphans:
    """What to remove, by kind; each is checked again right before it goes."""

    records: tuple[str, ...] = ()  # file ids whose record has no owner marker
    markers: tuple[str, ...] = ()  # marker keys whose record is gone
    refs: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (sha256, ids with no record) pairs
    blobs: tuple[str, ...] = ()  # blob object ids no live refs object names
    skipped: tuple[str, ...] = ()  # kinds not decided this time: a listing they need was cut

    def __len__(self) -> int:
        return len(self.records) + len(self.markers) + len(self.refs) + len(self.blobs)


def record_id(key: str) -> str | None:
    """`files/<file-id>.json` → the file id; None for a key the store never writes."""
    name = key.removeprefix("files/")
    file_id = name.removesuffix(".json")
    return file_id if name != key and FILE_ID.match(file_id) else None


def marker_id(key: str) -> str | None:
    """`owners/<owner-hex>/<file-id>.<bytes>` → the file id; None for any other key."""
    parts = key.split("/")
    if len(parts) != 3 or parts[0] != "owners":
        return None
    file_id, _, size = parts[2].partition(".")
    return file_id if FILE_ID.match(file_id) and size.isdigit() else None


def blob_id(key: str) -> str | None:
    """`blobs/<object-id>` → the object id (an upload's file id); None for any other key."""
    name = key.removeprefix("blobs/")
    return name if name != key and FILE_ID.match(name) else None


def find_orphans(listing: BucketListing, now: float, grace_s: float, limit: int) -> Orphans:
    """The orphans in `listing` at `now`, at most `limit` of them (records, then markers, refs
    and blobs).

    Nothing younger than `grace_s` is one: an upload in flight on another replica has, for a
    moment, its copy without a refs object naming it, an id in a refs object without its record
    and a record without its marker. A refs object is rewritten by each change, so an old one
    names no upload still in flight. A blob named only by a retired refs object is an orphan
    (its deleter stopped between retiring and deleting it): a retired object is never joined.
    """

    def old(listed: Listed) -> bool:
        return now - listed.modified >= grace_s

    cut = listing.cut
    record_ids = {i for r in listing.records if (i := record_id(r.key)) is not None}
    marked = {i for m in listing.markers if (i := marker_id(m.key)) is not None}
    skipped: list[str] = []

    records: list[str] = []
    if "owners" in cut:
        skipped.append("records")
    else:
        for listed in listing.records:
            file_id = record_id(listed.key)
            if file_id is not None and file_id not in marked and old(listed):
                records.append(file_id)

    markers: list[str] = []
    refs: list[tuple[str, tuple[str, ...]]] = []
    if "files" in cut:
        skipped += ["markers", "refs"]
    else:
        for listed in listing.markers:
            file_id = marker_id(listed.key)
            if file_id is not None and file_id not in record_ids and old(listed):
                markers.append(listed.key)
        for listed_refs in listing.refs:
            references = listed_refs.references
            dead = tuple(f for f in references.files if f not in record_ids)
            if dead and old(listed_refs.listed):
                refs.append((listed_refs.sha256, dead))

    blobs: list[str] = []
    if "refs" in cut:
        skipped.append("blobs")
    else:
        named = {r.references.blob for r in listing.refs if not r.references.retired}
        for listed in listing.blobs:
            object_id = blob_id(listed.key)
            if object_id is not None and object_id not in named and old(listed):
                blobs.append(object_id)

    # Within the bound, in this order: a record's removal also releases its refs and blob.
    records = records[:limit]
    markers = markers[: limit - len(records)]
    refs = refs[: limit - len(records) - len(markers)]
    blobs = blobs[: limit - len(records) - len(markers) - len(refs)]
    return Orphans(tuple(records), tuple(markers), tuple(refs), tuple(blobs), tuple(skipped))
