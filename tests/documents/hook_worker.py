"""Test parse worker: `%PDF-HANG` hangs, `%PDF-CRASH` segfaults, `%PDF-GREEDY` overallocates,
`%PDF-BLOAT` keeps 300 MB after its job, `%PDF-SLOW` takes 4 s (a big document), `%PDF-LOG`
logs an info and a warning line. A page saying `SURVEY-SLOW` takes half a second to survey,
one saying `SURVEY-HANG` hangs its survey."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import structlog

from proxy.documents.job import Job, Unit
from proxy.documents.readers import drawn, worker

_real_extract = worker.extract
_real_look = drawn.look
_kept: list[bytearray] = []


def _extract(kind: str, data: bytes, job: Job) -> Iterator[Unit]:
    if data.startswith(b"%PDF-HANG"):
        job.on_count(1)
        time.sleep(3600)
    if data.startswith(b"%PDF-SLOW"):
        job.on_count(1)
        time.sleep(4)
    if data.startswith(b"%PDF-BLOAT"):
        block = bytearray(300 * 1024**2)
        block[::4096] = b"x" * len(block[::4096])  # touched, so it is resident
        _kept.append(block)
    if data.startswith(b"%PDF-GREEDY"):
        bytearray(64 * 1024**3)
    if data.startswith(b"%PDF-LOG"):
        structlog.get_logger("hook").info("hook info line")
        structlog.get_logger("hook").warning("hook warning line")
    if data.startswith(b"%PDF-CRASH"):
        os.kill(os.getpid(), signal.SIGSEGV)
    return _real_extract(kind, data, job)


def _look(page: Any, kind: str, scanned: bool) -> drawn.DrawnPage | None:
    text = page.get_text()
    if "SURVEY-HANG" in text:
        time.sleep(3600)
    if "SURVEY-SLOW" in text:
        time.sleep(0.5)
    return _real_look(page, kind, scanned)


if __name__ == "__main__":
    worker.extract = _extract
    drawn.look = _look
    worker.main()
