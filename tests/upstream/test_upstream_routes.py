"""Only an allow-list of upstream routes is forwarded: the stateless OpenAI surface, the
read-only endpoints of llama.cpp and vLLM, and those of the other kinds of server that say what
the model is, its window and its token counts. Admin routes are refused (a 404 that never reaches
the upstream) unless upstream.admin_routes names them, and then only for admin keys."""

from __future__ import annotations

import socket
from collections.abc import Callable

import httpx
import pytest

from proxy.upstream.routes import UpstreamRoutes
from tests.fakes.upstream import FakeUpstream

KEY = "team-a-routes-key-0001"
ADMIN = "operator-routes-key-002"
KEYS = [{"name": "team-a", "key": KEY}, {"name": "ops", "key": ADMIN, "admin": True}]

# Admin routes of llama.cpp's server (tools/server/server.cpp) and vLLM's API server.
ADMIN_ROUTES = [
    ("GET", "/slots"),
    ("POST", "/slots/0?action=erase"),
    ("POST", "/slots/0?action=save"),
    ("POST", "/props"),
    ("POST", "/lora-adapters"),
    ("GET", "/metrics"),  # the proxy's own, never the upstream's
    ("POST", "/reset_prefix_cache"),
    ("POST", "/v1/load_lora_adapter"),
    ("POST", "/v1/unload_lora_adapter"),
    ("POST", "/sleep?level=1"),
    ("POST", "/wake_up"),
    ("POST", "/collective_rpc"),
    ("POST", "/pause"),
    ("POST", "/start_profile"),
    ("GET", "/server_info"),
    # Stateful OpenAI routes: their ids would be shared by every key.
    ("POST", "/v1/batches"),
    ("GET", "/v1/fine_tuning/jobs"),
    ("POST", "/v1/assistants"),
    ("OPTIONS", "/v1/completions"),
    # The other kinds of server: their admin routes, model loading, generation under their own
    # names (Ollama's takes keep_alive and num_ctx, which unload or reload the model for every
    # caller), and what shows another caller's generation.
    ("POST", "/api/pull"),
    ("POST", "/api/create"),
    ("DELETE", "/api/delete"),
    ("POST", "/api/copy"),
    ("POST", "/api/push"),
    ("POST", "/api/blobs/sha256:0123"),
    ("POST", "/api/chat"),
    ("POST", "/api/generate"),
    ("POST", "/api/embed"),
    ("GET", "/api/extra/generate/check"),
    ("POST", "/api/extra/generate/check"),
    ("GET", "/api/extra/last_logprobs"),
    ("POST", "/api/extra/abort"),
    ("GET", "/api/extra/perf"),
    ("POST", "/api/v1/generate"),
    ("POST", "/v1/model/load"),
    ("POST", "/v1/model/unload"),
    ("POST", "/v1/internal/model/load"),
    ("POST", "/v1/internal/model/unload"),
    ("POST", "/v1/internal/stop-generation"),
    ("POST", "/v1/internal/logits"),
    ("GET", "/get_server_info"),
    ("POST", "/flush_cache"),
    ("POST", "/update_weights_from_disk"),
    ("POST", "/api/v1/models/load"),
    ("POST", "/api/v1/models/download"),
    ("POST", "/generate"),
    ("POST", "/generate_stream"),
]
READ_ONLY = [
    ("GET", "/props"),
    ("POST", "/tokenize"),
    ("POST", "/detokenize"),
    ("POST", "/apply-template"),
    ("GET", "/health"),
    ("GET", "/v1/models"),
    ("GET", "/v1/models/fake-model"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/embeddings"),
    ("POST", "/v1/rerank"),
    ("GET", "/version"),
    # What the proxy itself reads of the other kinds (docs/upstreams.md): their name,
    # model, window and token counts.
    ("GET", "/.well-known/serviceinfo"),
    ("GET", "/get_model_info"),
    ("GET", "/api/version"),
    ("GET", "/api/tags"),
    ("POST", "/api/show"),
    ("GET", "/api/ps"),
    ("GET", "/api/v0/models"),
    ("GET", "/api/v0/models/qwen2.5-7b-instruct"),
    ("GET", "/api/v1/models"),
    ("GET", "/info"),
    ("POST", "/chat_tokenize"),
    ("GET", "/api/extra/version"),
    ("GET", "/api/extra/true_max_context_length"),
    ("POST", "/api/extra/tokencount"),
    ("GET", "/api/v1/model"),
    ("GET", "/api/v1/config/max_context_length"),
    ("GET", "/v1/model"),
    ("POST", "/v1/token/encode"),
    ("POST", "/v1/token/decode"),
    ("GET", "/v1/internal/model/info"),
    ("POST", "/v1/internal/token-count"),
    ("POST", "/v1/internal/encode"),
    ("POST", "/v1/internal/decode"),
    ("POST", "/v1/internal/chat-prompt"),
    ("POST", "/extras/tokenize"),
    ("POST", "/extras/tokenize/count"),
    ("POST", "/extras/detokenize"),
]
TRICKS = [
    "/v1/models/../slots",
    "/v1/models/%2e%2e/slots",
    "/props/..%2fslots",
    "/tokenize%2f..%2fslots",
    "/props\\..\\slots",
]


def call(base: str, method: str, path: str, key: str = KEY) -> httpx.Response:
    body = {"content": "x", "prompt": "x", "tokens": [1], "messages": []}
    return httpx.request(
        method,
        base + path,
        json=body if method == "POST" else None,
        headers={"Authorization": f"Bearer {key}"},
    )


def test_admin_routes_are_refused_and_never_forwarded(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(server={"api_keys": KEYS})
    for method, path in ADMIN_ROUTES:
        for key in (KEY, ADMIN):  # an admin key too: nothing is named in admin_routes
            answer = call(base, method, path, key)
            if path == "/metrics":  # the proxy's own
                assert answer.text.startswith("# HELP proxy_")
                continue
            assert answer.status_code == 404, (method, path, answer.status_code)
            assert answer.json()["error"]["code"] == "route_not_forwarded"
    assert upstream.requests == []


def test_read_only_routes_and_the_openai_surface_are_forwarded(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(server={"api_keys": KEYS})
    for method, path in READ_ONLY:
        answer = call(base, method, path)
        assert (
            answer.status_code < 400 or answer.json()["error"].get("code") != "route_not_forwarded"
        ), path
        assert upstream.last.path == path.partition("?")[0], path


def test_paths_that_could_turn_into_another_route_are_refused(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(server={"api_keys": KEYS})
    with httpx.Client() as client:
        for path in TRICKS:
            request = client.build_request(
                "GET", base + path, headers={"Authorization": f"Bearer {KEY}"}
            )
            request.url = httpx.URL(base + path)  # sent as written
            answer = client.send(request)
            assert answer.status_code in (400, 404), path
        # Dot segments as written (an HTTP client would resolve them before sending).
        for path in ("/v1/models/../../slots", "/v1/models/./../props"):
            assert raw_status(base, f"POST {path} HTTP/1.1") == 404, path
    assert not [r for r in upstream.requests if "slots" in r.path or r.method == "POST"]


def raw_status(base: str, request_line: str) -> int:
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            f"{request_line}\r\nHost: {host}\r\nAuthorization: Bearer {KEY}\r\n"
            "Content-Length: 0\r\nConnection: close\r\n\r\n".encode()
        )
        reply = sock.makefile("rb").readline()
    return int(reply.split()[1])


def test_admin_routes_named_by_the_operator_are_for_admin_keys_only(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(
        server={"api_keys": KEYS},
        upstream={
            "admin_routes": ["GET /slots", "POST /slots/*"],
            "allowed_routes": ["/v1/rerank-x"],
        },
    )
    refused = call(base, "GET", "/slots", KEY)
    unknown = call(base, "GET", "/nowhere", KEY)
    assert refused.status_code == unknown.status_code == 404
    # A key cannot tell a route opened to admins from one that is not forwarded at all.
    assert refused.json()["error"]["message"].replace("/slots", "") == unknown.json()["error"][
        "message"
    ].replace("/nowhere", "")
    assert call(base, "POST", "/slots/0?action=erase", KEY).status_code == 404
    assert upstream.requests == []
    assert call(base, "GET", "/slots", ADMIN).status_code == 200
    assert call(base, "POST", "/slots/0?action=erase", ADMIN).status_code == 200
    assert upstream.last.query == "action=erase"
    assert call(base, "POST", "/slots", ADMIN).status_code == 404  # the method is named too
    assert call(base, "POST", "/v1/rerank-x", KEY).status_code == 200  # allowed for every key


def test_without_keys_there_is_no_admin() -> None:
    routes = UpstreamRoutes([], ["GET /slots"])
    assert not routes.forwarded("GET", "/slots", "/slots", admin=False)
    assert routes.forwarded("GET", "/slots", "/slots", admin=True)
    assert routes.forwarded("HEAD", "/props", "/props", admin=False)
    assert not routes.forwarded("POST", "/props", "/props", admin=False)
    assert not routes.forwarded("GET", "/slots/0", "/slots/0", admin=True)


@pytest.mark.parametrize("entry", ["slots", "GET slots", "G3T /slots", ""])
def test_a_route_entry_must_be_a_path(entry: str) -> None:
    from proxy.config import ConfigError, load_settings

    with pytest.raises(ConfigError, match="admin_routes"):
        load_settings(None, environ={}, overrides={"upstream": {"admin_routes": [entry]}})
