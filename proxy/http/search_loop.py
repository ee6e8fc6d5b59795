"""The search loop's answer to the client, in the shape it asked for: one chat completion (or its
chunks), or one Responses `response` (or its events) with a `file_search_call` per search."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from proxy.errors import ProxyError
from proxy.http.body import serialise
from proxy.http.decorate import citation_fields
from proxy.http.keys import UPSTREAM_SECONDS
from proxy.http.status import StatusChannel, comment
from proxy.http.streams import end_with_error, event_stream, outgoing_headers
from proxy.pipeline.citing import name_sources, sources_header, with_sources
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.search_space import quoted
from proxy.pipeline.services import Services
from proxy.responses.answer import Cited, Ids, file_search_item, response_from_chat
from proxy.responses.events import ResponseStream, sse
from proxy.responses.request import Asked
from proxy.toolloop.loop import ROUTE, Answer, Searched, Searching, SearchLoop, Send, Text
from proxy.toolloop.turn import Call
from proxy.upstream.relay import Ending, sse_error_event
from proxy.upstream.sse import data_event

SEPARATOR = "\n\n"
"""Between the text of two turns (a model that says something before it searches)."""


def search_loop(request: web.Request, services: Services, exchange: Exchange) -> SearchLoop:
    """The loop of this request, its turns sent with the client's headers as forwarded."""
    headers = outgoing_headers(request, services, exchange)
    services.metrics.strategies.labels(exchange.strategy).inc()
    return SearchLoop(exchange, services, _sender(request, services, headers))


def _sender(request: web.Request, services: Services, headers: CIMultiDict[str]) -> Send:
    async def send(body: dict[str, Any]) -> aiohttp.ClientResponse:
        upstream = services.upstream
        started = time.perf_counter()
        data = await serialise(body)
        url = upstream.url(ROUTE)
        response = await upstream.send(
            "POST", url, data=data, headers=headers, allow_redirects=False
        )
        request.setdefault(UPSTREAM_SECONDS, time.perf_counter() - started)  # the first turn's
        return response

    return send


class Joined:
    """The text of every turn as one answer: a blank line where a later turn's text begins."""

    def __init__(self) -> None:
        self.content = ""
        self.reasoning = ""
        self._turns = {"content": 0, "reasoning": 0}

    def _part(self, kind: str, text: str, turn: int) -> str:
        if not text:
            return ""
        if self._turns[kind] and turn > self._turns[kind]:
            text = SEPARATOR + text
        self._turns[kind] = turn
        return text

    def take(self, event: Text) -> tuple[str, str]:
        content = self._part("content", event.shown.content, event.turn)
        reasoning = self._part("reasoning", event.shown.reasoning, event.turn)
        self.content += content
        self.reasoning += reasoning
        return content, reasoning


async def finish_sources(exchange: Exchange, services: Services) -> None:
    """What the searches gave, as every answer cites: each place once, the Sources header and
    block, and the searches themselves (headers of a whole answer)."""
    given = len(exchange.citations)
    name_sources(exchange)
    headers = exchange.response_headers
    headers["X-Enrich-Citations"] = str(given)
    record = exchange.decision.searches
    if record is not None:
        searched = [call for call in record.calls if call.queries]
        headers["X-Enrich-Searches"] = str(len(searched))
        queries = [query for call in searched for query in call.queries]
        if queries:
            headers["X-Enrich-Search-Queries"] = sources_header(queries)


def _client_calls(calls: list[Call]) -> list[dict[str, Any]]:
    return [
        {
            "id": call.id or f"call_{position}",
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }
        for position, call in enumerate(calls)
    ]


# -- Chat Completions --------------------------------------------------------------------------


def _completion(exchange: Exchange, answer: Answer, joined: Joined) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": joined.content}
    if joined.reasoning:
        message["reasoning_content"] = joined.reasoning
    if answer.calls:
        message["tool_calls"] = _client_calls(answer.calls)
        message["content"] = joined.content or None
    completion = {
        "id": answer.id or f"chatcmpl-{exchange.request_id}",
        "object": "chat.completion",
        "created": answer.created or int(time.time()),
        "model": answer.model or exchange.model or "unknown",
        "choices": [{"index": 0, "message": message, "finish_reason": answer.finish_reason}],
    }
    if answer.usage is not None:
        completion["usage"] = answer.usage
    return completion


