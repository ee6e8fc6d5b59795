"""Headers that reroute a request — its real URL, method or client, as a proxy in front would
say them — never reach the upstream from a client, on any route; every other end-to-end header
still does (gateways rely on ones no list can know)."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from proxy.upstream.headers import is_routing
from tests.fakes.upstream import FakeUpstream

ROUTING = {
    "X-Original-URL": "/admin/slots",
    "X-Rewrite-URL": "/slots",
    "X-Original-Method": "DELETE",
    "X-HTTP-Method-Override": "DELETE",
    "X-HTTP-Method": "DELETE",
    "X-Method-Override": "PUT",
    "X-Forwarded-For": "10.0.0.1",
    "X-Forwarded-Host": "admin.internal",
    "X-Forwarded-Proto": "https",
    "X-Forwarded-Prefix": "/admin",
    "X-Forwarded-Port": "443",
    "Forwarded": "for=10.0.0.1;host=admin.internal;proto=https",
    "X-Real-IP": "10.0.0.1",
    "True-Client-IP": "10.0.0.1",
    "CF-Connecting-IP": "10.0.0.1",
    "X-Envoy-Original-Path": "/admin",
    "X-Middleware-Subrequest": "middleware",
}
# What clients and gateways send that must still pass.
KEPT = {
    "OpenAI-Beta": "assistants=v2",
    "HTTP-Referer": "https://app.example",
    "X-Title": "My app",
    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "X-Custom-Gateway-Tag": "blue",
}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/chat/completions", CHAT),
        ("POST", "/v1/responses", {"model": "m", "input": "Hi"}),
        ("POST", "/v1/completions", {"prompt": "Hi"}),
        ("POST", "/v1/embeddings", {"input": "Hi"}),
        ("GET", "/v1/models", None),
    ],
)
def test_routing_headers_never_reach_the_upstream(
    make_proxy: Callable[..., str], upstream: FakeUpstream, method: str, path: str, body: object
) -> None:
    base = make_proxy()
    answer = httpx.request(method, base + path, json=body, headers={**ROUTING, **KEPT}, timeout=30)
    assert answer.is_success, answer.text[:300]
    upstream_path = "/v1/chat/completions" if path == "/v1/responses" else path
    sent = upstream.last_to(upstream_path).headers
    assert not [name for name in sent if name.lower() in {n.lower() for n in ROUTING}]
    assert not [name for name in sent if name.lower().startswith("x-forwarded")]
    for name, value in KEPT.items():
        assert sent.get(name) == value, name


def test_the_family_is_matched_by_name_and_prefix_in_any_case() -> None:
    for name in (*ROUTING, "x-forwarded-ssl", "X-FORWARDED-SERVER", "x-original-host"):
        assert is_routing(name), name
    for name in (*KEPT, "Authorization", "Content-Type", "X-Request-ID", "Accept-Encoding"):
        assert not is_routing(name), name
