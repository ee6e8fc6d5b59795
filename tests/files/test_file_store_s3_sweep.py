"""The S3 file store's sweep of orphans on a real SeaweedFS: each kind a failed upload or delete
leaves goes, a live file and anything young stay, and what changed since the listing is kept."""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import obstore
import pytest
import structlog

from proxy.config import FileStoreSettings, load_settings
from proxy.files.blob_refs import BlobReferences
from proxy.files.lease import ObjectLeases
from proxy.files.objects import make_object_store
from proxy.files.protocol import StoredFile
from proxy.files.s3 import S3FileStore, owner_key
from proxy.files.s3_sweep import OrphanSweep, sweep_forever, sweep_turn
from proxy.wiring import start_file_sweep

GRACE = 3600.0
LIVE = b"a file someone uploaded and still uses"


def replica(files: FileStoreSettings) -> S3FileStore:
    return S3FileStore(make_object_store(files), 10_000, quota_bytes=100_000)


def upload(store: S3FileStore, owner: str, data: bytes = LIVE) -> StoredFile:
    pending = store.begin_upload(owner)
    pending.write(data)
    return pending.commit("kept.txt", "user_data")


def keys(store: S3FileStore, prefix: str = "") -> set[str]:
    return {m["path"] for batch in obstore.list(store.store, prefix or None) for m in batch}


def newest(store: S3FileStore) -> float:
    """When the last object was written, by the store's clock: the sweeps' clocks count from it."""
    return max(m["last_modified"].timestamp() for batch in obstore.list(store.store) for m in batch)


def past_grace(store: S3FileStore) -> OrphanSweep:
    """A sweep whose clock, each time it is read, stands past the grace of everything in the
    store then."""
    return OrphanSweep(store, GRACE, clock=lambda: newest(store) + GRACE + 1)


def put(store: S3FileStore, key: str, data: bytes = b"") -> None:
    obstore.put(store.store, key, data)


def write_record(store: S3FileStore, file_id: str, size: int, sha: str, owner: str) -> None:
    """A file's record as a commit writes it, naming its own copy as the blob."""
    stored = StoredFile(file_id, size, 1, f"{file_id}.txt", "user_data", sha, owner)
    put(store, f"files/{file_id}.json", json.dumps({**asdict(stored), "blob": file_id}).encode())


def refs_of(store: S3FileStore, sha: str) -> BlobReferences:
    return BlobReferences.decode(bytes(obstore.get(store.store, f"refs/{sha}.json").bytes()))


class Orphaned:
    """Orphans of every kind, written directly as failures would have left them."""

    def __init__(self, store: S3FileStore, tag: int) -> None:
        def file_id(n: int) -> str:
            return f"file-{tag:04x}{n:020x}"

        def sha(n: int) -> str:
            return hashlib.sha256(f"{tag}-{n}".encode()).hexdigest()

        self.store = store
        # An upload that failed between its record and its marker (its clean-up failed too).
        self.record_id, self.record_sha = file_id(1), sha(1)
        write_record(store, self.record_id, 5, self.record_sha, "team-b")
        self.write_refs(self.record_sha, self.record_id, self.record_id)
        put(store, f"blobs/{self.record_id}", b"bytes")
        # A delete that failed after the record: the marker, the refs naming it, the blob.
        self.deleted_id, self.deleted_sha = file_id(2), sha(2)
        self.marker = f"owners/{owner_key('team-a')}/{self.deleted_id}.7"
        put(store, self.marker)
        self.write_refs(self.deleted_sha, self.deleted_id, self.deleted_id)
        put(store, f"blobs/{self.deleted_id}", b"deleted")
        # An upload's own copy left by a crash, and a blob whose deleter died after retiring.
        self.crashed_id = file_id(3)
        put(store, f"blobs/{self.crashed_id}", b"half")
        self.retired_id, self.retired_sha = file_id(4), sha(4)
        self.write_refs(self.retired_sha, self.retired_id)
        put(store, f"blobs/{self.retired_id}", b"retired")

    def write_refs(self, sha: str, blob: str, *files: str) -> None:
        put(self.store, f"refs/{sha}.json", BlobReferences(blob, files).encode())

    def blob_ids(self) -> tuple[str, ...]:
        return (self.record_id, self.deleted_id, self.crashed_id, self.retired_id)

    def keys(self) -> set[str]:
        return {
            f"files/{self.record_id}.json",
            self.marker,
            *(f"blobs/{i}" for i in self.blob_ids()),
        }


def live_file_is_whole(store: S3FileStore, live: StoredFile) -> None:
    assert store.read(live.id, "team-a") == (live, LIVE)
    assert [f.id for f in store.list("team-a")] == [live.id]
    assert store.usage("team-a") == len(LIVE)


