"""Which headers cross the proxy, each way: hop-by-hop ones never do (RFC 9110 §7.6.1)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache

from multidict import CIMultiDict

OPTION_PREFIX = "x-enrich-"

# Hop-by-hop headers, plus the ones aiohttp recomputes for the new connection.
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


@lru_cache(maxsize=32)
def _dropped(drop: tuple[str, ...]) -> frozenset[str]:
    # Callers pass a handful of constant tuples: the set is built once per tuple, not per request.
    return HOP_BY_HOP | {name.lower() for name in drop}


def end_to_end(headers: Mapping[str, str], drop: Iterable[str] = ()) -> CIMultiDict[str]:
    """`headers` minus hop-by-hop ones, those the `Connection` header names, and `drop`."""
    dropped = _dropped(tuple(drop))
    connection = headers.get("Connection")
    if connection:
        dropped = dropped | {token.strip().lower() for token in connection.split(",")}
    # A copy, then deletions (case-insensitive, every occurrence): cheaper than re-adding each
    # kept header, and the order of what stays is the client's.
    kept = CIMultiDict(headers)
    for name in dropped:
        if name in kept:
            del kept[name]
    return kept


def upstream_request_headers(
    incoming: Mapping[str, str],
    *,
    authorization: str | None,
    request_id: str,
    proxy_keys: bool,
    drop: Iterable[str] = (),
) -> CIMultiDict[str]:
    """The client's headers as they go upstream, with the upstream's own credential
    (`authorization`: upstream.api_key, or base_url's user and password) and request id set.

    With `proxy_keys`, the client's credentials are the proxy's own and never go upstream.
    """
    credentials = ("authorization", "x-api-key") if proxy_keys else ()
    # The proxy's own option headers are for the proxy: none goes upstream, on any route.
    options = tuple(name for name in incoming if name.lower().startswith(OPTION_PREFIX))
    headers = end_to_end(incoming, (*drop, *credentials, *options))
    if authorization:
        headers["Authorization"] = authorization
    headers["X-Request-ID"] = request_id
    return headers


def client_response_headers(upstream: Mapping[str, str]) -> CIMultiDict[str]:
    """The upstream's response headers a client may receive from us (our server sets its own
    Server and Date)."""
    return end_to_end(upstream, ("server", "date"))
