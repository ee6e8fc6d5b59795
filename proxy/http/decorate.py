"""What the proxy adds to an upstream answer: citations once, statuses first, chat shape back."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from proxy.pipeline.exchange import Exchange
from proxy.upstream.sse import data_event, event_json, sse_events

Transform = Callable[[AsyncIterator[bytes]], AsyncIterator[bytes]]


def citation_fields(exchange: Exchange) -> dict[str, Any]:
    if not exchange.citations:
        return {}
    return {"citations": exchange.citations, "search_results": exchange.search_results}


def decorate_json(answer: bytes, exchange: Exchange) -> bytes:
    """Add the citations to a non-streamed answer; other answers go back byte for byte."""
    extra = citation_fields(exchange)
    converter = exchange.response_converter
    if not extra and converter is None:
        return answer
    try:
        payload = json.loads(answer)
    except ValueError:
        return answer
    if not isinstance(payload, dict):
        return answer
    if converter is not None:
        payload = converter.convert_json(payload)
    payload.update(extra)
    return json.dumps(payload, ensure_ascii=False).encode()


def decorate_stream(exchange: Exchange, preface: bytes) -> Transform | None:
    """A transform of the upstream's SSE bytes, or None when they can go through untouched."""
    extra = citation_fields(exchange)
    converter = exchange.response_converter
    if not preface and not extra and converter is None:
        return None

    async def transform(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        if preface:
            yield preface
        if converter is None and not extra:
            async for chunk in chunks:
                yield chunk
            return
        pending = dict(extra)
        async for event in sse_events(chunks):
            payload = event_json(event)
            if converter is not None:
                for out in converter.convert_event(event, payload):
                    if pending and isinstance(out, dict) and "choices" in out:
                        out = {**out, **pending}
                        pending = {}
                    yield out if isinstance(out, bytes) else data_event(out)
                continue
            if pending and isinstance(payload, dict) and "choices" in payload:
                yield data_event({**payload, **pending})
                pending = {}
                continue
            yield event

    return transform
