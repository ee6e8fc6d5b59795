"""Web pages and the proxy: without keys no page may drive it; named origins get CORS.

A page in a browser can send requests to any address, the loopback one included: a form or a
`fetch()` with a "simple" content type (`text/plain`, form data) needs no preflight, and DNS
rebinding makes a page's own name point at 127.0.0.1. Without `server.api_keys` nothing else
stands between such a page and the proxy, so requests a browser marks as coming from another
site (`Origin`, `Sec-Fetch-Site`), a `Host` that is not a name of the proxy, and JSON routes
sent anything but JSON are refused. With `server.cors_origins`, the pages of those origins are
let in the way the Fetch standard expects: preflights answered, the origin echoed.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from proxy.config import ServerSettings, origin_of
from proxy.errors import ProxyError
from proxy.pipeline.option_layers import HEADER_NAMES

# Request headers a page may send (the Fetch standard wants Authorization named, a wildcard
# does not cover it): ours, OpenAI's, and what the openai JS SDK adds (`x-stainless-*`, taken
# as asked, since new SDK versions add new ones).
ALLOWED_HEADERS = (
    "Authorization",
    "Content-Type",
    "Accept",
    "X-Api-Key",
    "X-Request-ID",
    *HEADER_NAMES.values(),  # every option header, from the list the options stage reads
    "OpenAI-Organization",
    "OpenAI-Project",
    "OpenAI-Beta",
    "Idempotency-Key",
)
SDK_HEADER_PREFIX = "x-stainless-"
ALLOWED_METHODS = "GET, HEAD, POST, DELETE"
# Response headers a page may read: what the proxy reports, and what the SDK reads.
EXPOSED_HEADERS = ", ".join(
    (
        "X-Request-ID",
        "X-Enrich-Strategy",
        "X-Enrich-Tokens",
        "X-Enrich-Citations",
        "X-Enrich-Sources",
        "X-Enrich-Index-Ready",
        "X-Enrich-Guard-Changes",
        "X-Enrich-Dropped-Messages",
        "X-Enrich-Warnings",
        "X-Enrich-Searched",
        "X-Enrich-Rewrite",
        "openai-poll-after-ms",
        "Retry-After",
        "retry-after-ms",
        "x-should-retry",
    )
)
PREFLIGHT_MAX_AGE_S = 600
# Routes whose bodies are uploads, not JSON.
MULTIPART_ROUTES = frozenset({"/v1/files", "/v1/audio/transcriptions", "/v1/audio/translations"})
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CROSS_SITE = frozenset({"cross-site", "same-site"})
LOCAL_SUFFIXES = (".local", ".internal", ".home.arpa")


def host_name(host: str) -> str:
    """The name in a Host header, without its port: `[::1]:8000` → `::1`."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def is_ip_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class BrowserPolicy:
    """What `server.*` says about browsers; the decisions are pure functions of headers."""

    guarded: bool  # no keys: the checks below apply
    names: frozenset[str]  # host names besides loopback names and IP addresses
    suffixes: tuple[str, ...]  # `*.example.com` entries, as `.example.com`
    cors_origins: frozenset[str]
    machine: str = ""  # this machine's host name, lower case

    @classmethod
    def of(cls, server: ServerSettings) -> BrowserPolicy:
        names = {name for name in server.allowed_hosts if not name.startswith("*.")}
        suffixes = tuple(name[1:] for name in server.allowed_hosts if name.startswith("*."))
        listen = host_name(server.host)
        if listen and not is_ip_address(listen):
            names.add(listen.rstrip("."))
        return cls(
            guarded=not server.api_keys,
            names=frozenset(names),
            suffixes=suffixes,
            cors_origins=frozenset(server.cors_origins),
            machine=socket.gethostname().lower().rstrip("."),
        )

    def host_allowed(self, host: str | None) -> bool:
        """A name of the proxy: loopback names, any IP address (a rebinding page can only
        send its own name), the listen address, `server.allowed_hosts`."""
        if not host:
            return True  # HTTP/1.0 without Host: not a browser
        name = host_name(host).rstrip(".")
        if is_ip_address(name) or name == "localhost" or name.endswith(".localhost"):
            return True
        return name in self.names or name.endswith(self.suffixes)

    def allowed_origin(self, headers: Mapping[str, str]) -> str | None:
        """The request's Origin when `server.cors_origins` names it."""
        origin = headers.get("Origin")
        return origin if origin is not None and origin in self.cors_origins else None

    def local_name(self, host: str | None) -> bool:
        """A name of the proxy, or one only the local network resolves — no page of the
        Internet can be served under it to rebind it: one label (a compose service, a short
        host name), the machine's own name, or a name under a suffix no registry delegates
        (as Ollama's allowed hosts: `.local`, `.internal`; and RFC 8375's `.home.arpa`)."""
        if self.host_allowed(host):
            return True
        assert host
        name = host_name(host).rstrip(".")
        return "." not in name or name == self.machine or name.endswith(LOCAL_SUFFIXES)

    def refusal(
        self, method: str, path: str, headers: Mapping[str, str], *, has_body: bool, open_path: bool
    ) -> ProxyError | None:
        """Why the request must not be served (only without keys), or None."""
        if not self.guarded:
            return None
        host = headers.get("Host")
        if open_path:
            # The open pages (health, metrics, /ui's files) may be linked from any page (a
            # navigation reads nothing) and scraped by a name of the local network; a page whose
            # Internet name was rebound to this address may not read them.
            return None if self.local_name(host) else host_not_allowed(host)
        if not self.host_allowed(host):
            return host_not_allowed(host)
        if self.allowed_origin(headers) is not None:
            return None
        origin = headers.get("Origin")
        if origin is not None and origin_of(origin) not in own_origins(host):
            return cross_site(f"a web page of {origin!r}")
        if headers.get("Sec-Fetch-Site", "").lower() in CROSS_SITE:
            return cross_site("a web page of another site")
        if method in BODY_METHODS and has_body and not json_body(path, headers):
            return ProxyError(
                f"this route takes JSON: send Content-Type: application/json (curl: --json), not"
                f" {headers.get('Content-Type') or 'no Content-Type'}; without server.api_keys"
                " other types are refused, as web pages can send them to any address",
                status=415,
                type="invalid_request_error",
                code="unsupported_media_type",
            )
        return None

    def preflight(self, headers: Mapping[str, str]) -> dict[str, str] | None:
        """The headers answering a CORS preflight from an allowed origin, else None."""
        origin = self.allowed_origin(headers)
        if origin is None:
            return None
        asked = [
            name.strip()
            for name in headers.get("Access-Control-Request-Headers", "").split(",")
            if name.strip().lower().startswith(SDK_HEADER_PREFIX)
        ]
        answer = {
            "Access-Control-Allow-Origin": origin,
            "Access-Control-Allow-Methods": ALLOWED_METHODS,
            "Access-Control-Allow-Headers": ", ".join((*ALLOWED_HEADERS, *asked)),
            "Access-Control-Max-Age": str(PREFLIGHT_MAX_AGE_S),
            "Vary": "Origin, Access-Control-Request-Headers",
        }
        # Chrome's Private Network Access: a public page calling a loopback address asks first.
        if headers.get("Access-Control-Request-Private-Network", "").lower() == "true":
            answer["Access-Control-Allow-Private-Network"] = "true"
        return answer

    def response_headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        """CORS headers for an answer to a page of an allowed origin (errors included, so the
        page can read them)."""
        origin = self.allowed_origin(headers)
        if origin is None:
            return {"Vary": "Origin"} if self.cors_origins else {}
        return {
            "Access-Control-Allow-Origin": origin,
            "Access-Control-Expose-Headers": EXPOSED_HEADERS,
            "Vary": "Origin",
        }


