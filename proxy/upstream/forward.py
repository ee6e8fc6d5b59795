"""The one forwarding path: send a request upstream, time it, relay or translate its failure."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp
import yarl
from aiohttp import web
from multidict import CIMultiDict

from proxy.upstream.client import UpstreamClient
from proxy.upstream.relay import Ending, sse_error_event, translate_client_error

Answer = Callable[[aiohttp.ClientResponse], Awaitable[web.StreamResponse]]
"""Turns the upstream's response into the client's: relayed as is, or decorated."""


@dataclass(frozen=True)
class Outgoing:
    """A request as it goes to the upstream."""

    method: str
    url: str | yarl.URL
    headers: CIMultiDict[str]
    body: bytes | None


async def forward(
    upstream: UpstreamClient,
    outgoing: Outgoing,
    answer: Answer,
    *,
    started: web.StreamResponse | None = None,
    on_headers: Callable[[float], None] | None = None,
    ending: Ending = sse_error_event,
) -> web.StreamResponse:
    """Send `outgoing`; `answer` relays what comes back.

    `on_headers` learns how long the upstream took to answer with its headers. A connection
    failure is an OpenAI-shaped 502/504, or, when the client's stream was `started` already,
    the stream's `ending`.
    """
    sent = time.perf_counter()
    try:
        # `send` and a `finally`, not the `open` context manager: one generator less per request.
        response = await upstream.send(
            outgoing.method,
            outgoing.url,
            data=outgoing.body,
            headers=outgoing.headers,
            allow_redirects=False,
        )
        try:
            if on_headers is not None:
                on_headers(time.perf_counter() - sent)
            return await answer(response)
        finally:
            response.release()
    except (TimeoutError, aiohttp.ClientError) as exc:
        error = translate_client_error(exc, upstream.base_url)
        if started is None:
            raise error from exc
        await started.write(ending(error))
        await started.write_eof()
        return started
