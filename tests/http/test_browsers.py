"""Web pages and the proxy: without keys no page of another site may drive it (plain HTTP as a
browser would send it, and a real headless Chromium); origins in server.cors_origins get CORS."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from aiohttp import web

from proxy.config import ConfigError, load_settings
from proxy.pipeline.option_layers import OPTION_HEADERS
from tests.fakes.browser import Browser
from tests.fakes.servers import ServerThread
from tests.fakes.upstream import FakeUpstream

CHAT = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
KEY = "browser-test-key-000001"
PAGE = "http://localhost:5173"  # a dev server's page, as an operator would allow it


def chats(upstream: FakeUpstream) -> int:
    return len(upstream.to("/v1/chat/completions"))


# -- without keys: plain HTTP, as a browser sends it ---------------------------------------------


def test_a_foreign_pages_simple_request_is_refused_and_never_forwarded(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy()
    raw = json.dumps(CHAT)
    # What `fetch(url, {method: "POST", body})` sends from another site: no preflight needed.
    for headers in (
        {"Origin": "https://evil.example", "Content-Type": "text/plain;charset=UTF-8"},
        {"Origin": "https://evil.example", "Content-Type": "application/json"},
        {"Origin": "null", "Content-Type": "text/plain"},  # a sandboxed frame, a file:// page
        {"Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"},
        {"Sec-Fetch-Site": "same-site", "Content-Type": "application/json"},
    ):
        answer = httpx.post(base + "/v1/chat/completions", content=raw, headers=headers)
        assert answer.status_code == 403, headers
        error = answer.json()["error"]
        assert error["code"] == "cross_origin_request" and "server.cors_origins" in error["message"]
    for path, body in (("/v1/vector_stores", "{}"), ("/v1/completions", '{"prompt": "x"}')):
        answer = httpx.post(base + path, content=body, headers={"Origin": "https://evil.example"})
        assert answer.status_code == 403
    upload = httpx.post(
        base + "/v1/files",
        files={"file": ("a.txt", b"x")},
        data={"purpose": "user_data"},
        headers={"Origin": "https://evil.example"},
    )
    assert upload.status_code == 403
    assert upstream.requests == []
    assert httpx.get(base + "/v1/files").json()["data"] == []


def test_json_routes_take_json_only(make_proxy: Callable[..., str], upstream: FakeUpstream) -> None:
    # An old browser's form (no Origin header) or `fetch` with a text body must not get in
    # either: only JSON, which a page can send elsewhere only after a preflight.
    base = make_proxy()
    raw = json.dumps(CHAT)
    for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None):
        headers = {"Content-Type": kind} if kind else {}
        answer = httpx.post(base + "/v1/chat/completions", content=raw, headers=headers)
        assert answer.status_code == 415, kind
        error = answer.json()["error"]
        assert error["code"] == "unsupported_media_type"
        assert "application/json" in error["message"]
    assert chats(upstream) == 0
    # JSON, and its +json types, are fine; so is an upload's multipart on the upload route.
    ok = httpx.post(
        base + "/v1/chat/completions", content=raw, headers={"Content-Type": "application/json"}
    )
    assert ok.status_code == 200
    uploaded = httpx.post(
        base + "/v1/files", files={"file": ("a.txt", b"x")}, data={"purpose": "user_data"}
    )
    assert uploaded.status_code == 200
    audio = httpx.post(base + "/v1/audio/transcriptions", files={"file": ("a.wav", b"RIFF")})
    assert audio.status_code == 200 and upstream.last.path == "/v1/audio/transcriptions"
    # A body-less POST (the SDK's cancel of a batch) needs no type.
    assert httpx.post(base + "/v1/vector_stores/vs_x/file_batches/b/cancel").status_code == 404


def test_the_proxys_own_pages_and_clients_without_a_browser_get_in(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy()
    host = base.removeprefix("http://")
    for headers in (
        {},  # the SDK, curl --json
        {"Origin": base, "Sec-Fetch-Site": "same-origin"},  # the /ui page's own fetch()
        {"Origin": f"https://{host}"},  # the same page behind a TLS proxy
        {"Sec-Fetch-Site": "none"},  # typed in the address bar
    ):
        assert httpx.post(base + "/v1/chat/completions", json=CHAT, headers=headers).is_success
    # The open pages may be linked from anywhere (a navigation shows them, reads nothing).
    linked = {"Sec-Fetch-Site": "cross-site", "Origin": "https://elsewhere.example"}
    assert httpx.get(base + "/healthz", headers=linked).status_code == 200
    assert httpx.get(base + "/ui", headers=linked).status_code == 200
    # Health checks and scrapers may use any name (a service name in compose, say).
    for path in ("/healthz", "/metrics"):
        assert httpx.get(base + path, headers={"Host": "proxy:8000"}).status_code == 200


def test_a_host_that_is_not_a_name_of_the_proxy_is_refused(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    # DNS rebinding: a page of rebind.example, its name now pointing at 127.0.0.1, reads
    # "its own" origin: same-origin for the browser, but its Host header names it.
    base = make_proxy(server={"allowed_hosts": ["proxy.lan", "*.corp.example"]})
    for host in ("rebind.example", "rebind.example:8000", "localhost.evil.example"):
        answer = httpx.get(base + "/v1/files", headers={"Host": host})
        assert answer.status_code == 403, host
        assert answer.json()["error"]["code"] == "host_not_allowed"
        assert httpx.get(base + "/v1/models", headers={"Host": host}).status_code == 403
    for host in (
        "127.0.0.1",
        "127.0.0.1:8000",
        "[::1]:8000",
        "10.0.0.7:8000",  # an address: a rebinding page can only send its own name
        "localhost:8000",
        "app.localhost",
        "proxy.lan:8000",
        "Proxy.LAN",
        "ai.corp.example",
    ):
        assert httpx.get(base + "/v1/files", headers={"Host": host}).status_code == 200, host
    assert upstream.to("/v1/models") == []  # the refused ones never went upstream


def test_a_rebinding_page_cannot_read_the_open_pages(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    # A page of rebind.example, its name rebound to 127.0.0.1, fetching "its own" /healthz and
    # /metrics: same-origin for the browser, its own name in Host.
    base = make_proxy(server={"allowed_hosts": ["proxy.lan"]})
    for path in ("/healthz", "/metrics", "/ui"):
        for host in ("rebind.example", "rebind.example:8000", "127.0.0.1.nip.io:8000"):
            answer = httpx.get(base + path, headers={"Host": host})
            assert answer.status_code == 403, (path, host)
            assert answer.json()["error"]["code"] == "host_not_allowed"
        # Names of the proxy, and names only the local network resolves (no page of the
        # Internet is served under them), still read them: a compose service, the machine,
        # `.local`, `.internal`, `.home.arpa`.
        for host in (
            "127.0.0.1:8000",
            "localhost",
            "proxy.lan",
            "enrich-proxy:8000",
            socket.gethostname(),
            "box.local",
            "gpu.internal:8000",
            "nas.home.arpa",
        ):
            assert httpx.get(base + path, headers={"Host": host}).status_code == 200, (path, host)
    # With keys the checks step aside: a health check may use any name.
    keyed = make_proxy(server={"api_keys": [KEY]})
    assert httpx.get(keyed + "/healthz", headers={"Host": "rebind.example"}).status_code == 200


def test_keys_stop_pages_themselves(make_proxy: Callable[..., str], upstream: FakeUpstream) -> None:
    # A page cannot know a key: with keys, the browser checks step aside (a scripted client
    # that has the key may send what it likes).
    base = make_proxy(server={"api_keys": [KEY]})
    page = {"Origin": "https://evil.example", "Content-Type": "text/plain", "Host": "x.example"}
    assert httpx.post(base + "/v1/chat/completions", json=CHAT, headers=page).status_code == 401
    keyed = {**page, "Authorization": f"Bearer {KEY}"}
    answer = httpx.post(base + "/v1/chat/completions", content=json.dumps(CHAT), headers=keyed)
    assert answer.status_code == 200


def test_the_listen_address_is_a_name_of_the_proxy() -> None:
    from proxy.http.browsers import BrowserPolicy

    settings = load_settings(None, environ={}, overrides={"server": {"host": "gpu-box.lan"}})
    policy = BrowserPolicy.of(settings.server)
    assert policy.host_allowed("gpu-box.lan:8000") and not policy.host_allowed("other.lan")
    with pytest.raises(ConfigError, match="allowed_hosts"):
        load_settings(None, environ={}, overrides={"server": {"allowed_hosts": ["http://x"]}})
    with pytest.raises(ConfigError, match="cors_origins"):
        load_settings(None, environ={}, overrides={"server": {"cors_origins": ["*"]}})
    with pytest.raises(ConfigError, match="cors_origins"):
        load_settings(None, environ={}, overrides={"server": {"cors_origins": ["https://a/x"]}})


# -- CORS ----------------------------------------------------------------------------------------


def test_a_preflight_from_an_allowed_origin_is_answered_and_never_forwarded(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(server={"cors_origins": [PAGE]})
    for path in ("/v1/chat/completions", "/v1/models", "/v1/responses", "/v1/files"):
        answer = httpx.options(
            base + path,
            headers={
                "Origin": PAGE,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": (
                    "authorization,content-type,x-enrich-strategy,x-stainless-os,"
                    "x-stainless-retry-count,openai-organization"
                ),
                "Access-Control-Request-Private-Network": "true",
            },
        )
        assert answer.status_code == 204, path
        headers = answer.headers
        assert headers["Access-Control-Allow-Origin"] == PAGE
        allowed = {h.strip().lower() for h in headers["Access-Control-Allow-Headers"].split(",")}
        assert {
            "authorization",
            "content-type",
            "x-enrich-strategy",
            "x-enrich-vector-stores",
            "x-stainless-os",
            "x-stainless-retry-count",
            "openai-organization",
        } <= allowed
        assert {"GET", "POST", "DELETE"} <= set(headers["Access-Control-Allow-Methods"].split(", "))
        assert "Origin" in headers["Vary"]
        assert headers["Access-Control-Allow-Private-Network"] == "true"
        assert int(headers["Access-Control-Max-Age"]) > 0
    other = httpx.options(
        base + "/v1/chat/completions",
        headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert other.status_code == 403 and "Access-Control-Allow-Origin" not in other.headers
    assert [r.method for r in upstream.requests] == []


def test_the_preflight_allows_every_option_header(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(server={"cors_origins": [PAGE]})
    answer = httpx.options(
        base + "/v1/chat/completions",
        headers={
            "Origin": PAGE,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": ",".join(OPTION_HEADERS),
        },
    )
    assert answer.status_code == 204
    allowed = {h.strip().lower() for h in answer.headers["Access-Control-Allow-Headers"].split(",")}
    assert set(OPTION_HEADERS) <= allowed, set(OPTION_HEADERS) - allowed
    assert "x-enrich-images" in allowed


def test_answers_to_an_allowed_origin_carry_cors_and_no_upstream_cors_passes(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    # llama-server answers with CORS headers of its own (an empty one, in the case).
    upstream.response_headers = {
        "Access-Control-Allow-Origin": "",
        "Access-Control-Allow-Credentials": "true",
        "Vary": "Accept-Encoding",
    }
    closed = make_proxy()
    models = httpx.get(closed + "/v1/models")
    assert models.status_code == 200
    assert not [name for name in models.headers if name.lower().startswith("access-control-")]

    base = make_proxy(server={"cors_origins": [PAGE]})
    for answer in (
        httpx.get(base + "/v1/models", headers={"Origin": PAGE}),
        httpx.post(base + "/v1/chat/completions", json=CHAT, headers={"Origin": PAGE}),
        httpx.get(base + "/v1/files/file-nothing", headers={"Origin": PAGE}),  # errors too
    ):
        assert answer.headers["Access-Control-Allow-Origin"] == PAGE
        assert "Access-Control-Allow-Credentials" not in answer.headers
        exposed = answer.headers["Access-Control-Expose-Headers"]
        assert "X-Request-ID" in exposed and "X-Enrich-Sources" in exposed
        assert "Origin" in answer.headers["Vary"]
    assert (
        "Accept-Encoding"
        in httpx.get(base + "/v1/models", headers={"Origin": PAGE}).headers["Vary"]
    )
    # Every other origin stays closed: no CORS header (the browser hides the answer) and,
    # without keys, not even an answer.
    other = httpx.get(base + "/v1/models", headers={"Origin": "https://evil.example"})
    assert other.status_code == 403
    assert not [name for name in other.headers if name.lower().startswith("access-control-")]
    assert "Origin" in other.headers["Vary"]


# -- a real browser ------------------------------------------------------------------------------


def page_site(servers: ServerThread) -> str:
    """A page of another site: served on `localhost` while the proxy is on 127.0.0.1."""

    async def page(request: web.Request) -> web.Response:
        return web.Response(
            text="<!doctype html><title>another site</title>", content_type="text/html"
        )

    app = web.Application()
    app.router.add_get("/", page)
    return servers.serve(app).replace("127.0.0.1", "localhost")


def fetch_js(url: str, init: dict[str, Any]) -> str:
    """fetch() from the page: the status, a header a page may read only if exposed, the body;
    or the error a refused request raises."""
    return (
        f"fetch({json.dumps(url)}, {json.dumps(init)})"
        ".then(async r => ({status: r.status, request_id: r.headers.get('X-Request-ID'),"
        " body: await r.text()}))"
        ".catch(e => ({error: String(e)}))"
    )


def sdk_init(body: dict[str, Any], key: str = "sk-unused") -> dict[str, Any]:
    """What the openai JS SDK (dangerouslyAllowBrowser) sends."""
    return {
        "method": "POST",
        "body": json.dumps(body),
        "headers": {
            "Authorization": f"Bearer {key}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            "X-Stainless-Lang": "js",
            "X-Stainless-OS": "Unknown",
            "X-Stainless-Runtime": "browser:chrome",
            "X-Stainless-Retry-Count": "0",
            "X-Enrich-Strategy": "auto",
        },
    }


async def test_a_page_of_another_site_cannot_drive_the_proxy(
    make_proxy: Callable[..., str], upstream: FakeUpstream, servers: ServerThread, browser: Browser
) -> None:
    base = await asyncio.to_thread(make_proxy)
    site = await asyncio.to_thread(page_site, servers)
    await browser.goto(site + "/")
    refused = await browser.eval(fetch_js(base + "/v1/chat/completions", sdk_init(CHAT)))
    assert "error" in refused and "Failed to fetch" in refused["error"]
    # Without a preflight: a text body sent blind (no-cors), as a form would.
    blind = {"method": "POST", "mode": "no-cors", "body": json.dumps(CHAT)}
    sent = await browser.eval(fetch_js(base + "/v1/chat/completions", blind))
    assert sent["status"] == 0  # opaque: the page learns nothing, and the proxy did nothing
    upload = (
        "(() => { const form = new FormData(); form.append('purpose', 'user_data');"
        " form.append('file', new Blob(['secret']), 'a.txt');"
        f" return fetch({json.dumps(base + '/v1/files')},"
        " {method: 'POST', mode: 'no-cors', body: form}).then(r => r.status); })()"
    )
    assert await browser.eval(upload) == 0
    assert chats(upstream) == 0
    assert httpx.get(base + "/v1/files").json()["data"] == []


async def test_a_page_of_an_allowed_origin_calls_the_proxy_like_the_sdk(
    make_proxy: Callable[..., str], upstream: FakeUpstream, servers: ServerThread, browser: Browser
) -> None:
    site = await asyncio.to_thread(page_site, servers)
    base = await asyncio.to_thread(make_proxy, server={"cors_origins": [site], "api_keys": [KEY]})
    await browser.goto(site + "/")
    answer = await browser.eval(fetch_js(base + "/v1/chat/completions", sdk_init(CHAT, KEY)))
    assert answer.get("status") == 200, answer
    assert json.loads(answer["body"])["choices"][0]["message"]["content"]
    assert answer["request_id"]  # exposed to the page
    models = await browser.eval(
        fetch_js(base + "/v1/models", {"headers": {"Authorization": f"Bearer {KEY}"}})
    )
    assert models["status"] == 200 and "fake-model" in models["body"]
    wrong = await browser.eval(fetch_js(base + "/v1/chat/completions", sdk_init(CHAT, "bad")))
    assert wrong["status"] == 401  # the page reads the error, as the SDK would
    assert not [r for r in upstream.requests if r.method == "OPTIONS"]
