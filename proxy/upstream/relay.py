"""Relaying the upstream's answer to the client: bodies, SSE streams, failures on the way."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import aiohttp
from aiohttp import web

from proxy.errors import ProxyError, UpstreamError, UpstreamTimeout
from proxy.upstream.headers import client_response_headers
from proxy.upstream.sse import ndjson_events

# Bodies up to this size are read whole and answered with an exact Content-Length.
SMALL_BODY = 1 << 20


class ClientGone(ConnectionResetError):
    """The client's connection closed while its answer was being written (not an upstream
    failure: nothing is translated into an error event for it, nobody would read one)."""


class UpstreamCut(Exception):
    """The upstream broke off a plain (not SSE) body whose first bytes already went to the
    client: no error answer can follow them, so the connection is to be closed before the
    body's end is marked, which tells the client its copy is truncated."""

    def __init__(self, message: str, response: web.StreamResponse) -> None:
        super().__init__(message)
        self.response = response


NDJSON = "application/x-ndjson"


def is_event_stream(response: aiohttp.ClientResponse) -> bool:
    return response.content_type == "text/event-stream"


def is_stream(response: aiohttp.ClientResponse) -> bool:
    """An answer in parts: SSE, or NDJSON (Ollama's native API), read as events."""
    return response.content_type in ("text/event-stream", NDJSON)