def is_preflight(method: str, headers: Mapping[str, str]) -> bool:
    return (
        method == "OPTIONS" and "Origin" in headers and "Access-Control-Request-Method" in headers
    )


def own_origins(host: str | None) -> set[str | None]:
    """The origins of pages served under the request's own Host (plain or behind TLS)."""
    if not host:
        return set()
    return {origin_of(f"http://{host}"), origin_of(f"https://{host}")} - {None}


def json_body(path: str, headers: Mapping[str, str]) -> bool:
    kind = headers.get("Content-Type", "").partition(";")[0].strip().lower()
    if kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json")):
        return True
    return kind == "multipart/form-data" and path in MULTIPART_ROUTES


def host_not_allowed(host: str | None) -> ProxyError:
    return ProxyError(
        f"Host {host!r} is not a name of this proxy; an operator adds the names it is"
        " reached by to server.allowed_hosts (this refusal stops DNS rebinding)",
        status=403,
        type="permission_error",
        code="host_not_allowed",
    )


def cross_site(who: str) -> ProxyError:
    return ProxyError(
        f"{who} may not call this proxy: it has no server.api_keys, so any page could; an"
        " operator lets a page's origin in with server.cors_origins",
        status=403,
        type="permission_error",
        code="cross_origin_request",
    )
