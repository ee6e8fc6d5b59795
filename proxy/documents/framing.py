"""Framing between the parent and a parse worker: a 4-byte length, then JSON or raw bytes."""

from __future__ import annotations

import json
from typing import Any, BinaryIO

HEADER = 4
MAX_FRAME = 512 * 1024 * 1024


def pack(payload: bytes) -> bytes:
    return len(payload).to_bytes(HEADER, "big") + payload


def pack_json(message: dict[str, Any]) -> bytes:
    return pack(json.dumps(message, ensure_ascii=False).encode("utf-8"))


def frame_length(header: bytes) -> int:
    length = int.from_bytes(header, "big")
    if length > MAX_FRAME:
        raise ValueError(f"frame of {length} bytes is too large")
    return length


def read_frame(stream: BinaryIO) -> bytes | None:
    """Blocking read of one frame (worker side); None at end of input."""
    header = _read_exactly(stream, HEADER)
    if header is None:
        return None
    payload = _read_exactly(stream, frame_length(header))
    if payload is None:
        raise EOFError("input ended inside a frame")
    return payload


def _read_exactly(stream: BinaryIO, size: int) -> bytes | None:
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        chunk = stream.read(remaining)
        if not chunk:
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)
