"""Parse worker process: reads jobs on stdin, streams pages back as frames on stdout."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import resource
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

# Imported up front so that a job never waits for a library to load.
from proxy.documents.detect import MUPDF_KINDS, Kind
from proxy.documents.docx_text import docx_to_text
from proxy.documents.failure import ExtractError
from proxy.documents.html_text import html_to_text
from proxy.documents.mupdf import PageText, mupdf_pages, mupdf_warnings
from proxy.documents.protocol import pack_json, read_frame
from proxy.documents.text import decode_text, split_pages, tidy

FLUSH_SECONDS = 0.05
FLUSH_CHARS = 512 * 1024
PIPE_BYTES = 1024 * 1024
Send = Callable[[dict[str, Any]], None]


def extract(
    kind: str,
    data: bytes,
    max_pages: int,
    on_count: Callable[[int], None],
) -> Iterator[PageText]:
    """Pages of one document; tests replace this to make a worker hang or crash."""
    if kind in MUPDF_KINDS:
        yield from mupdf_pages(data, kind, max_pages, on_count)
        return
    if kind == Kind.DOCX:
        text = docx_to_text(data)
    elif kind == Kind.HTML:
        text = html_to_text(data)
    else:
        text = tidy(decode_text(data))
    pages = split_pages(text)
    if len(pages) > max_pages:
        raise ExtractError(
            f"has {len(pages)} pages, more than the limit of {max_pages} pages", "too_many_pages"
        )
    on_count(len(pages))
    yield from enumerate(pages, start=1)


def run_job(job: dict[str, Any], data: bytes, send: Send) -> None:
    """Extract one document, sending pages in batches so the parent can report progress."""
    max_chars = int(job["max_chars"])
    batch: list[PageText] = []
    batch_chars = total_chars = 0
    last_flush = time.monotonic()

    def flush(done: int) -> None:
        nonlocal batch, batch_chars, last_flush
        send({"t": "pages", "pages": batch, "done": done})
        batch, batch_chars, last_flush = [], 0, time.monotonic()

    total = number = 0

    def on_count(count: int) -> None:
        nonlocal total
        total = count
        send({"t": "count", "n": count})

    pages = extract(job["kind"], data, int(job["max_pages"]), on_count)
    for number, raw in pages:
        text = _clean(raw)
        total_chars += len(text)
        if total_chars > max_chars:
            raise ExtractError(
                f"has more than {max_chars} characters of text, over the limit", "too_much_text"
            )
        batch.append((number, text))
        batch_chars += len(text)
        if batch_chars >= FLUSH_CHARS or time.monotonic() - last_flush >= FLUSH_SECONDS:
            flush(number)
    # `done` counts skipped pages too: a broken last page must not hold progress below 100%.
    flush(total or number)


def _clean(text: str) -> str:
    text = text.rstrip()
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
            send({"t": "error", "reason": reason, "code": exc.code, "warnings": _warnings()})
        except MemoryError:
            reason = "needs more memory to parse than a parser may use"
            send({"t": "error", "reason": reason, "code": "document_too_large"})
            # The heap may be left fragmented or half-built: exit and let the pool replace us.
            return
        except Exception as exc:
            reason = f"could not be parsed ({type(exc).__name__}: {exc})"
            send({"t": "error", "reason": _escape(reason[:500]), "code": "invalid_document"})
        else:
            send({"t": "done", "warnings": _warnings()})


def main() -> None:
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
