"""POST /v1/chat/completions: read, run the pipeline, forward, relay the answer."""

from __future__ import annotations

import time
from typing import Any

import aiohttp
from aiohttp import web

from proxy import jsonio
from proxy.errors import ProxyError, bad_upstream
from proxy.http.body import read_json_body, serialise
from proxy.http.decorate import as_chunk, decorate_json, decorate_stream
from proxy.http.keys import (
    CALLER,
    EXCHANGE,
    HELD_BODY,
    REQUEST_ID,
    ROUTE,
    SERVICES,
    UPSTREAM_SECONDS,
)
from proxy.http.recording import recorded
from proxy.http.search_loop import loop_chat
from proxy.http.status import StatusChannel
from proxy.http.streams import end_with_error, event_stream, outgoing_headers
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.file_search import FileSearch
from proxy.pipeline.flow import run_pipeline
from proxy.pipeline.services import Services
from proxy.upstream.client import CLIENT_AUTHORIZATION
from proxy.upstream.forward import Answer, Outgoing, forward
from proxy.upstream.headers import client_response_headers
from proxy.upstream.relay import (
    Ending,
    is_stream,
    openai_error_body,
    relay_response,
    sse_error_event,
)
from proxy.upstream.sse import data_event


def status_channel(request: web.Request, services: Services) -> StatusChannel:
    """The request's progress statuses, as `server.status_comments` and `status_delay_s` say."""
    return StatusChannel(
        request,
        enabled=services.settings.server.status_comments,
        delay_s=services.settings.server.status_delay_s,
        request_id=request[REQUEST_ID],
    )


async def prepare_exchange(
    request: web.Request,
    services: Services,
    status: StatusChannel | None = None,
    body: dict[str, Any] | None = None,
    file_search: FileSearch | None = None,
    fixed_route: bool = False,
) -> Exchange:
    """Parse the body (unless given, already in chat shape) and run every stage; what would go
    upstream is then in `exchange.body`. `file_search`: a Responses file_search tool;
    `fixed_route`: the body goes to a route of the caller's (native Responses)."""
    exchange = Exchange(
        request_id=request[REQUEST_ID],
        body=(await read_json_body(request, services.settings.server) if body is None else body),
        caller=request[CALLER],
        option_headers={
            name: value
            for name, value in request.headers.items()
            if name.lower().startswith("x-enrich-")
        },
        file_search=file_search,
        fixed_route=fixed_route,
    )
    request[EXCHANGE] = exchange
    if not services.settings.server.api_keys:
        CLIENT_AUTHORIZATION.set(request.headers.get("Authorization"))
    if status is not None:
        exchange.status = status
        if exchange.stream:
            status.begin()
    try:
        await run_pipeline(exchange, services)
    finally:
        exchange.release_documents()
        services.metrics.prepare.observe(time.perf_counter() - exchange.started)
    return exchange


async def prepare_or_fail(
    request: web.Request,
    services: Services,
    body: dict[str, Any] | None = None,
    file_search: FileSearch | None = None,
    ending: Ending = sse_error_event,
    fixed_route: bool = False,
) -> tuple[Exchange | None, StatusChannel, web.StreamResponse | None]:
    """`prepare_exchange` with the request's status channel, and the response it started (if
    preparing was slow). A failure after that start ends the stream with an error event and
    gives no exchange; before it, the error is raised for an ordinary error answer."""
    status = status_channel(request, services)
    try:
        exchange = await prepare_exchange(request, services, status, body, file_search, fixed_route)
    except ProxyError as error:
        started = await status.finish()
        if started is None:
            raise
        return None, status, await end_with_error(request, started, error, ending)
    return exchange, status, await status.finish()


@recorded
async def chat_completions(request: web.Request) -> web.StreamResponse:
    request[ROUTE] = "chat"
    services = request.app[SERVICES]
    exchange, status, started = await prepare_or_fail(request, services)
    if exchange is None:
        assert started is not None
        return started
    if exchange.model_search is not None:  # the model writes the searches: a tool loop
        return await loop_chat(request, services, exchange, status, started)

    async def answer(response: aiohttp.ClientResponse) -> web.StreamResponse:
        return await relay_chat(request, exchange, response, started, status)

    return await forward_exchange(request, services, exchange, answer, started)