async def loop_chat(
    request: web.Request,
    services: Services,
    exchange: Exchange,
    status: StatusChannel,
    started: web.StreamResponse | None,
) -> web.StreamResponse:
    """The loop's answer as a chat completion, or as its chunks for a streamed request."""
    loop = search_loop(request, services, exchange)
    if exchange.stream:
        return await _chat_stream(request, exchange, services, loop, status, started)
    # Not streamed: statuses start no stream, and a failure is an ordinary error answer.
    joined = Joined()
    answer: Answer | None = None
    async for event in loop.events():
        if isinstance(event, Text):
            joined.take(event)
        elif isinstance(event, Answer):
            answer = event
    assert answer is not None
    await finish_sources(exchange, services)
    payload = with_sources(_completion(exchange, answer, joined), exchange.sources_block)
    payload.update(citation_fields(exchange))
    headers = {**exchange.response_headers, "X-Request-ID": exchange.request_id}
    return web.Response(
        body=await serialise(payload), headers={**headers, "Content-Type": "application/json"}
    )


def _chunk(
    exchange: Exchange, loop: SearchLoop, delta: dict[str, Any], finish: str | None
) -> dict[str, Any]:
    first = loop.first
    return {
        "id": (first.id if first else None) or f"chatcmpl-{exchange.request_id}",
        "object": "chat.completion.chunk",
        "created": (first.created if first else None) or int(time.time()),
        "model": (first.model if first else None) or exchange.model or "unknown",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


async def _chat_events(
    exchange: Exchange, services: Services, loop: SearchLoop
) -> AsyncIterator[bytes]:
    """The loop as chat SSE: text as it comes, a comment per search, the client's calls, the
    Sources block and the citations with the last chunk, the usage of all turns, [DONE]."""
    joined = Joined()
    role = {"role": "assistant"}
    options = exchange.body.get("stream_options")
    usage_asked = isinstance(options, dict) and bool(options.get("include_usage"))
    async for event in loop.events():
        if isinstance(event, Text):
            content, reasoning = joined.take(event)
            delta: dict[str, Any] = {**role}
            if content:
                delta["content"] = content
            if reasoning:
                delta["reasoning_content"] = reasoning
            role = {}
            yield data_event(_chunk(exchange, loop, delta, None))
        elif isinstance(event, Searching):
            yield comment(f"Searching the files for {quoted(event.queries)}...")
        elif isinstance(event, Searched):
            yield comment(f"Found {len(event.results)} passages")
        elif isinstance(event, Answer):
            await finish_sources(exchange, services)
            if event.calls:
                calls = [
                    {"index": index, **call}
                    for index, call in enumerate(_client_calls(event.calls))
                ]
                yield data_event(_chunk(exchange, loop, {**role, "tool_calls": calls}, None))
            elif exchange.sources_block:
                delta = {**role, "content": exchange.sources_block}
                yield data_event(_chunk(exchange, loop, delta, None))
            last = _chunk(exchange, loop, {}, event.finish_reason)
            yield data_event({**last, **citation_fields(exchange)})
            if usage_asked and event.usage is not None:
                yield data_event({**last, "choices": [], "usage": event.usage})
            yield b"data: [DONE]\n\n"


async def _chat_stream(
    request: web.Request,
    exchange: Exchange,
    services: Services,
    loop: SearchLoop,
    status: StatusChannel,
    started: web.StreamResponse | None,
) -> web.StreamResponse:
    events = _chat_events(exchange, services, loop)
    return await _stream_out(request, exchange, events, status, started, sse_error_event)


async def _stream_out(
    request: web.Request,
    exchange: Exchange,
    events: AsyncIterator[bytes],
    status: StatusChannel,
    started: web.StreamResponse | None,
    ending: Ending,
) -> web.StreamResponse:
    """Write `events` as they come. The stream opens with the first of them, so that a loop
    that fails before saying anything is an ordinary error answer; once open, a failure ends
    it with `ending`."""
    out = started
    try:
        async for piece in events:
            if out is None:
                headers = {**exchange.response_headers, "X-Request-ID": exchange.request_id}
                out = await event_stream(request, None, headers)
                piece = status.pending() + piece
            await out.write(piece)
    except ProxyError as error:
        if out is None:
            raise
        return await end_with_error(request, out, error, ending)
    assert out is not None
    await out.write_eof()
    return out


# -- Responses ---------------------------------------------------------------------------------


def _search_item(ids: Ids, event: Searched, include: bool) -> dict[str, Any]:
    return file_search_item(ids.search(event.number), event.queries, event.results, include)


def _cited(exchange: Exchange, searches: list[dict[str, Any]]) -> Cited:
    fields = citation_fields(exchange)
    return Cited(exchange.sources, exchange.sources_block, fields, None, searches)


async def loop_responses(
    request: web.Request,
    services: Services,
    exchange: Exchange,
    status: StatusChannel,
    started: web.StreamResponse | None,
    asked: Asked,
    stream: ResponseStream,
) -> web.StreamResponse:
    """The loop's answer as a `response` (or its events): a `file_search_call` for each search
    the model made, with its own queries, then the message with its `file_citation`s."""
    loop = search_loop(request, services, exchange)
    ids, include = stream.ids, asked.include_results
    if asked.stream:
        events = _response_events(exchange, services, loop, stream, include)
        return await _stream_out(request, exchange, events, status, started, stream.ending)
    # Not streamed: statuses start no stream, and a failure is an ordinary error answer.
    joined = Joined()
    searches: list[dict[str, Any]] = []
    answer: Answer | None = None
    async for event in loop.events():
        if isinstance(event, Text):
            joined.take(event)
        elif isinstance(event, Searched):
            searches.append(_search_item(ids, event, include))
        elif isinstance(event, Answer):
            answer = event
    assert answer is not None
    await finish_sources(exchange, services)
    completion = _completion(exchange, answer, joined)
    result = response_from_chat(
        completion, asked, ids, _cited(exchange, searches), created_at=stream.created_at
    )
    headers = {**exchange.response_headers, "X-Request-ID": exchange.request_id}
    return web.Response(
        body=await serialise(result), headers={**headers, "Content-Type": "application/json"}
    )


async def _response_events(
    exchange: Exchange,
    services: Services,
    loop: SearchLoop,
    stream: ResponseStream,
    include: bool,
) -> AsyncIterator[bytes]:
    """The loop as Responses events: each search an item of its own where it happened. The
    response starts with the loop's first event: a first turn that fails is an error answer."""
    searches: list[dict[str, Any]] = []
    joined = Joined()
    async for item in loop.events():
        out: list[dict[str, Any]] = [] if stream.started else stream.start()
        if isinstance(item, Text):
            content, _ = joined.take(item)
            if content:
                out += stream.feed(_text_chunk(content))
        elif isinstance(item, Searching):
            out += stream.search_begun(stream.ids.search(item.number))
        elif isinstance(item, Searched):
            found = _search_item(stream.ids, item, include)
            searches.append(found)
            out += stream.search_done(found)
        elif isinstance(item, Answer):
            await finish_sources(exchange, services)
            stream.cited = _cited(exchange, searches)
            out += stream.feed(_end_chunk(item))
            out += stream.finish()
        for event in out:
            yield sse(event)


def _text_chunk(content: str) -> dict[str, Any]:
    # The response's text is the answer; thinking has no item here, as in the chat translation.
    return {"choices": [{"index": 0, "delta": {"content": content}}]}


def _end_chunk(answer: Answer) -> dict[str, Any]:
    calls = [{"index": index, **call} for index, call in enumerate(_client_calls(answer.calls))]
    delta: dict[str, Any] = {"tool_calls": calls} if calls else {}
    chunk: dict[str, Any] = {
        "choices": [{"index": 0, "delta": delta, "finish_reason": answer.finish_reason}]
    }
    if answer.model:
        chunk["model"] = answer.model
    if answer.usage is not None:
        chunk["usage"] = answer.usage
    return chunk