def test_every_kind_of_orphan_goes_and_a_live_file_stays(s3_files: FileStoreSettings) -> None:
    store = replica(s3_files)
    live = upload(store, "team-a")
    orphans = Orphaned(store, 1)
    assert store.usage("team-a") == len(LIVE) + 7  # the orphaned marker counts against the quota
    before = keys(store)
    with structlog.testing.capture_logs() as logged:
        done = past_grace(store).run()

    assert done == {"records": 1, "markers": 1, "references": 1, "blobs": 4}
    [line] = [e for e in logged if e["event"] == "file store swept"]
    assert {k: line[k] for k in done} == done
    assert keys(store) == before - orphans.keys()
    for sha in (orphans.record_sha, orphans.deleted_sha, orphans.retired_sha):
        assert refs_of(store, sha).retired  # released as a delete would, kept as a delete keeps
    live_file_is_whole(store, live)
    # Nothing left: a second sweep finds nothing.
    assert past_grace(store).run() == {}


def test_young_orphans_stay_until_they_are_old(s3_files: FileStoreSettings) -> None:
    store = replica(s3_files)
    orphans = Orphaned(store, 2)
    written = newest(store)
    young = OrphanSweep(store, GRACE, clock=lambda: written + GRACE / 2)
    assert young.survey().skipped == ()
    assert len(young.survey()) == 0
    assert young.run() == {}
    assert orphans.keys() <= keys(store)
    old = OrphanSweep(store, GRACE, clock=lambda: written + 2 * GRACE)
    assert old.run()["blobs"] == 4
    assert not orphans.keys() & keys(store)


def test_a_record_that_gained_its_marker_since_the_listing_is_kept(
    s3_files: FileStoreSettings,
) -> None:
    store = replica(s3_files)
    orphans = Orphaned(store, 3)
    sweep = past_grace(store)
    found = sweep.survey()
    assert found.records == (orphans.record_id,)
    put(store, f"owners/{owner_key('team-b')}/{orphans.record_id}.5")  # its upload finished
    done = sweep.remove(found)
    assert done["records"] == 0 and done["kept"] == 1
    assert store.read(orphans.record_id, "team-b")[1] == b"bytes"
    assert [f.id for f in store.list("team-b")] == [orphans.record_id]


def test_a_marker_whose_record_appeared_since_the_listing_is_kept(
    s3_files: FileStoreSettings,
) -> None:
    store = replica(s3_files)
    orphans = Orphaned(store, 4)
    sweep = past_grace(store)
    found = sweep.survey()
    assert found.markers == (orphans.marker,)
    write_record(store, orphans.deleted_id, 7, orphans.deleted_sha, "team-a")
    done = sweep.remove(found)
    assert done["markers"] == 0 and done["references"] == 0
    assert orphans.marker in keys(store)
    assert store.read(orphans.deleted_id, "team-a")[1] == b"deleted"


def test_a_blob_whose_refs_gained_a_live_file_since_the_listing_stays(
    s3_files: FileStoreSettings,
) -> None:
    store = replica(s3_files)
    data = b"bytes a failed delete left, uploaded again"
    sha = hashlib.sha256(data).hexdigest()
    dead = "file-" + "d" * 24
    put(store, f"blobs/{dead}", data)
    put(store, f"refs/{sha}.json", BlobReferences(dead, (dead,)).encode())
    sweep = past_grace(store)
    found = sweep.survey()
    assert found.refs == ((sha, (dead,)),)
    joined = upload(store, "team-a", data)  # joins the blob by compare-and-swap on its refs
    done = sweep.remove(found)
    assert done == {"references": 1}  # the dead id out; the live one keeps the blob
    assert refs_of(store, sha).files == (joined.id,)
    assert store.read(joined.id, "team-a")[1] == data
    assert f"blobs/{dead}" in keys(store)


def test_a_copy_whose_upload_committed_since_the_listing_stays(
    s3_files: FileStoreSettings,
) -> None:
    store = replica(s3_files)
    orphans = Orphaned(store, 5)
    sweep = past_grace(store)
    found = sweep.survey()
    assert orphans.crashed_id in found.blobs
    sha = hashlib.sha256(b"half").hexdigest()
    orphans.write_refs(sha, orphans.crashed_id, orphans.crashed_id)  # its upload, late
    write_record(store, orphans.crashed_id, 4, sha, "team-c")
    sweep.remove(found)
    assert store.read(orphans.crashed_id, "team-c")[1] == b"half"


def test_a_sweep_stops_at_its_bounds(s3_files: FileStoreSettings) -> None:
    store = replica(s3_files)
    orphans = Orphaned(store, 6)

    def clock() -> float:
        return newest(store) + GRACE + 1

    few = OrphanSweep(store, GRACE, clock=clock, max_removed=1)
    assert few.run() == {"records": 1, "blobs": 1}  # one orphan, and the blob it released
    short = OrphanSweep(store, GRACE, clock=clock, max_listed=2)
    assert short.survey().skipped == ("blobs",)  # three refs objects, two read: blobs wait
    with structlog.testing.capture_logs() as logged:
        short.run()
    assert [e["skipped"] for e in logged if e["log_level"] == "warning"] == ["blobs"]
    assert {f"blobs/{orphans.crashed_id}", f"blobs/{orphans.retired_id}"} <= keys(store)
    assert orphans.marker not in keys(store)
    OrphanSweep(store, GRACE, clock=clock).run()  # whole listings: the rest go
    assert not orphans.keys() & keys(store)


