"""What the learners of several server kinds send and read: probe messages, a blank image."""

from __future__ import annotations

import base64
import struct
import zlib
from typing import Any

RENDER_PATH = "/v1/chat/completions/render"
"""vLLM's chat rendering without generation: the prompt's token ids, images expanded."""

PROBE_MESSAGES = [{"role": "user", "content": "ping"}]
PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "probe",
        "description": "Asked once to learn whether the server takes tools.",
        "parameters": {"type": "object", "properties": {}},
    },
}


def blank_png(width: int, height: int) -> bytes:
    """A white RGB PNG: what the server counts depends only on an image's size."""
    row = b"\x00" + b"\xff" * (3 * width)

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    pixels = zlib.compress(row * height, 9)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


def data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


PROBE_IMAGE = data_url(blank_png(56, 56))


def image_message(url: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]


def error_message(body: Any) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        body = error
    text = body.get("message") if isinstance(body, dict) else None
    return str(text)[:200] if text else "no message"


def token_ids(body: Any) -> list[Any] | None:
    """The prompt's token ids in a render's answer (vLLM `/v1/chat/completions/render`)."""
    if isinstance(body, list) and body:  # some builds answer a list of renders
        body = body[0]
    if not isinstance(body, dict):
        return None
    ids = body.get("token_ids", body.get("prompt_token_ids"))
    return ids if isinstance(ids, list) else None
