"""Every other method and path: relayed unchanged, both ways."""

from __future__ import annotations

import aiohttp
import yarl
from aiohttp import web

from proxy.http.body import read_body
from proxy.http.keys import REQUEST_ID, SERVICES, UPSTREAM_SECONDS
from proxy.upstream.forward import Outgoing, forward
from proxy.upstream.headers import upstream_request_headers
from proxy.upstream.relay import relay_response


async def passthrough(request: web.Request) -> web.StreamResponse:
    services = request.app[SERVICES]
    upstream = services.upstream
    request_id = request[REQUEST_ID]
    server = services.settings.server
    body = await read_body(request, server)
    outgoing = Outgoing(
        method=request.method,
        # The raw path and query, still percent-encoded as the client sent them.
        url=yarl.URL(upstream.url(request.raw_path), encoded=True),
        headers=upstream_request_headers(
            request.headers,
            api_key=upstream.settings.api_key,
            request_id=request_id,
            proxy_keys=bool(services.settings.server.api_keys),
        ),
        body=body or None,
    )

    async def answer(response: aiohttp.ClientResponse) -> web.StreamResponse:
        return await relay_response(request, response, extra_headers={"X-Request-ID": request_id})

    def timed(seconds: float) -> None:
        request[UPSTREAM_SECONDS] = seconds

    return await forward(upstream, outgoing, answer, on_headers=timed)
