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


# Request headers that tell a server in front of an application, or the framework inside it,
# where a request really goes, by which method, or for which client: sent by a client, they
# would be taken for what a trusted proxy in front had said — IIS's and Symfony's
# X-Original-URL and X-Rewrite-URL, method overrides (Express, Google's APIs), RFC 7239's
# Forwarded and the X-Forwarded-* family, client-address headers, Envoy's internal ones and
# Next.js's X-Middleware-Subrequest. The proxy is the upstream's client; none of these passes.
# A deny-list rather than an allow-list: clients and gateways rely on headers no list can know
# in advance (OpenAI-Beta, OpenRouter's HTTP-Referer and X-Title, Azure's api-key,
# anthropic-version, traceparent, the SDKs' X-Stainless-*), while what reroutes is one known
# family of names, matched by prefix where it is open-ended.
ROUTING_HEADERS = frozenset(
    {
        "forwarded",
        "x-forwarded",
        "x-rewrite-url",
        "x-http-method-override",
        "x-http-method",
        "x-method-override",
        "x-real-ip",
        "x-client-ip",
        "client-ip",
        "true-client-ip",
        "cf-connecting-ip",
        "fastly-client-ip",
        "x-cluster-client-ip",
        "x-originating-ip",
        "x-remote-ip",
        "x-remote-addr",
        "x-proxyuser-ip",
        "x-host",
        "x-middleware-subrequest",
    }
)
ROUTING_PREFIXES = ("x-forwarded-", "x-original-", "x-envoy-")


def is_routing(name: str) -> bool:
    lowered = name.lower()
    return lowered in ROUTING_HEADERS or lowered.startswith(ROUTING_PREFIXES)


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
    # The proxy's own option headers are for the proxy: none goes upstream, on any route; nor
    # does any header that reroutes a request.
    own = tuple(
        name for name in incoming if name.lower().startswith(OPTION_PREFIX) or is_routing(name)
    )
    headers = end_to_end(incoming, (*drop, *credentials, *own))
    if authorization:
        headers["Authorization"] = authorization
    headers["X-Request-ID"] = request_id
    return headers


def client_response_headers(upstream: Mapping[str, str]) -> CIMultiDict[str]:
    """The upstream's response headers a client may receive from us (our server sets its own
    Server and Date)."""
    return end_to_end(upstream, ("server", "date"))
