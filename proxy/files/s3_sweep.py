"""The S3 file store's sweep: orphans listed, checked again and removed while replicas work."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import obstore
import structlog

from proxy.files.blob_refs import BlobReferences
from proxy.files.lease import ObjectLeases
from proxy.files.objects import MISSING
from proxy.files.orphans import (
    BucketListing,
    Listed,
    ListedRefs,
    Orphans,
    find_orphans,
    marker_id,
)
from proxy.files.protocol import FileNotFound
from proxy.files.s3 import S3FileStore, calling, marker_key, record_key

log = structlog.get_logger(__name__)

SWEEP_MAX_LISTED = 50_000
"""Keys listed of each kind per sweep: past it the listing is cut, and what needs it whole waits."""
SWEEP_MAX_REMOVED = 1_000
"""Orphans removed per sweep; the next sweep takes the rest."""
LIST_PAGE = 1000  # keys per LIST request (S3's largest page)
REFS_READ_AT_ONCE = 4  # small GETs in flight while a sweep reads the refs objects


class OrphanSweep:
    """Finds and removes the S3 file store's orphans; the methods block (obstore's calls)."""

    def __init__(
        self,
        files: S3FileStore,
        grace_s: float,
        *,
        clock: Callable[[], float] = time.time,
        max_listed: int = SWEEP_MAX_LISTED,
        max_removed: int = SWEEP_MAX_REMOVED,
    ) -> None:
        self.files = files
        self.store = files.store
        self.grace_s = grace_s
        self.clock = clock
        self.max_listed = max_listed
        self.max_removed = max_removed
        self.stopping = threading.Event()  # set at shutdown: a sweep under way stops early

    def run(self) -> Counter[str]:
        """One sweep: the orphans found, checked again and removed; what happened, by kind."""
        # This replica's own failed clean-ups first, if the store is back.
        self.files.retry_clean_ups()
        orphans = self.survey()
        done = self.remove(orphans)
        if orphans:
            log.info("file store swept", **done)
        else:
            log.debug("file store swept: no orphans")
        if orphans.skipped:
            log.warning(
                "file store sweep cut short: more keys of a kind than a sweep lists",
                skipped=",".join(orphans.skipped),
                max_listed=self.max_listed,
            )
        return done

    # -- the listing -----------------------------------------------------------------------

    def survey(self) -> Orphans:
        """The orphans as the bucket's listings show them now."""
        # The clock read first: an object written while the listings run is young, never old.
        now = self.clock()
        # Listed in the order an upload writes (its copy, the refs, the record, the marker), so
        # a later listing sees what an upload seen in an earlier one wrote next.
        blobs, blobs_cut = self._list("blobs/")
        refs, refs_cut = self._read_refs()
        records, records_cut = self._list("files/")
        markers, markers_cut = self._list("owners/")
        cut = {
            kind
            for kind, was_cut in (
                ("blobs", blobs_cut),
                ("refs", refs_cut),
                ("files", records_cut),
                ("owners", markers_cut),
            )
            if was_cut
        }
        listing = BucketListing(records, markers, blobs, refs, frozenset(cut))
        return find_orphans(listing, now, self.grace_s, self.max_removed)

    def _list(self, prefix: str) -> tuple[list[Listed], bool]:
        """The keys under `prefix`, at most `max_listed` (True: there were more)."""

        def listing() -> tuple[list[Listed], bool]:
            found: list[Listed] = []
            for batch in obstore.list(self.store, prefix, chunk_size=LIST_PAGE):
                if self.stopping.is_set():
                    return found, True
                for meta in batch:
                    if len(found) >= self.max_listed:
                        return found, True
                    found.append(Listed(meta["path"], meta["last_modified"].timestamp()))
            return found, False

        return calling("list files", listing)

    def _read_refs(self) -> tuple[list[ListedRefs], bool]:
        listed, cut = self._list("refs/")

        def read(entry: Listed) -> ListedRefs | None:
            if self.stopping.is_set():
                return None
            try:
                found = calling("read a blob's references", lambda: self._get(entry.key))
            except MISSING:
                return None  # gone since listed (the store never deletes one): blobs wait
            try:
                return ListedRefs(found[0], BlobReferences.decode(found[1]))
            except (ValueError, KeyError, TypeError):
                return None  # not the store's writing: which blob it names is unknown

        with ThreadPoolExecutor(REFS_READ_AT_ONCE, thread_name_prefix="s3-sweep") as pool:
            found = list(pool.map(read, listed))
        read_all = all(r is not None for r in found)
        return [r for r in found if r is not None], cut or not read_all

    def _get(self, key: str) -> tuple[Listed, bytes]:
        """The object and when this version of it was written: a refs object may change
        between its listing and its reading, and its age is the age of what was read."""
        result = obstore.get(self.store, key)
        return Listed(key, result.meta["last_modified"].timestamp()), bytes(result.bytes())

    def _exists(self, key: str) -> bool:
        try:
            calling("look for a file", lambda: obstore.head(self.store, key))
        except MISSING:
            return False
        return True

    def _delete(self, key: str) -> None:
        with contextlib.suppress(*MISSING):  # gone already
            calling("delete an orphan", lambda: obstore.delete(self.store, key))

    # -- removing, each checked again first --------------------------------------------------

    def remove(self, orphans: Orphans) -> Counter[str]:
        """Remove what `orphans` names unless it stopped being one since it was listed; what
        was removed by kind, and how many were `kept` (no longer orphans when checked)."""
        steps: list[Callable[[], tuple[str, ...]]] = [
            *(functools.partial(self._remove_record, f) for f in orphans.records),
            *(functools.partial(self._remove_marker, k) for k in orphans.markers),
            *(functools.partial(self._prune_refs, sha, dead) for sha, dead in orphans.refs),
            *(functools.partial(self._remove_blob, b) for b in orphans.blobs),
        ]
        done: Counter[str] = Counter()
        for step in steps:
            if self.stopping.is_set():
                break
            done.update(step() or ("kept",))
        return done

    def _remove_record(self, file_id: str) -> tuple[str, ...]:
        """A record without its marker: an upload that failed between the two (the record is
        never listed, its bytes still count in the refs object)."""
        try:
            stored, _ = self.files.record_of(file_id)
        except FileNotFound:
            return ("gone",)  # deleted meanwhile (its id can be asked for, and deleted)
        except (ValueError, KeyError, TypeError):
            return ()  # not the store's writing: left alone
        if self._exists(marker_key(stored)):
            return ()  # its upload finished after all
        self._delete(record_key(file_id))
        # As a delete does: the blob goes with it if this was its last user.
        if self.files.release(stored.sha256, file_id):
            return ("records", "blobs")
        return ("records",)

    def _remove_marker(self, key: str) -> tuple[str, ...]:
        """A marker without its record: a delete that failed after the record (the file still
        counted in its owner's usage)."""
        file_id = marker_id(key)
        if file_id is None or self._exists(record_key(file_id)):
            return ()
        self._delete(key)
        return ("markers",)

    def _prune_refs(self, sha256: str, dead: tuple[str, ...]) -> tuple[str, ...]:
        """Ids of files that no longer exist, out of a refs object, by the same compare-and-swap
        as a delete; the swap that leaves nobody retires it and deletes the blob. A file that
        joined since stays in it, and keeps the blob."""
        still_dead = tuple(f for f in dead if not self._exists(record_key(f)))
        if not still_dead:
            return ()
        if self.files.release(sha256, *still_dead):
            return ("references", "blobs")
        return ("references",)

    def _remove_blob(self, object_id: str) -> tuple[str, ...]:
        """A copy no live refs object names: an upload's own copy left by a crash or a failed
        clean-up, a duplicate whose deferred delete did not run, or the blob of a retired refs
        object whose deleter stopped before deleting it."""
        # Only its own upload could name it now (a new refs object names the uploader's copy),
        # and that upload's record names it once written.
        try:
            _, blob = self.files.record_of(object_id)
        except FileNotFound:
            blob = None
        except (ValueError, KeyError, TypeError):
            return ()  # a record not of the store's writing: which blob it uses is unknown
        if blob == object_id:
            return ()
        self._delete(f"blobs/{object_id}")
        return ("blobs",)


SWEEP_LEASE = "file-sweep"
"""The lease (`leases/file-sweep`) a sweeping process claims for a whole interval and leaves to
run out: one process of all the replicas sweeps per interval."""


async def sweep_turn(sweep: OrphanSweep, leases: ObjectLeases | None) -> bool:
    """One turn: the sweep runs unless another process of any replica swept within the interval
    (it holds the lease); True when this one swept. Without `leases`, it always runs."""
    if leases is not None and await leases.claim(SWEEP_LEASE) is None:
        return False
    await asyncio.to_thread(sweep.run)
    return True


async def sweep_forever(
    sweep: OrphanSweep, every_s: float, leases: ObjectLeases | None = None
) -> None:
    """A turn now (a replica starting) and every `every_s`, the sweep in a thread; a failed one
    (the store down) is logged and tried at the next turn. With `leases` (held for `every_s`),
    one process of all the replicas sweeps per interval."""
    try:
        while True:
            try:
                if not await sweep_turn(sweep, leases):
                    log.debug("file store sweep: another process swept within the interval")
            except Exception as error:
                log.warning("file store sweep failed", error=repr(error)[:300])
            await asyncio.sleep(every_s)
    finally:
        sweep.stopping.set()
