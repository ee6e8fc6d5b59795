"""Writing to the client: a stream's start and its error ending, the headers that go upstream."""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import web
from multidict import CIMultiDict

from proxy.errors import ProxyError
from proxy.http.keys import FAILURE
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.option_layers import OPTION_HEADERS
from proxy.pipeline.services import Services
from proxy.upstream.headers import upstream_request_headers
from proxy.upstream.relay import Ending, sse_error_event


async def end_with_error(
    request: web.Request,
    started: web.StreamResponse,
    error: ProxyError,
    ending: Ending = sse_error_event,
) -> web.StreamResponse:
    """A stream already started cannot get an error status: it ends with the error event."""
    request[FAILURE] = error
    await started.write(ending(error))
    await started.write_eof()
    return started


async def event_stream(
    request: web.Request, started: web.StreamResponse | None, headers: Mapping[str, str]
) -> web.StreamResponse:
    """The stream the statuses started, or a new one with `headers`."""
    if started is not None:
        return started
    response = web.StreamResponse(
        headers={**headers, "Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    return response


def outgoing_headers(
    request: web.Request, services: Services, exchange: Exchange
) -> CIMultiDict[str]:
    """The client's headers as they go upstream with the prepared body."""
    headers = upstream_request_headers(
        request.headers,
        authorization=services.upstream.settings.authorization,
        request_id=exchange.request_id,
        proxy_keys=bool(services.settings.server.api_keys),
        # We may rewrite the answer, so ask for it unencoded; the body is new JSON.
        drop=("accept-encoding", "content-type", "content-encoding", *OPTION_HEADERS),
    )
    headers["Content-Type"] = "application/json"
    headers["Accept-Encoding"] = "identity"
    return headers
