"""Indexing jobs' claims, with a clock the test moves: a live claim is left alone, a lapsed one
is taken over, and an outcome is written only while the claim is still the job's own."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from proxy.files.protocol import FileNotFound
from proxy.stores.backend import DiskRecords
from proxy.stores.chunking import Variants
from proxy.stores.jobs import IndexingJobs, Outcome
from proxy.stores.records import FileRecord, StoreRecord
from proxy.stores.registry import StoreRegistry

STORE = "vs_" + "a" * 24
FILE = "file-" + "b" * 24


class GoneFiles:
    """A file store in which every file has been deleted."""

    def read(self, file_id: str, owner: Any) -> Any:
        raise FileNotFound(file_id)


async def no_variants() -> Variants:
    raise AssertionError("a deleted file is never indexed")


def setup(tmp_path: Path, now: list[float], **record: Any) -> tuple[StoreRegistry, IndexingJobs]:
    registry = StoreRegistry(DiskRecords(tmp_path))
    registry.save_store(StoreRecord(id=STORE, owner="me", created=now[0]))
    registry.save_file(FileRecord(id=FILE, store_id=STORE, created=now[0], **record))
    jobs = IndexingJobs(
        registry,
        GoneFiles(),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        no_variants,
        runner="me",
        lease_s=30,
        clock=lambda: now[0],
    )
    return registry, jobs


async def settled(jobs: IndexingJobs) -> None:
    while jobs.running():
        await asyncio.sleep(0.01)


async def test_a_live_claim_is_left_alone_and_a_lapsed_one_taken_over(tmp_path: Path) -> None:
    now = [1000.0]
    registry, jobs = setup(tmp_path, now, runner="other", runner_until=1010.0)
    assert await jobs.sweep() == 0
    assert registry.file(STORE, FILE).status == "in_progress"  # type: ignore[union-attr]
    now[0] = 1010.0  # the other runner stopped renewing: its claim ran out
    assert await jobs.sweep() == 1
    await settled(jobs)
    record = registry.file(STORE, FILE)
    assert record is not None and record.status == "failed" and record.runner is None
    assert record.last_error is not None and record.last_error.code == "invalid_file"
    await jobs.close()


async def test_an_outcome_is_written_only_under_the_jobs_own_claim(tmp_path: Path) -> None:
    now = [1000.0]
    registry, jobs = setup(tmp_path, now)
    claimed = registry.change_file(STORE, FILE, lambda r: jobs._claim(r, "me"))
    assert claimed is not None and claimed.runner == "me"
    done = Outcome("completed", 10, "c" * 64, "text")
    # Cancelled meanwhile (a batch cancel on another replica): the outcome is dropped.
    registry.change_file(STORE, FILE, lambda r: r.model_copy(update={"status": "cancelled"}))
    assert registry.change_file(STORE, FILE, lambda r: jobs._settle(r, done, "me")).status == (  # type: ignore[union-attr]
        "cancelled"
    )
    # Taken over by another runner: dropped too.
    registry.change_file(
        STORE, FILE, lambda r: r.model_copy(update={"status": "in_progress", "runner": "other"})
    )
    after = registry.change_file(STORE, FILE, lambda r: jobs._settle(r, done, "me"))
    assert after is not None and after.status == "in_progress" and after.runner == "other"
    # Its own claim: written, and the claim released.
    registry.change_file(STORE, FILE, lambda r: r.model_copy(update={"runner": "me"}))
    final = registry.change_file(STORE, FILE, lambda r: jobs._settle(r, done, "me"))
    assert final is not None and final.status == "completed" and final.usage_bytes == 10
    assert final.runner is None
    # A deleted file stays deleted.
    registry.delete_file(STORE, FILE)
    assert registry.change_file(STORE, FILE, lambda r: jobs._settle(r, done, "me")) is None
    assert registry.file(STORE, FILE) is None
    await jobs.close()