def test_a_sweep_told_to_stop_lists_no_further_and_removes_nothing(
    s3_files: FileStoreSettings,
) -> None:
    store = replica(s3_files)
    orphans = Orphaned(store, 8)
    sweep = past_grace(store)
    found = sweep.survey()
    sweep.stopping.set()  # the process is shutting down
    assert sweep.survey().skipped == ("records", "markers", "refs", "blobs")
    assert sweep.remove(found) == {}
    assert orphans.keys() <= keys(store)


async def test_the_sweep_runs_at_start_and_every_interval_and_outlives_a_failure(
    s3_files: FileStoreSettings,
) -> None:
    store = replica(s3_files)
    runs: list[str] = []

    class Counted(OrphanSweep):
        def run(self) -> Any:
            runs.append("run")
            if len(runs) == 1:
                raise OSError("the store is down")
            return super().run()

    sweep = Counted(store, GRACE)
    task = asyncio.create_task(sweep_forever(sweep, every_s=0.01))
    for _ in range(3000):
        if len(runs) >= 3:
            break
        await asyncio.sleep(0.01)
    assert len(runs) >= 3  # the first run failed; the next ones came all the same
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sweep.stopping.is_set()  # a run under way in its thread stops early


async def test_one_process_of_all_the_replicas_sweeps_per_interval(
    s3_files: FileStoreSettings,
) -> None:
    """The first to claim the lease sweeps; another process's turn within the interval sweeps
    nothing; once the lease has run out (it is left to, not released), the next turn sweeps."""
    first, second = replica(s3_files), replica(s3_files)
    orphans = Orphaned(first, 4)
    old = newest(first) + GRACE + 1
    now = [old]
    clock = lambda: now[0]  # noqa: E731
    leases = [ObjectLeases(r.store, name, lease_s=10 * GRACE, clock=clock) for r, name in
              ((first, "replica-a"), (second, "replica-b"))]  # fmt: skip
    sweeps = [OrphanSweep(r, GRACE, clock=clock) for r in (first, second)]
    assert await sweep_turn(sweeps[1], leases[1]) is True  # a replica starting
    assert not orphans.keys() & keys(first)
    later = Orphaned(first, 5)  # more left behind since
    now[0] += GRACE + 1  # old enough, but within the interval
    assert await sweep_turn(sweeps[0], leases[0]) is False
    assert await sweep_turn(sweeps[1], leases[1]) is False  # not even by the same process
    assert later.keys() <= keys(first)
    now[0] += 10 * GRACE  # the lease has run out
    assert await sweep_turn(sweeps[0], leases[0]) is True
    assert not later.keys() & keys(first)
    assert await sweep_turn(sweeps[0], None) is True  # without leases: always


def test_sweeping_is_off_at_zero_and_for_local_files(s3_files: FileStoreSettings) -> None:
    store = replica(s3_files)
    files = {**s3_files.model_dump(), "sweep_every_min": 0}
    off = load_settings(None, environ={}, overrides={"files": files})
    assert start_file_sweep(off, store, store.store) is None
    local = load_settings(None, environ={}, overrides={})
    assert start_file_sweep(local, store, None) is None


def test_a_replica_starting_sweeps_the_orphans_it_finds(
    make_proxy: Callable[..., str], s3_files: FileStoreSettings
) -> None:
    store = replica(s3_files)
    orphans = Orphaned(store, 7)
    files = {**s3_files.model_dump(), "orphan_age_min": 1e-6}  # everything already old
    make_proxy(files=files)
    deadline = time.monotonic() + 30
    while orphans.keys() & keys(store) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not orphans.keys() & keys(store)
    assert "leases/file-sweep" in keys(store)  # held for the interval: other replicas wait


def test_sweeping_beside_replicas_churning_the_same_bytes_loses_nothing(
    s3_files: FileStoreSettings,
) -> None:
    """Sweeps with the real clock while two replicas upload, read and delete the same bytes:
    the old orphans go, no upload in flight is taken for one."""
    grace_s = 5.0
    sweeper, *churners = (replica(s3_files) for _ in range(3))
    orphans = Orphaned(sweeper, 9)
    written = newest(sweeper)
    while time.time() < written + grace_s + 1:  # the orphans grow old; nothing else is there
        time.sleep(0.2)
    lost: list[str] = []
    done = threading.Event()

    def churn(store: S3FileStore, owner: str) -> None:
        for _ in range(25):
            mine = upload(store, owner)
            try:
                assert store.read(mine.id, owner)[1] == LIVE
                assert [f.id for f in store.list(owner)] == [mine.id]
            except Exception as error:
                lost.append(repr(error))
            store.delete(mine.id, owner)

    def sweep() -> None:
        while not done.is_set():
            OrphanSweep(sweeper, grace_s).run()

    sweeping = threading.Thread(target=sweep)
    sweeping.start()
    threads = [
        threading.Thread(target=churn, args=(s, f"owner-{n}")) for n, s in enumerate(churners)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    done.set()
    sweeping.join(60)
    assert lost == []
    assert not orphans.keys() & keys(sweeper)
    assert keys(sweeper, "files/") == keys(sweeper, "owners/") == set()
