"""GET /api/ps (Ollama's loaded models) for a key that is not an admin's: the models, not the
windows, sizes and times that other callers' requests gave them."""

from __future__ import annotations

import json
from pathlib import PurePosixPath

import aiohttp
import yarl
from aiohttp import web

from proxy.errors import UpstreamError
from proxy.http.keys import CALLER, REQUEST_ID, SERVICES, UPSTREAM_SECONDS
from proxy.upstream.forward import Outgoing, forward
from proxy.upstream.headers import client_response_headers, upstream_request_headers
from proxy.upstream.ollama.api import public_processes
from proxy.upstream.relay import relay_response
from proxy.upstream.routes import plain_path

PATH = PurePosixPath("/api/ps")
MAX_BYTES = 1024 * 1024
"""/api/ps lists the models loaded at once (a few hundred bytes each): a larger answer is not
read."""


def scoped(request: web.Request) -> bool:
    """Whether this is a GET /api/ps whose answer must leave out what callers' requests shaped:
    with server.api_keys, for any key but an admin's (as /healthz decides)."""
    if request.method not in ("GET", "HEAD"):
        return False
    if plain_path(request.path, request.raw_path) != PATH:
        return False
    caller = request.get(CALLER)
    keys = request.app[SERVICES].settings.server.api_keys
    return bool(keys) and not (caller is not None and caller.admin)


async def _read_at_most(response: aiohttp.ClientResponse, limit: int) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_any():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def running_models(request: web.Request) -> web.StreamResponse:
    services = request.app[SERVICES]
    upstream = services.upstream
    headers = upstream_request_headers(
        request.headers,
        authorization=upstream.settings.authorization,
        request_id=request[REQUEST_ID],
        proxy_keys=True,
        drop=("accept-encoding",),
    )
    headers["Accept-Encoding"] = "identity"
    outgoing = Outgoing(
        "GET", yarl.URL(upstream.url(request.raw_path), encoded=True), headers, None
    )

    async def answer(response: aiohttp.ClientResponse) -> web.StreamResponse:
        extra = {"X-Request-ID": request[REQUEST_ID]}
        if response.status != 200:
            return await relay_response(request, response, extra_headers=extra)
        body = await _read_at_most(response, MAX_BYTES)
        if body is None:
            raise UpstreamError("the upstream's /api/ps answer is too large", code="bad_upstream")
        try:
            listing = json.loads(body)
        except ValueError:
            raise UpstreamError(
                "the upstream's /api/ps answer is not JSON", code="bad_upstream"
            ) from None
        out = client_response_headers(response.headers)
        out.update(extra)
        out["Content-Type"] = "application/json"
        return web.Response(status=200, body=json.dumps(public_processes(listing)), headers=out)

    def timed(seconds: float) -> None:
        request[UPSTREAM_SECONDS] = seconds

    return await forward(upstream, outgoing, answer, on_headers=timed)