def event_chunks(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The answer's bytes as they arrive, NDJSON lines turned into SSE events."""
    chunks = response.content.iter_any()
    return ndjson_events(chunks) if response.content_type == NDJSON else chunks


def sse_error_event(error: ProxyError) -> bytes:
    return b"data: " + json.dumps(error.to_dict()).encode() + b"\n\ndata: [DONE]\n\n"


Ending = Callable[[ProxyError], bytes]
"""The last bytes of an event stream that failed: chat's error event and `[DONE]` by default;
the Responses API ends with its own events (`error`, `response.failed`)."""


def translate_client_error(exc: BaseException, url: str) -> ProxyError:
    """A connection-level failure talking to the upstream, as the client should see it."""
    if isinstance(exc, asyncio.TimeoutError | aiohttp.ServerTimeoutError):
        return UpstreamTimeout(
            f"upstream {url} did not answer in time; if it is busy or slow on long prompts, "
            "raise upstream.connect_timeout_s / upstream.read_timeout_s",
            code="upstream_timeout",
        )
    if isinstance(exc, aiohttp.ClientConnectorError):
        return UpstreamError(
            f"upstream {url} is unreachable: {exc.os_error.strerror or exc}; start it, or "
            "point --upstream (upstream.base_url) at a running server",
            code="upstream_unreachable",
        )
    return UpstreamError(f"upstream {url} failed: {exc.__class__.__name__}: {exc}")


async def relay_response(
    request: web.Request,
    upstream: aiohttp.ClientResponse,
    *,
    extra_headers: Mapping[str, str] | None = None,
    already: web.StreamResponse | None = None,
    transform: Callable[[AsyncIterator[bytes]], AsyncIterator[bytes]] | None = None,
    ending: Ending = sse_error_event,
) -> web.StreamResponse:
    """Send the upstream's answer to the client: small bodies whole, the rest as they arrive.

    `already` is a response this proxy has started itself (status comments went out before the
    upstream answered); then the upstream's status and headers can no longer be sent, and an
    upstream error is turned into the stream's `ending`.
    """
    headers = client_response_headers(upstream.headers)
    if extra_headers:
        headers.update(extra_headers)
    if already is not None:
        return await _relay_into_started(upstream, already, transform, ending)
    length = upstream.content_length
    streaming = is_event_stream(upstream) or length is None or length > SMALL_BODY
    if not streaming and transform is None:
        body = await upstream.read()
        return web.Response(
            status=upstream.status, reason=upstream.reason, body=body, headers=headers
        )
    reframed = transform is not None and upstream.content_type == NDJSON
    if reframed:
        headers["Content-Type"] = "text/event-stream"
    response = web.StreamResponse(status=upstream.status, reason=upstream.reason, headers=headers)
    if length is not None and transform is None:
        response.content_length = length
    await response.prepare(request)
    if transform is not None:
        source = transform(event_chunks(upstream))
    else:
        source = upstream.content.iter_any()
    sse = is_event_stream(upstream) or reframed
    await _pump(response, source, sse=sse, url=str(upstream.url), ending=ending)
    return response


async def _relay_into_started(
    upstream: aiohttp.ClientResponse,
    response: web.StreamResponse,
    transform: Callable[[AsyncIterator[bytes]], AsyncIterator[bytes]] | None,
    ending: Ending,
) -> web.StreamResponse:
    if upstream.status >= 400 or not is_stream(upstream):
        body = await upstream.read()
        try:
            payload = json.loads(body)
        except ValueError:
            payload = None
        if upstream.status >= 400:
            message = error_message(payload) or body.decode("utf-8", "replace")[:2000]
            error = ProxyError(message, status=upstream.status, type="upstream_error")
            await response.write(ending(error))
        elif isinstance(payload, dict):
            # A non-streamed answer to a streamed request: send it as one event.
            await response.write(b"data: " + body + b"\n\ndata: [DONE]\n\n")
        await response.write_eof()
        return response
    chunks = event_chunks(upstream)
    source = transform(chunks) if transform is not None else chunks
    await _pump(response, source, sse=True, url=str(upstream.url), ending=ending)
    return response


def error_message(payload: Any) -> str | None:
    """The message of an upstream error body: OpenAI's shape, the older flat one, a bare string
    (Ollama, TGI: `{"error": "..."}`) or FastAPI's and KoboldCpp's `detail`."""
    if isinstance(payload, dict):
        error = payload.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(error, str) and error:
            return error
        if isinstance(payload.get("message"), str):
            return str(payload["message"])
        detail = payload.get("detail")
        if isinstance(detail, str):
            return detail
        if isinstance(detail, dict) and isinstance(detail.get("msg"), str):
            return str(detail["msg"])
    return None


def openai_error_body(status: int, payload: Any) -> dict[str, Any] | None:
    """An upstream error body in OpenAI's shape, for the error shapes other servers use (a bare
    `{"error": "..."}` from Ollama and TGI, SGLang's flat `{"object": "error", "message"}`,
    FastAPI's and KoboldCpp's `detail`), so the openai SDK shows their message; None when the
    body is OpenAI's already (relayed untouched) or says nothing readable."""
    if not isinstance(payload, dict):
        return None
    error = payload.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return None
    message = error_message(payload)
    if message is None:
        return None
    kind = payload.get("error_type") or payload.get("type")
    if not isinstance(kind, str):
        kind = "invalid_request_error" if 400 <= status < 500 else "upstream_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


async def _pump(
    response: web.StreamResponse,
    source: AsyncIterator[bytes],
    *,
    sse: bool,
    url: str,
    ending: Ending = sse_error_event,
) -> None:
    """Copy bytes as they arrive; if the upstream dies mid-stream, end the SSE stream cleanly."""
    # The last two non-empty chunks, kept by reference: the stream's last two bytes are only
    # needed if it breaks, so no per-chunk slicing.
    before = last = b""
    try:
        async for chunk in source:
            if chunk:
                try:
                    await response.write(chunk)
                except ConnectionResetError as exc:
                    # aiohttp raises the same error class for both sides: say which it was.
                    raise ClientGone from exc
                before, last = last, chunk
    except (TimeoutError, aiohttp.ClientError) as exc:
        if not sse:
            raise UpstreamCut(f"upstream {url} broke off the response", response) from exc
        error = translate_client_error(exc, url)
        if not isinstance(exc, asyncio.TimeoutError):
            error = UpstreamError(
                f"upstream {url} broke off the stream: {exc.__class__.__name__}",
                code="upstream_stream_broken",
            )
        tail = (before[-1:] + last)[-2:]
        separator = b"" if tail.endswith(b"\n\n") or not tail else b"\n\n"
        await response.write(separator + ending(error))
    await response.write_eof()
