"""Every other route the allow-list forwards (proxy.upstream.routes): relayed unchanged, both
ways; any other is a 404 that never reaches the upstream."""

from __future__ import annotations

import aiohttp
import yarl
from aiohttp import web

from proxy.errors import ProxyError
from proxy.http.body import read_body
from proxy.http.keys import CALLER, REQUEST_ID, SERVICES, UPSTREAM_SECONDS
from proxy.http.running_models import running_models, scoped
from proxy.upstream.forward import Answer, Outgoing, forward
from proxy.upstream.headers import upstream_request_headers
from proxy.upstream.relay import relay_response


def not_forwarded(method: str, path: str) -> ProxyError:
    """The same answer for a route nobody may use and one only admin keys may: a key cannot
    tell which admin routes the operator opened."""
    return ProxyError(
        f"{method} {path} is not forwarded to the upstream by this proxy (an operator can allow"
        " it with upstream.allowed_routes, or upstream.admin_routes for admin keys)",
        status=404,
        type="not_found_error",
        code="route_not_forwarded",
    )


async def passthrough(request: web.Request) -> web.StreamResponse:
    services = request.app[SERVICES]
    caller = request[CALLER]
    if not services.routes.forwarded(
        request.method, request.path, request.raw_path, admin=caller.admin
    ):
        raise not_forwarded(request.method, request.path)
    if scoped(request):
        return await running_models(request)
    return await relay_to_upstream(request)


async def relay_to_upstream(
    request: web.Request, body: bytes | None = None, answer: Answer | None = None
) -> web.StreamResponse:
    """The request as it came (method, raw path and query, body, headers), relayed; `body`
    when it was read already, `answer` when the upstream's answer is not relayed as it is."""
    services = request.app[SERVICES]
    upstream = services.upstream
    request_id = request[REQUEST_ID]
    server = services.settings.server
    if body is None:
        body = await read_body(request, server)
    outgoing = Outgoing(
        method=request.method,
        # The raw path and query, still percent-encoded as the client sent them.
        url=yarl.URL(upstream.url(request.raw_path), encoded=True),
        headers=upstream_request_headers(
            request.headers,
            authorization=upstream.settings.authorization,
            request_id=request_id,
            proxy_keys=bool(services.settings.server.api_keys),
        ),
        body=body or None,
    )

    async def relayed(response: aiohttp.ClientResponse) -> web.StreamResponse:
        return await relay_response(request, response, extra_headers={"X-Request-ID": request_id})

    def timed(seconds: float) -> None:
        request[UPSTREAM_SECONDS] = seconds

    return await forward(upstream, outgoing, answer or relayed, on_headers=timed)
