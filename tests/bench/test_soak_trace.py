"""bench/soak.py --trace: the tracer each forked worker runs (bench/memtrace/sitecustomize.py)
and the summary the soak prints from what they wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench.soak import trace_summary
from tests.conftest import ROOT

# A parent that holds a bounded cache, freezes its objects as the proxy's app does, and forks a
# "worker" that fills the cache while the tracer writes a line every 0.3 s.
PARENT = """
import gc, os, time, cachetools

class Holder:
    def __init__(self):
        self.answers = cachetools.LRUCache(maxsize=10)

def main():
    holder = Holder()
    gc.freeze()
    pid = os.fork()
    if pid == 0:
        time.sleep(0.5)
        for n in range(4):
            holder.answers[n] = n
        time.sleep(0.8)
        os._exit(0)
    os.waitpid(pid, 0)

main()
"""


def test_a_forked_worker_writes_its_heap_and_the_fill_of_its_caches(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "bench" / "memtrace"),
        "SOAK_TRACE_DIR": str(tmp_path),
        "SOAK_TRACE_EVERY_S": "0.3",
    }
    subprocess.run([sys.executable, "-c", PARENT], env=env, check=True, timeout=60)
    [written] = tmp_path.glob("worker-*.jsonl")
    assert written.name != f"worker-{os.getpid()}.jsonl"  # the child's, not the parent's
    lines = [json.loads(line) for line in written.read_text().splitlines()]
    assert len(lines) >= 2
    # Found although frozen before the fork, named by its holder, filled as the worker filled it.
    fills = [line["caches"] for line in lines]
    [name] = fills[0]
    assert name.startswith("LRUCache Holder.answers#")
    assert fills[0][name] == [0, 10] and fills[-1][name] == [4, 10]
    assert all(line["rss_mb"] > 0 and line["python_blocks"] > 0 for line in lines)
    assert "in_use_mb" in lines[0] and "free_in_arenas_mb" in lines[0]  # glibc's mallinfo2


def test_the_summary_says_what_grew_and_which_caches_filled(tmp_path: Path) -> None:
    guard, ring = "LRUCache GuardedTexts._cache#1", "deque ?#2"
    lines = [
        {"minute": 1.0, "rss_mb": 200.0, "in_use_mb": 70.0, "python_blocks": 900_000,
         "caches": {guard: [1_000, 50_000_000], ring: [200, 200]}},
        {"minute": 9.0, "rss_mb": 260.0, "in_use_mb": 95.0, "python_blocks": 950_000,
         "caches": {guard: [9_000, 50_000_000], ring: [200, 200]}, "types_grown": {"dict": 40}},
    ]  # fmt: skip
    (tmp_path / "worker-7.jsonl").write_text("\n".join(json.dumps(line) for line in lines))
    said = trace_summary(tmp_path)
    assert said[0].startswith("worker-7, minute 1.0 → 9.0: rss_mb 200.0 → 260.0")
    assert "in_use_mb 70.0 → 95.0" in said[0]
    assert said[1] == "    LRUCache GuardedTexts._cache#1: 1,000 → 9,000 of 50,000,000"
    assert len(said) == 3  # the full deque did not change: not listed
