"""Parse worker process: reads jobs on stdin, streams pages back as frames on stdout."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from proxy.documents.failure import ExtractError
from proxy.documents.framing import pack_json, read_frame
from proxy.documents.job import Job, OcrOptions, Units

# Imported up front so that a job never waits for a library to load.
from proxy.documents.readers import drawn
from proxy.documents.readers.dispatch import extract_units
from proxy.documents.readers.pdf import mupdf_warnings
from proxy.documents.readers.text import normalise_characters
from proxy.logs import configure_from_environment

FLUSH_SECONDS = 0.05
FLUSH_CHARS = 512 * 1024
PIPE_BYTES = 1024 * 1024
Send = Callable[[dict[str, Any]], None]


def extract(kind: str, data: bytes, job: Job) -> Units:
    """Units of one document; tests replace this to make a worker hang or crash."""
    return extract_units(kind, data, job)


def job_from(spec: dict[str, Any], send: Send) -> Job:
    ocr = spec.get("ocr")
    return Job(
        kind=str(spec["kind"]),
        name=str(spec.get("name", "")),
        max_pages=int(spec["max_pages"]),
        max_chars=int(spec["max_chars"]),
        max_rows=int(spec.get("max_rows", 5000)),
        max_columns=int(spec.get("max_columns", 100)),
        tables=bool(spec.get("tables", True)),
        ocr=OcrOptions(
            languages=tuple(ocr["languages"]),
            dpi=int(ocr["dpi"]),
            max_pages=int(ocr["max_pages"]),
            tessdata=str(ocr.get("tessdata", "")),
        )
        if ocr
        else None,
        on_count=lambda n: send({"t": "count", "n": n}),
        on_ocr=lambda n, total: send({"t": "ocr", "n": n, "total": total}),
        on_warning=lambda code, message: send({"t": "warn", "code": code, "message": message}),
        on_title=lambda title: send({"t": "title", "title": title}),
    )


def run_job(spec: dict[str, Any], data: bytes, send: Send) -> None:
    """Extract one document, sending units in batches so the parent can report progress."""
    if "task" in spec:  # pages as images: which are drawn, or rendering them
        drawn.run(spec, data, send)
        return
    job = job_from(spec, send)
    batch: list[list[Any]] = []
    batch_chars = total_chars = sent = 0
    last_flush = time.monotonic()

    def flush() -> None:
        nonlocal batch, batch_chars, last_flush
        send({"t": "pages", "pages": batch, "done": sent})
        batch, batch_chars, last_flush = [], 0, time.monotonic()

    for unit in extract(job.kind, data, job):
        text = _clean(unit.text)
        total_chars += len(text)
        if total_chars > job.max_chars:
            raise ExtractError(
                f"has more than {job.max_chars} characters of text, over the limit",
                "too_much_text",
            )
        batch.append([unit.number, text, _clean(unit.location), _clean(unit.title), unit.ocr])
        batch_chars += len(text)
        sent += 1
        if batch_chars >= FLUSH_CHARS or time.monotonic() - last_flush >= FLUSH_SECONDS:
            flush()
    flush()


def resident_bytes() -> int:
    """This process's resident memory now (not its peak): what it keeps after a job."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


def _clean(text: str) -> str:
    # Every format's units pass here: one place for the characters no prompt should hold.
    text = normalise_characters(text).rstrip()
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # Broken fonts can map glyphs to lone surrogates, which no JSON/UTF-8 consumer takes.
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def _escape(text: str) -> str:
    """MuPDF messages can carry undecodable bytes (as lone surrogates): show them as escapes."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _warnings() -> str:
    return _escape(mupdf_warnings()[:4000])


def serve(stdin: BinaryIO, channel: BinaryIO) -> None:
    def send(message: dict[str, Any]) -> None:
        channel.write(pack_json(message))
        channel.flush()

    send({"t": "ready"})
    while True:
        raw = read_frame(stdin)
        data = read_frame(stdin) if raw is not None else None
        if raw is None or data is None:
            return
        send({"t": "ack"})
        try:
            run_job(json.loads(raw), data, send)
        except ExtractError as exc:
            reason = _escape(exc.reason)
            send(
                {
                    "t": "error",
                    "reason": reason,
                    "code": exc.code,
                    "warnings": _warnings(),
                    "rss": resident_bytes(),
                }
            )
        except MemoryError:
            reason = "needs more memory to parse than a parser may use"
            send({"t": "error", "reason": reason, "code": "document_too_large"})
            # The heap may be left fragmented or half-built: exit and let the pool replace us.
            return
        except Exception as exc:
            reason = f"could not be parsed ({type(exc).__name__}: {exc})"
            reason = _escape(reason[:500])
            send(
                {
                    "t": "error",
                    "reason": reason,
                    "code": "invalid_document",
                    "rss": resident_bytes(),
                }
            )
        else:
            send({"t": "done", "warnings": _warnings(), "rss": resident_bytes()})


def main() -> None:
    configure_from_environment(dict(os.environ))
    if len(sys.argv) > 1:
        limit = int(sys.argv[1])
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    channel = os.fdopen(os.dup(1), "wb")
    for fd in (0, channel.fileno()):
        # 64 KiB pipes cost a round trip per 64 KiB of document or text; 1 MiB is Linux's
        # default ceiling for unprivileged processes. Elsewhere the default stays.
        with contextlib.suppress(AttributeError, OSError):
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    # Stray prints from native libraries must not corrupt the frame stream.
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(sys.stdin.buffer, channel)


if __name__ == "__main__":
    main()
