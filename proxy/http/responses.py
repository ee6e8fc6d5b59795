"""POST /v1/responses: the Responses API, through the same pipeline as chat completions."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import web

from proxy.errors import BadRequest, ProxyError, UpstreamError
from proxy.http.body import parse_body, serialise
from proxy.http.chat import (
    end_with_error,
    event_stream,
    forward_exchange,
    prepare_or_fail,
    read_request_body,
)
from proxy.http.decorate import Transform, chat_events, citation_fields, is_done
from proxy.http.keys import ROUTE, SERVICES
from proxy.http.passthrough import passthrough
from proxy.http.recording import recorded
from proxy.http.status import StatusChannel
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.services import Services
from proxy.responses.answer import Cited, Ids, file_search_item, response_from_chat
from proxy.responses.events import ResponseStream, sse
from proxy.responses.items import STATELESS, translate_input
from proxy.responses.native import NativeStream, cite_response, patch_input
from proxy.responses.replay import events_from_response
from proxy.responses.request import chat_request, take_file_search
from proxy.upstream.headers import client_response_headers
from proxy.upstream.relay import is_event_stream, relay_response
from proxy.upstream.sse import data_event, event_json, sse_events


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
    body = await parse_body(await read_request_body(request, services))
    if services.settings.upstream.responses == "native":
        return await _native(request, services, body)
    chat, asked = chat_request(body)
    exchange, status, started = await prepare_or_fail(request, services, chat, asked.file_search)
    if exchange is None:
        assert started is not None
        return started
    ids, created_at = Ids.new(), int(time.time())

    async def answer(response: aiohttp.ClientResponse) -> web.StreamResponse:
        extra = {**exchange.response_headers, "X-Request-ID": exchange.request_id}
        if response.status >= 400:
            return await relay_response(request, response, extra_headers=extra, already=started)
        sources = cited(exchange, ids, asked.include_results)
        if asked.stream and is_event_stream(response):
            stream = ResponseStream(asked, ids, sources, created_at)
            transform = to_events(stream, exchange, status.pending())
            return await relay_response(
                request, response, extra_headers=extra, already=started, transform=transform
            )
        try:
            completion = await _json_answer(response)
        except ProxyError as error:
            if started is None:
                raise
            return await end_with_error(request, started, error)
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

    return await forward_exchange(request, services, exchange, answer, started)


async def _json_answer(response: aiohttp.ClientResponse) -> dict[str, Any]:
    raw = await response.read()
    try:
        payload = json.loads(raw)
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        raise UpstreamError("the upstream's chat answer is not a JSON object", code="bad_upstream")
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
            for out in chat_events(converter, raw):
                if isinstance(out, bytes):
                    if is_done(out):
                        for event in stream.finish():
                            yield sse(event)
                    elif out.startswith(b":"):
                        yield out  # a comment: keeps the connection alive
                    continue
                if "error" in out and "choices" not in out:
                    yield data_event(out)  # the upstream failed mid-stream: the SDK raises it
                    continue
                for event in stream.feed(out):
                    yield sse(event)
        for event in stream.finish():
            yield sse(event)

    return transform


async def _native(
    request: web.Request, services: Services, body: dict[str, Any]
) -> web.StreamResponse:
    """Upstreams that speak Responses: the pipeline enriches `input`, the answer is theirs."""
    if "input" not in body:
        raise BadRequest("input: is required", param="input", code="missing_required_parameter")
    messages, origins = translate_input(body["input"])
    chat: dict[str, Any] = {"messages": messages, "stream": body.get("stream") is True}
    if isinstance(body.get("model"), str):
        chat["model"] = body["model"]
    if "enrich" in body:
        chat["enrich"] = body.pop("enrich")
    file_search, include_results = take_file_search(body)
    exchange, status, started = await prepare_or_fail(request, services, chat, file_search)
    if exchange is None:
        assert started is not None
        return started
    if exchange.upstream_path != "/v1/chat/completions":
        raise ProxyError(
            "upstream.responses is native, but this model is set to a text adapter",
            status=500,
            type="server_error",
        )
    items = body["input"]
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    body["input"] = patch_input(items, origins, len(messages), exchange.messages)
    if "model" in exchange.body:
        body["model"] = exchange.body["model"]  # an alias resolved to the real name
    exchange.body = body
    exchange.upstream_path = "/v1/responses"
    sources = cited(exchange, Ids.new(), include_results)

    async def answer(response: aiohttp.ClientResponse) -> web.StreamResponse:
        extra = {**exchange.response_headers, "X-Request-ID": exchange.request_id}
        if response.status >= 400 or not (sources.search_results or sources.file_search):
            if not is_event_stream(response) or response.status >= 400:
                return await relay_response(request, response, extra_headers=extra, already=started)
            return await relay_response(
                request,
                response,
                extra_headers=extra,
                already=started,
                transform=_preface_only(status.pending()),
            )
        if is_event_stream(response):
            transform = native_events(NativeStream(sources), status.pending())
            return await relay_response(
                request, response, extra_headers=extra, already=started, transform=transform
            )
        result = cite_response(await _json_answer(response), sources)
        headers = client_response_headers(response.headers)
        headers.update(extra)
        headers["Content-Type"] = "application/json"
        return web.Response(status=response.status, body=await serialise(result), headers=headers)

    return await forward_exchange(request, services, exchange, answer, started)


def _preface_only(preface: bytes) -> Transform:
    async def transform(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        if preface:
            yield preface
        async for chunk in chunks:
            yield chunk

    return transform


def native_events(stream: NativeStream, preface: bytes) -> Transform:
    async def transform(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        if preface:
            yield preface
        async for raw in sse_events(chunks):
            payload = event_json(raw)
            if not isinstance(payload, dict) or "type" not in payload:
                yield raw
                continue
            for event in stream.feed(payload):
                yield sse(event)

    return transform


async def stored_response(request: web.Request) -> web.StreamResponse:
    """GET/DELETE /v1/responses/{id} and friends: the upstream's, or none kept here."""
    if request.app[SERVICES].settings.upstream.responses == "native":
        return await passthrough(request)
    request[ROUTE] = "responses"
    raise ProxyError(STATELESS, status=404, code="response_not_found", param="response_id")
