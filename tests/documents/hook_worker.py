"""Test parse worker: `%PDF-HANG` hangs, `%PDF-CRASH` segfaults, `%PDF-GREEDY` overallocates."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from proxy.documents import worker

_real_extract = worker.extract


def _extract(
    kind: str,
    data: bytes,
    max_pages: int,
    on_count: Callable[[int], None],
) -> Iterator[tuple[int, str]]:
    if data.startswith(b"%PDF-HANG"):
        on_count(1)
        time.sleep(3600)
    if data.startswith(b"%PDF-GREEDY"):
        bytearray(64 * 1024**3)
    if data.startswith(b"%PDF-CRASH"):
        os.kill(os.getpid(), signal.SIGSEGV)
    return _real_extract(kind, data, max_pages, on_count)


if __name__ == "__main__":
    worker.extract = _extract
    worker.main()