async def forward_exchange(
    request: web.Request,
    services: Services,
    exchange: Exchange,
    answer: Answer,
    started: web.StreamResponse | None,
    ending: Ending = sse_error_event,
) -> web.StreamResponse:
    """Send the prepared body upstream; `answer` turns the upstream's response into the client's."""
    services.metrics.strategies.labels(exchange.strategy).inc()
    upstream = services.upstream
    headers = outgoing_headers(request, services, exchange)
    data = await serialise(exchange.body)
    held = request.get(HELD_BODY)
    if held is not None:
        held.sending(len(data))
    outgoing = Outgoing("POST", upstream.url(exchange.upstream_path), headers, data)

    def timed(seconds: float) -> None:
        request[UPSTREAM_SECONDS] = seconds

    return await forward(
        upstream, outgoing, answer, started=started, on_headers=timed, ending=ending
    )


async def relay_chat(
    request: web.Request,
    exchange: Exchange,
    response: aiohttp.ClientResponse,
    started: web.StreamResponse | None,
    status: StatusChannel,
) -> web.StreamResponse:
    """The upstream's answer with what the proxy adds: citations, statuses, the chat shape."""
    ok = response.status < 400
    if not ok:
        converted = await converted_error(request, exchange, response, started)
        if converted is not None:
            return converted
    if (
        ok
        and not exchange.stream
        and started is None
        and "Content-Encoding" not in response.headers
    ):
        answer = await response.read()
        body = decorate_json(answer, exchange)
        # The upstream's own headers go back too; the length is that of the body we send.
        headers = client_response_headers(response.headers)
        headers.update(exchange.response_headers)
        headers["X-Request-ID"] = exchange.request_id
        return web.Response(status=response.status, body=body, headers=headers)
    if (
        ok
        and exchange.stream
        and not is_stream(response)
        and "Content-Encoding" not in response.headers
    ):
        return await _stream_whole_answer(request, exchange, response, started, status)
    transform = None
    if ok and (exchange.stream or started is not None):
        transform = decorate_stream(exchange, status.pending())
    return await relay_response(
        request,
        response,
        extra_headers={**exchange.response_headers, "X-Request-ID": exchange.request_id},
        already=started,
        transform=transform,
    )


async def converted_error(
    request: web.Request,
    exchange: Exchange,
    response: aiohttp.ClientResponse,
    started: web.StreamResponse | None,
    ending: Ending = sse_error_event,
) -> web.StreamResponse | None:
    """An upstream error in OpenAI's shape: as the exchange's converter reads the upstream's
    (Ollama's native API), or the other servers' shapes. Nothing sent yet: the error answer,
    with the upstream's status; a stream the statuses started: its `ending`, with the same
    message and code. None: relay it as it came (it is OpenAI's already, or nothing readable)."""
    raw = await response.read()  # kept by aiohttp: a relay after this reads it again
    try:
        payload = jsonio.loads(raw)
    except ValueError:
        return None
    converter = exchange.response_converter
    body = converter.convert_error(response.status, payload) if converter is not None else None
    if body is None:
        body = openai_error_body(response.status, payload)
        overflow = body is not None and body["error"]["code"] == "context_length_exceeded"
        if body is not None and overflow and exchange.window_hint:
            body["error"]["message"] += f"; {exchange.window_hint}"
    if body is None:
        return None
    if started is not None:
        fields = body["error"]
        error = ProxyError(
            str(fields["message"]),
            status=response.status,
            type="upstream_error",  # as every upstream error in a started stream
            param=fields.get("param"),
            code=fields.get("code"),
        )
        return await end_with_error(request, started, error, ending)
    headers = {**exchange.response_headers, "X-Request-ID": exchange.request_id}
    return web.json_response(body, status=response.status, headers=headers)


async def _stream_whole_answer(
    request: web.Request,
    exchange: Exchange,
    response: aiohttp.ClientResponse,
    started: web.StreamResponse | None,
    status: StatusChannel,
) -> web.StreamResponse:
    """An upstream that ignored `stream` answered with one JSON body: the client asked for a
    stream, so it gets one — the decorated answer as a single chunk, then [DONE]."""
    raw = await response.read()
    try:
        payload = jsonio.loads(decorate_json(raw, exchange))
    except (ValueError, UnicodeDecodeError):
        payload = None
    if not isinstance(payload, dict):
        error = bad_upstream("chat answer")
        if started is None:
            raise error
        return await end_with_error(request, started, error)
    headers = client_response_headers(response.headers)
    headers.popall("Content-Length", None)
    headers.update(exchange.response_headers)
    headers["X-Request-ID"] = exchange.request_id
    out = await event_stream(request, started, headers)
    await out.write(status.pending() + data_event(as_chunk(payload)) + b"data: [DONE]\n\n")
    await out.write_eof()
    return out
