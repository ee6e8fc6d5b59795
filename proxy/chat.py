"""POST /v1/chat/completions: read, run the pipeline, forward, relay the answer."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import structlog
from aiohttp import web

from .errors import BadRequest, ProxyError
from .exchange import Exchange
from .keys import REQUEST_ID, SERVICES, UPSTREAM_SECONDS
from .pipeline import run_pipeline
from .response import decorate_json, decorate_stream
from .services import Services
from .status import StatusChannel
from .upstream.client import CLIENT_AUTHORIZATION
from .upstream.relay import (
    client_response_headers,
    relay_response,
    sse_error_event,
    translate_client_error,
    upstream_request_headers,
)

log = structlog.get_logger(__name__)


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

    return await asyncio.to_thread(dump) if text_size(body) > OFF_LOOP_BYTES else dump()


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


async def prepare_exchange(
    request: web.Request, services: Services, status: StatusChannel | None = None
) -> Exchange:
    """Parse the body and run every stage; what would go upstream is then in `exchange.body`."""
    exchange = Exchange(
        request_id=request[REQUEST_ID],
        body=await parse_body(await request.read()),
    )
    if not services.settings.server.api_keys:
        CLIENT_AUTHORIZATION.set(request.headers.get("Authorization"))
    if status is not None:
        exchange.status = status
        if exchange.stream:
            status.begin()
    try:
        await run_pipeline(exchange, services)
    finally:
        services.metrics.prepare.observe(time.perf_counter() - exchange.started)
    return exchange


async def chat_completions(request: web.Request) -> web.StreamResponse:
    services = request.app[SERVICES]
    status = StatusChannel(
        request,
        enabled=services.settings.server.status_comments,
        delay_s=services.settings.server.status_delay_s,
        request_id=request[REQUEST_ID],
    )
    try:
        exchange = await prepare_exchange(request, services, status)
    except ProxyError as error:
        started = await status.finish()
        if started is None:
            raise
        await started.write(sse_error_event(error))
        await started.write_eof()
        return started
    started = await status.finish()
    services.metrics.strategies.labels(exchange.strategy).inc()
    return await forward(request, services, exchange, started, status)


async def forward(
    request: web.Request,
    services: Services,
    exchange: Exchange,
    started: web.StreamResponse | None,
    status: StatusChannel,
) -> web.StreamResponse:
    upstream = services.upstream
    headers = upstream_request_headers(
        request.headers,
        api_key=upstream.settings.api_key,
        request_id=exchange.request_id,
        proxy_keys=bool(services.settings.server.api_keys),
        # We may rewrite the answer, so ask for it unencoded; the body is new JSON.
        drop=("accept-encoding", "content-type", "content-encoding"),
    )
    headers["Content-Type"] = "application/json"
    headers["Accept-Encoding"] = "identity"
    payload = await serialise(exchange.body)
    url = upstream.url(exchange.upstream_path)
    sent = time.perf_counter()
    try:
        async with upstream.open("POST", url, data=payload, headers=headers) as response:
            request[UPSTREAM_SECONDS] = time.perf_counter() - sent
            log.debug("upstream answered", status=response.status, url=url)
            return await relay_chat(request, exchange, response, started, status)
    except (TimeoutError, aiohttp.ClientError) as exc:
        error = translate_client_error(exc, upstream.base_url)
        if started is None:
            raise error from exc
        await started.write(sse_error_event(error))
        await started.write_eof()
        return started


async def relay_chat(
    request: web.Request,
    exchange: Exchange,
    response: aiohttp.ClientResponse,
    started: web.StreamResponse | None,
    status: StatusChannel,
) -> web.StreamResponse:
    ok = response.status < 400
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
    transform = None
    if ok and (exchange.stream or started is not None):
        preface = status.pending()
        transform = decorate_stream(exchange, preface)
    return await relay_response(
        request,
        response,
        extra_headers={**exchange.response_headers, "X-Request-ID": exchange.request_id},
        already=started,
        transform=transform,
    )
