"""Recording each finished chat request, failed ones included, in the decision log."""

from __future__ import annotations

import asyncio
import functools
import time

from aiohttp import web
from aiohttp.typedefs import Handler

from proxy.errors import ProxyError
from proxy.http.keys import CALLER, EXCHANGE, FAILURE, REQUEST_ID, ROUTE, SERVICES
from proxy.pipeline.decision_log import record_of
from proxy.pipeline.exchange import ANONYMOUS
from proxy.upstream.relay import UpstreamCut


def recorded(handler: Handler) -> Handler:
    """The route, with its exchange and how it ended (status, error) added to the log when it
    finishes: after the last byte of a streamed answer."""

    @functools.wraps(handler)
    async def route(request: web.Request) -> web.StreamResponse:
        log = request.app[SERVICES].decisions
        if not log.enabled:
            return await handler(request)
        wall, started = time.time(), time.perf_counter()
        status = 500
        error: str | None = "internal proxy error"
        try:
            response = await handler(request)
            status = response.status
            failure = request.get(FAILURE)
            if failure is not None:
                error = failure.message
            elif status >= 400:
                error = f"the upstream answered {status}"
            else:
                error = None
            return response
        except ProxyError as exc:
            status, error = exc.status, exc.message
            raise
        except UpstreamCut as exc:
            status, error = 502, str(exc)
            raise
        except asyncio.CancelledError:
            status, error = 499, "the client went away"
            raise
        finally:
            log.add(
                record_of(
                    request.get(EXCHANGE),
                    request_id=request[REQUEST_ID],
                    caller=request.get(CALLER, ANONYMOUS),
                    route=request.get(ROUTE, "chat"),
                    status=status,
                    error=error,
                    time=wall,
                    duration_s=time.perf_counter() - started,
                    snippets=log.snippets,
                )
            )

    return route
