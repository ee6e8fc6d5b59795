"""Request bodies as JSON, in and out; big ones are (de)serialised off the event loop."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from proxy.errors import BadRequest

# Bodies (and rewritten bodies) above this size are (de)serialised in a thread: a 60 MB base64
# PDF takes long enough to stall every other request on the event loop.
OFF_LOOP_BYTES = 1 << 20


async def parse_body(raw: bytes) -> dict[str, Any]:
    if not raw:
        raise BadRequest("the request body is empty; expected a JSON object", code="invalid_json")
    try:
        body = (
            await asyncio.to_thread(json.loads, raw)
            if len(raw) > OFF_LOOP_BYTES
            else json.loads(raw)
        )
    except RecursionError:
        raise BadRequest(
            "the request body is nested too deeply to read", code="invalid_json"
        ) from None
    except UnicodeDecodeError as exc:
        raise BadRequest("the request body is not UTF-8 JSON", code="invalid_json") from exc
    except ValueError as exc:
        raise BadRequest(f"the request body is not valid JSON: {exc}", code="invalid_json") from exc
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object", code="invalid_json")
    return body


async def serialise(body: dict[str, Any]) -> bytes:
    def dump() -> bytes:
        return json.dumps(body, ensure_ascii=False).encode()

    try:
        return await asyncio.to_thread(dump) if text_size(body) > OFF_LOOP_BYTES else dump()
    except RecursionError:
        raise BadRequest("the request body is nested too deeply", code="invalid_json") from None


def text_size(body: dict[str, Any]) -> int:
    """Characters of text, prompt and image data: big when the body carries a document."""
    size = len(body["prompt"]) if isinstance(body.get("prompt"), str) else 0
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            size += len(content)
        elif isinstance(content, list):
            for part in content:
                if not isinstance(part, dict):
                    continue
                image = part.get("image_url")
                text = image.get("url") if isinstance(image, dict) else part.get("text")
                size += len(text) if isinstance(text, str) else 0
    return size
