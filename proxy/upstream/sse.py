"""Splitting a byte stream into SSE events, whatever the chunk boundaries and line lengths."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from proxy import jsonio


async def sse_events(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Yield whole events (each ending in a blank line), however the bytes were split."""
    buffer = b""
    async for chunk in chunks:
        buffer += chunk.replace(b"\r\n", b"\n")
        while True:
            end = buffer.find(b"\n\n")
            if end < 0:
                break
            yield buffer[: end + 2]
            buffer = buffer[end + 2 :]
    if buffer.strip():
        yield buffer if buffer.endswith(b"\n\n") else buffer.rstrip(b"\n") + b"\n\n"


def event_data(event: bytes) -> bytes | None:
    """The joined `data:` lines of an event, or None for a comment-only event."""
    lines = [
        line[5:].removeprefix(b" ") for line in event.split(b"\n") if line.startswith(b"data:")
    ]
    return b"\n".join(lines) if lines else None


def event_name(event: bytes) -> bytes | None:
    """The `event:` field of an SSE event (None: a plain `message` event)."""
    for line in event.split(b"\n"):
        if line.startswith(b"event:"):
            return line[6:].strip()
    return None


def event_json(event: bytes) -> Any:
    """The JSON object of a data event; None for `[DONE]`, comments and non-JSON data."""
    data = event_data(event)
    if data is None or data.strip() == b"[DONE]":
        return None
    try:
        return jsonio.loads(data)
    except ValueError:
        return None


def data_event(payload: Any) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n"


async def ndjson_events(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """NDJSON lines (Ollama's streams) as SSE data events, whatever the chunk boundaries, and
    `[DONE]` when the stream ends: every reader of events can read them."""
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        while True:
            end = buffer.find(b"\n")
            if end < 0:
                break
            line, buffer = buffer[:end].strip(), buffer[end + 1 :]
            if line:
                yield b"data: " + line + b"\n\n"
    if buffer.strip():
        yield b"data: " + buffer.strip() + b"\n\n"
    yield b"data: [DONE]\n\n"
