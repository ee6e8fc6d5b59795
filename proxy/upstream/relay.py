"""Relaying HTTP to the upstream and back: headers, bodies, SSE streams, failures."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from ..errors import ProxyError, UpstreamError, UpstreamTimeout

# RFC 9110 §7.6.1 hop-by-hop headers, plus the ones aiohttp recomputes for the new connection.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)

# Bodies up to this size are read whole and answered with an exact Content-Length.
SMALL_BODY = 1 << 20


def upstream_request_headers(
    incoming: Mapping[str, str],
    *,
    api_key: str | None,
    request_id: str,
    proxy_keys: bool = False,
    drop: Iterable[str] = (),
) -> CIMultiDict[str]:
    """The client's headers minus hop-by-hop ones, with the upstream key and request id set.

    With `proxy_keys`, the client's credentials are the proxy's own and never go upstream.
    """
    dropped = HOP_BY_HOP | {name.lower() for name in drop}
    if proxy_keys:
        dropped |= {"authorization", "x-api-key"}
    connection_listed = {
        token.strip().lower() for token in incoming.get("Connection", "").split(",") if token
    }
    headers: CIMultiDict[str] = CIMultiDict()
    for name, value in incoming.items():
        lowered = name.lower()
        if lowered in dropped or lowered in connection_listed:
            continue
        headers.add(name, value)
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    headers["X-Request-ID"] = request_id
    return headers


def client_response_headers(upstream: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    """The upstream's response headers a client may receive from us."""
    connection_listed = {
        token.strip().lower() for token in upstream.get("Connection", "").split(",") if token
    }
    headers: CIMultiDict[str] = CIMultiDict()
    for name, value in upstream.items():
        lowered = name.lower()
        if lowered in HOP_BY_HOP or lowered in connection_listed:
            continue
        if lowered in {"server", "date"}:
            continue
        headers.add(name, value)
    return headers


def is_event_stream(response: aiohttp.ClientResponse) -> bool:
    return response.content_type == "text/event-stream"


def sse_error_event(error: ProxyError) -> bytes:
    return b"data: " + json.dumps(error.to_dict()).encode() + b"\n\ndata: [DONE]\n\n"


def translate_client_error(exc: BaseException, url: str) -> ProxyError:
    """A connection-level failure talking to the upstream, as the client should see it."""
    if isinstance(exc, asyncio.TimeoutError | aiohttp.ServerTimeoutError):
        return UpstreamTimeout(f"upstream {url} did not answer in time", code="upstream_timeout")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return UpstreamError(
            f"upstream {url} is unreachable: {exc.os_error.strerror or exc}",
            code="upstream_unreachable",
        )
    return UpstreamError(f"upstream {url} failed: {exc.__class__.__name__}: {exc}")


class UpstreamTiming:
    """When the upstream answered, for the access log and metrics."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.headers_at: float | None = None

    def headers_received(self) -> None:
        self.headers_at = time.perf_counter()

    @property
    def seconds(self) -> float | None:
        return None if self.headers_at is None else self.headers_at - self.started


async def relay_response(
    request: web.Request,
    upstream: aiohttp.ClientResponse,
    *,
    extra_headers: Mapping[str, str] | None = None,
    already: web.StreamResponse | None = None,
    transform: Callable[[AsyncIterator[bytes]], AsyncIterator[bytes]] | None = None,
) -> web.StreamResponse:
    """Send the upstream's answer to the client: small bodies whole, the rest as they arrive.

    `already` is a response this proxy has started itself (status comments went out before the
    upstream answered); then the upstream's status and headers can no longer be sent, and an
    upstream error is turned into an SSE error event.
    """
    headers = client_response_headers(upstream.headers)
    if extra_headers:
        headers.update(extra_headers)
    if already is not None:
        return await _relay_into_started(request, upstream, already, transform)
    length = upstream.content_length
    streaming = is_event_stream(upstream) or length is None or length > SMALL_BODY
    if not streaming and transform is None:
        body = await upstream.read()
        return web.Response(
            status=upstream.status, reason=upstream.reason, body=body, headers=headers
        )
    response = web.StreamResponse(status=upstream.status, reason=upstream.reason, headers=headers)
    if length is not None and transform is None:
        response.content_length = length
    await response.prepare(request)
    chunks = upstream.content.iter_any()
    source = transform(chunks) if transform is not None else chunks
    await _pump(response, source, sse=is_event_stream(upstream), url=str(upstream.url))
    return response


async def _relay_into_started(
    request: web.Request,
    upstream: aiohttp.ClientResponse,
    response: web.StreamResponse,
    transform: Callable[[AsyncIterator[bytes]], AsyncIterator[bytes]] | None,
) -> web.StreamResponse:
    if upstream.status >= 400 or not is_event_stream(upstream):
        body = await upstream.read()
        try:
            payload = json.loads(body)
        except ValueError:
            payload = None
        if upstream.status >= 400:
            message = error_message(payload) or body.decode("utf-8", "replace")[:2000]
            error = ProxyError(message, status=upstream.status, type="upstream_error")
            await response.write(sse_error_event(error))
        elif isinstance(payload, dict):
            # A non-streamed answer to a streamed request: send it as one event.
            await response.write(b"data: " + body + b"\n\ndata: [DONE]\n\n")
        await response.write_eof()
        return response
    chunks = upstream.content.iter_any()
    source = transform(chunks) if transform is not None else chunks
    await _pump(response, source, sse=True, url=str(upstream.url))
    return response


def error_message(payload: Any) -> str | None:
    """The message of an upstream error body, in OpenAI's shape or the older flat one."""
    if isinstance(payload, dict):
        error = payload.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(payload.get("message"), str):
            return str(payload["message"])
    return None


async def _pump(
    response: web.StreamResponse, source: AsyncIterator[bytes], *, sse: bool, url: str
) -> None:
    """Copy bytes as they arrive; if the upstream dies mid-stream, end the SSE stream cleanly."""
    tail = b""
    try:
        async for chunk in source:
            if chunk:
                await response.write(chunk)
                tail = (tail + chunk[-2:])[-2:]
    except (TimeoutError, aiohttp.ClientError) as exc:
        if not sse:
            # A plain body cut short: closing without write_eof tells the client it is truncated.
            raise ConnectionResetError(f"upstream {url} broke off the response") from exc
        error = translate_client_error(exc, url)
        if not isinstance(exc, asyncio.TimeoutError):
            error = UpstreamError(
                f"upstream {url} broke off the stream: {exc.__class__.__name__}",
                code="upstream_stream_broken",
            )
        separator = b"" if tail.endswith(b"\n\n") or not tail else b"\n\n"
        await response.write(separator + sse_error_event(error))
    await response.write_eof()
