"""GET /v1/models: the upstream's list, plus the aliases of the config, so front ends offer them."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import yarl
from aiohttp import web

from proxy import jsonio
from proxy.config import Settings
from proxy.http.keys import REQUEST_ID, SERVICES, UPSTREAM_SECONDS
from proxy.http.passthrough import passthrough
from proxy.upstream.forward import Outgoing, forward
from proxy.upstream.headers import client_response_headers, upstream_request_headers
from proxy.upstream.relay import relay_response


def aliases(settings: Settings) -> list[str]:
    """Model names that are aliases (`upstream_model` set), globs excepted."""
    return [
        name
        for name, model in settings.models.items()
        if model.upstream_model and not any(ch in name for ch in "*?[")
    ]


def with_aliases(listing: Any, names: list[str]) -> Any:
    """The upstream's model list with each alias added once, as an OpenAI model card."""
    if not isinstance(listing, dict) or not isinstance(listing.get("data"), list):
        return listing
    known = {card.get("id") for card in listing["data"] if isinstance(card, dict)}
    added = [
        {"id": name, "object": "model", "created": 0, "owned_by": "enrich-proxy"}
        for name in names
        if name not in known
    ]
    return {**listing, "data": [*listing["data"], *added]}


async def list_models(request: web.Request) -> web.StreamResponse:
    services = request.app[SERVICES]
    names = aliases(services.settings)
    if not names:
        return await passthrough(request)
    upstream = services.upstream
    headers = upstream_request_headers(
        request.headers,
        authorization=upstream.settings.authorization,
        request_id=request[REQUEST_ID],
        proxy_keys=bool(services.settings.server.api_keys),
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
        body = await response.read()
        try:
            listing = jsonio.loads(body)
        except ValueError:
            listing = None
        out = client_response_headers(response.headers)
        out.update(extra)
        if listing is not None:
            body = json.dumps(with_aliases(listing, names)).encode()
        return web.Response(status=200, body=body, headers=out)

    def timed(seconds: float) -> None:
        request[UPSTREAM_SECONDS] = seconds

    return await forward(upstream, outgoing, answer, on_headers=timed)
