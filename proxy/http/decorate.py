"""What the proxy adds to an upstream answer: citations once, statuses first, chat shape back."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from proxy import jsonio
from proxy.pipeline.citing import StreamSources, with_sources
from proxy.pipeline.exchange import Exchange
from proxy.upstream.kinds.profile import ResponseConverter
from proxy.upstream.relay import error_frame
from proxy.upstream.sse import data_event, event_data, event_json, sse_events

Transform = Callable[[AsyncIterator[bytes]], AsyncIterator[bytes]]


def citation_fields(exchange: Exchange) -> dict[str, Any]:
    if not exchange.citations or exchange.options.citations == "inline":
        return {}
    return {"citations": exchange.citations, "search_results": exchange.search_results}


def is_done(event: bytes) -> bool:
    data = event_data(event)
    return data is not None and data.strip() == b"[DONE]"


def chat_events(converter: ResponseConverter | None, event: bytes) -> list[bytes | dict[str, Any]]:
    """One upstream SSE event as Chat Completions events: parsed chunks as dicts, the rest
    (`[DONE]`, comments, what is not JSON) as raw bytes; through the exchange's converter when
    the upstream answers in another shape."""
    payload = event_json(event)
    if converter is not None:
        return converter.convert_event(event, payload)
    return [payload if isinstance(payload, dict) else event]


def decorate_json(answer: bytes, exchange: Exchange) -> bytes:
    """Add the citations to a non-streamed answer; other answers go back byte for byte."""
    extra = citation_fields(exchange)
    converter = exchange.response_converter
    if not extra and converter is None and not exchange.sources_block:
        return answer
    try:
        payload = jsonio.loads(answer)
    except ValueError:
        return answer
    if not isinstance(payload, dict):
        return answer
    if converter is not None:
        payload = converter.convert_json(payload)
    payload = with_sources(payload, exchange.sources_block)
    payload.update(extra)
    return json.dumps(payload, ensure_ascii=False).encode()


def as_chunk(completion: dict[str, Any]) -> dict[str, Any]:
    """A whole chat.completion as the one chunk a streamed request expects: each choice's
    message becomes its delta (tool calls numbered, as stream deltas are); the rest (id, usage,
    citations) is kept."""
    chunk = {key: value for key, value in completion.items() if key != "choices"}
    chunk["object"] = "chat.completion.chunk"
    choices = []
    for choice in completion.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        delta = dict(choice.get("message") or {})
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            delta["tool_calls"] = [
                {**call, "index": index} if isinstance(call, dict) else call
                for index, call in enumerate(calls)
            ]
        rest = {key: value for key, value in choice.items() if key != "message"}
        choices.append({**rest, "delta": delta})
    chunk["choices"] = choices
    return chunk


def decorate_stream(exchange: Exchange, preface: bytes) -> Transform | None:
    """A transform of the upstream's SSE bytes, or None when they can go through untouched."""
    extra = citation_fields(exchange)
    converter = exchange.response_converter
    block = exchange.sources_block
    frames = exchange.error_frames
    if not preface and not extra and converter is None and not block and not frames:
        return None

    async def transform(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        if preface:
            yield preface
        if converter is None and not extra and not block and not frames:
            async for chunk in chunks:
                yield chunk
            return
        pending = dict(extra)
        inline = StreamSources(block)
        async for event in sse_events(chunks):
            failure = error_frame(event) if frames else None
            if failure is not None:
                if exchange.window_hint and failure["error"]["code"] == "context_length_exceeded":
                    failure["error"]["message"] += f"; {exchange.window_hint}"
                yield data_event(failure) + b"data: [DONE]\n\n"
                return  # the upstream's stream ends there
            for out in chat_events(converter, event):
                if isinstance(out, bytes):
                    if is_done(out):
                        for last in inline.finish():
                            yield data_event(last)
                    yield out
                    continue
                decorated = out
                if pending and "choices" in decorated:
                    decorated = {**decorated, **pending}
                    pending = {}
                pieces = inline.feed(decorated)
                if converter is None and len(pieces) == 1 and pieces[0] is out:
                    yield event  # untouched: byte for byte as the upstream sent it
                    continue
                for piece in pieces:
                    yield data_event(piece)

    return transform
