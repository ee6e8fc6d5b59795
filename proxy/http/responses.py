"""POST /v1/responses: the Responses API, through the same pipeline as chat completions."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, ParamSpec, TypeVar

import aiohttp
from aiohttp import web

from proxy import jsonio
from proxy.errors import ProxyError, bad_upstream
from proxy.http.body import read_json_body, serialise
from proxy.http.chat import (
    converted_error,
    forward_exchange,
    prepare_or_fail,
)
from proxy.http.decorate import Transform, chat_events, citation_fields, is_done
from proxy.http.keys import ROUTE, SERVICES
from proxy.http.recording import recorded
from proxy.http.search_loop import loop_responses
from proxy.http.status import StatusChannel
from proxy.http.streams import end_with_error, event_stream
from proxy.pipeline.exchange import Exchange
from proxy.responses.answer import Cited, Ids, file_search_item, response_from_chat
from proxy.responses.events import ResponseStream, sse
from proxy.responses.items import STATELESS
from proxy.responses.replay import events_from_response
from proxy.responses.request import chat_request
from proxy.upstream.headers import client_response_headers
from proxy.upstream.relay import error_frame, error_message, is_stream, relay_response
from proxy.upstream.sse import sse_events

P = ParamSpec("P")
T = TypeVar("T")
# Inputs of more items than this are translated in a thread (each item is checked and copied).
OFF_LOOP_ITEMS = 256


async def off_loop_if_long(
    items: Any, translate: Callable[P, T], *args: P.args, **kwargs: P.kwargs
) -> T:
    """`translate(...)`, in a thread when `items` is a long list."""
    if isinstance(items, list) and len(items) > OFF_LOOP_ITEMS:
        return await asyncio.to_thread(translate, *args, **kwargs)
    return translate(*args, **kwargs)


def cited(exchange: Exchange, ids: Ids | None = None, include_results: bool = False) -> Cited:
    """What the answer cites; with a file_search tool, the `file_search_call` item too."""
    found = exchange.store_search
    item = None
    if exchange.file_search is not None and found is not None and ids is not None:
        item = file_search_item(ids.file_search, found.queries, found.results, include_results)
    return Cited(exchange.sources, exchange.sources_block, citation_fields(exchange), item)


@recorded
async def create_response(request: web.Request) -> web.StreamResponse:
    request[ROUTE] = "responses"
    services = request.app[SERVICES]
    body = await read_json_body(request, services.settings.server)
    chat, asked = await off_loop_if_long(
        body.get("input"), chat_request, body, services.settings.server.max_messages
    )
    ids, created_at = Ids.new(), int(time.time())
    # One stream of events from the first to the last, failures included: a stream the
    # statuses started and that breaks off ends with `error` and `response.failed`.
    stream = ResponseStream(asked, ids, Cited([], "", {}, None), created_at)
    exchange, status, started = await prepare_or_fail(
        request, services, chat, asked.file_search, stream.ending
    )
    if exchange is None:
        assert started is not None
        return started
    if exchange.model_search is not None:  # the model writes the searches: a tool loop
        return await loop_responses(request, services, exchange, status, started, asked, stream)

    async def answer(response: aiohttp.ClientResponse) -> web.StreamResponse:
        extra = {**exchange.response_headers, "X-Request-ID": exchange.request_id}
        if response.status >= 400:
            converted = await converted_error(request, exchange, response, started, stream.ending)
            if converted is not None:
                return converted
            return await relay_response(
                request, response, extra_headers=extra, already=started, ending=stream.ending
            )
        sources = cited(exchange, ids, asked.include_results)
        if asked.stream and is_stream(response):
            stream.cited = sources
            transform = to_events(stream, exchange, status.pending())
            return await relay_response(
                request,
                response,
                extra_headers=extra,
                already=started,
                transform=transform,
                ending=stream.ending,
            )
        try:
            completion = await _json_answer(response)
        except ProxyError as error:
            if started is None:
                raise
            return await end_with_error(request, started, error, stream.ending)
        converter = exchange.response_converter
        if converter is not None:
            completion = converter.convert_json(completion)
        result = response_from_chat(completion, asked, ids, sources, created_at=created_at)
        if asked.stream:
            return await _send_events(request, started, status, extra, result)
        headers = client_response_headers(response.headers)
        headers.update(extra)
        headers["Content-Type"] = "application/json"
        return web.Response(status=response.status, body=await serialise(result), headers=headers)

    return await forward_exchange(request, services, exchange, answer, started, stream.ending)


async def _json_answer(response: aiohttp.ClientResponse) -> dict[str, Any]:
    raw = await response.read()
    try:
        payload = jsonio.loads(raw)
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        raise bad_upstream("chat answer")
    return payload


async def _send_events(
    request: web.Request,
    started: web.StreamResponse | None,
    status: StatusChannel,
    headers: dict[str, str],
    result: dict[str, Any],
) -> web.StreamResponse:
    """A whole response as an event stream (the upstream answered a stream with one body)."""
    response = await event_stream(request, started, headers)
    await response.write(status.pending())
    for event in events_from_response(result):
        await response.write(sse(event))
    await response.write_eof()
    return response


def to_events(stream: ResponseStream, exchange: Exchange, preface: bytes) -> Transform:
    """Chat SSE bytes (after the exchange's own converter, for text upstreams) → Responses SSE."""
    converter = exchange.response_converter

    async def transform(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        if preface:
            yield preface
        for event in stream.start():
            yield sse(event)
        async for raw in sse_events(chunks):
            failure = error_frame(raw) if exchange.error_frames else None
            if failure is not None:
                fields = failure["error"]
                for event in stream.fail(fields["message"], fields["code"] or "upstream_error"):
                    yield sse(event)
                return
            for out in chat_events(converter, raw):
                if isinstance(out, bytes):
                    if is_done(out):
                        for event in stream.finish():
                            yield sse(event)
                    elif out.startswith(b":"):
                        yield out  # a comment: keeps the connection alive
                    continue
                if "error" in out and "choices" not in out:
                    # The upstream failed mid-stream (vLLM sends its error as an event).
                    message = error_message(out) or "the upstream failed mid-stream"
                    for event in stream.fail(message, "upstream_error"):
                        yield sse(event)
                    continue
                for event in stream.feed(out):
                    yield sse(event)
        for event in stream.finish():
            yield sse(event)

    return transform


async def stored_response(request: web.Request) -> web.StreamResponse:
    """GET/DELETE /v1/responses/{id}, conversations and friends: none are kept here (with
    `upstream.responses: native` see proxy.http.native_responses)."""
    request[ROUTE] = "responses"
    raise ProxyError(STATELESS, status=404, code="response_not_found", param="response_id")
