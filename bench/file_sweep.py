"""What one sweep of the S3 file store's orphans costs (SeaweedFS on loopback): a bucket of N
live files swept when nothing is an orphan, and swept again holding K orphans of each kind.
Prints numbers; passes no judgement.

    python bench/file_sweep.py [--files 2000] [--orphans 50] [--endpoint http://127.0.0.1:8333]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import obstore

from proxy.config import FileStoreSettings
from proxy.files.blob_refs import BlobReferences
from proxy.files.objects import make_object_store
from proxy.files.protocol import StoredFile
from proxy.files.s3 import S3FileStore, owner_key
from proxy.files.s3_sweep import OrphanSweep
from tests.engines import S3_ENVIRONMENT, SeaweedFS

BUCKET = "bench-sweep"
GRACE_S = 3600.0


def fill(store: S3FileStore, files: int) -> None:
    """`files` uploads of distinct bytes through the store, eight at a time."""

    def one(n: int) -> None:
        pending = store.begin_upload(f"owner-{n % 10}")
        pending.write(f"document {n} ".encode() * 20)
        pending.commit(f"d{n}.txt", "user_data")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(files)))


def orphan(store: S3FileStore, count: int) -> None:
    """`count` orphans of each kind, written as failures leave them."""
    for n in range(count):
        ids = [f"file-{uuid.uuid4().hex[:24]}" for _ in range(4)]
        sha = [hashlib.sha256(f"{i}".encode()).hexdigest() for i in ids]
        stored = StoredFile(ids[0], 5, 1, "a.txt", "user_data", sha[0], "team-b")
        record = json.dumps({**asdict(stored), "blob": ids[0]}).encode()
        obstore.put(store.store, f"files/{ids[0]}.json", record)
        obstore.put(store.store, f"refs/{sha[0]}.json", BlobReferences(ids[0], (ids[0],)).encode())
        obstore.put(store.store, f"blobs/{ids[0]}", b"bytes")
        obstore.put(store.store, f"owners/{owner_key('team-a')}/{ids[1]}.{n}", b"")
        obstore.put(store.store, f"refs/{sha[2]}.json", BlobReferences(ids[2], (ids[2],)).encode())
        obstore.put(store.store, f"blobs/{ids[2]}", b"bytes")
        obstore.put(store.store, f"blobs/{ids[3]}", b"bytes")


def timed_sweep(store: S3FileStore, now: float) -> tuple[float, dict[str, int]]:
    started = time.perf_counter()
    done = OrphanSweep(store, GRACE_S, clock=lambda: now).run()
    return time.perf_counter() - started, dict(done)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--orphans", type=int, default=50, help="of each kind")
    parser.add_argument("--endpoint", help="an S3 server to use instead of starting SeaweedFS")
    args = parser.parse_args()
    os.environ.update(S3_ENVIRONMENT)
    server = None
    endpoint = args.endpoint
    if endpoint is None:
        server = SeaweedFS.start(Path(tempfile.mkdtemp(prefix="bench-sweep-")))
        endpoint = server.endpoint
    try:
        if server is not None:
            server.create_bucket(BUCKET)
        settings = FileStoreSettings(
            backend="s3",
            bucket=BUCKET,
            prefix=f"sweep-{uuid.uuid4().hex[:8]}",
            endpoint_url=endpoint,
        )
        store = S3FileStore(make_object_store(settings), 1 << 20)
        started = time.perf_counter()
        fill(store, args.files)
        print(f"{args.files} files uploaded in {time.perf_counter() - started:.1f} s")
        later = time.time() + 2 * GRACE_S  # every object old: the live files are decided on too
        timed_sweep(store, later)  # the first pass warms up the connections
        idle, found = timed_sweep(store, later)
        print(f"sweep, no orphans:             {idle:6.2f} s  {found or 'nothing removed'}")
        orphan(store, args.orphans)
        busy, found = timed_sweep(store, later)
        print(f"sweep, {args.orphans} orphans of each kind: {busy:6.2f} s  {found}")
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
