"""Ids meet a pattern before anything else (never the file system), and option headers the
proxy does not know are refused, known or not never forwarded."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream

HOSTILE_IDS = ["%00", "x" * 5000, "..%2f..%2fetc", "vs_%00", "file-%2e%2e"]
STORE = "vs_" + "0" * 24
FILE = "file-" + "0" * 24
BATCH = "vsfb_" + "0" * 24

# Valid bodies, so that only the id can be wrong.
BODIES = {
    "/v1/vector_stores/{}/search": {"query": "x"},
    "/v1/vector_stores/{}/files": {"file_id": FILE},
    "/v1/vector_stores/{}/file_batches": {"file_ids": [FILE]},
    f"/v1/vector_stores/{STORE}/files/{{}}": {"attributes": {}},
}
# Every route with an id in it, the id marked {}; each with the method it answers.
ID_ROUTES = [
    ("GET", "/v1/files/{}"),
    ("GET", "/v1/files/{}/content"),
    ("DELETE", "/v1/files/{}"),
    ("GET", "/v1/vector_stores/{}"),
    ("POST", "/v1/vector_stores/{}"),
    ("DELETE", "/v1/vector_stores/{}"),
    ("POST", "/v1/vector_stores/{}/search"),
    ("GET", "/v1/vector_stores/{}/files"),
    ("POST", "/v1/vector_stores/{}/files"),
    ("POST", "/v1/vector_stores/{}/file_batches"),
    ("GET", f"/v1/vector_stores/{STORE}/files/{{}}"),
    ("POST", f"/v1/vector_stores/{STORE}/files/{{}}"),
    ("DELETE", f"/v1/vector_stores/{STORE}/files/{{}}"),
    ("GET", f"/v1/vector_stores/{STORE}/files/{{}}/content"),
    ("GET", f"/v1/vector_stores/{STORE}/file_batches/{{}}"),
    ("POST", f"/v1/vector_stores/{STORE}/file_batches/{{}}/cancel"),
    ("GET", f"/v1/vector_stores/{STORE}/file_batches/{{}}/files"),
    ("GET", "/v1/responses/{}"),
    ("DELETE", "/v1/responses/{}"),
    ("GET", "/v1/conversations/{}"),
]


def test_every_id_route_answers_a_hostile_id_with_a_4xx(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy()
    # A store of the caller's own, so that the routes under it get as far as the file's id.
    created = httpx.post(base + "/v1/vector_stores", json={"name": "s"}, timeout=30)
    own = created.json()["id"]
    with httpx.Client(timeout=30) as client:
        for method, route in ID_ROUTES:
            for ident in HOSTILE_IDS:
                path = route.replace(STORE, own).format(ident)
                body = BODIES.get(route, {}) if method == "POST" else None
                answer = client.request(method, base + path, json=body)
                assert answer.status_code == 404, (method, path[:80], answer.text[:200])
                assert answer.json()["error"]["message"]
    assert not [r for r in upstream.requests if r.path.startswith("/v1/files")]


def test_a_store_files_id_is_checked_before_the_disk_is_asked(
    make_proxy: Callable[..., str],
) -> None:
    base = make_proxy()
    own = httpx.post(base + "/v1/vector_stores", json={"name": "s"}, timeout=30).json()["id"]
    for ident in ("%00", "f" * 5000):
        answer = httpx.get(f"{base}/v1/vector_stores/{own}/files/{ident}", timeout=30)
        assert answer.status_code == 404
        assert answer.json()["error"]["code"] == "file_not_found"


def test_an_unknown_option_header_is_a_400_naming_it_and_the_known_ones(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy()
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    for path, payload in (("/v1/chat/completions", body), ("/v1/completions", {"prompt": "x"})):
        answer = httpx.post(
            base + path, json=payload, headers={"X-Enrich-Stratgy": "retrieval"}, timeout=30
        )
        assert answer.status_code == 400
        error = answer.json()["error"]
        assert error["param"] == "X-Enrich-Stratgy"
        assert "did you mean `X-Enrich-Strategy`?" in error["message"]
        answer = httpx.post(base + path, json=payload, headers={"X-Enrich-Zz": "1"}, timeout=30)
        assert answer.status_code == 400  # no name is close: the known ones, all of them
        message = answer.json()["error"]["message"]
        assert "X-Enrich-Strategy" in message and "X-Enrich-Citations" in message
    assert upstream.requests == []


def test_an_option_header_sent_twice_is_a_400_naming_it(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy()
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    for path, payload in (
        ("/v1/chat/completions", body),
        ("/v1/enrich/preview", body),
        ("/v1/responses", {"model": "m", "input": "hi"}),
        ("/v1/completions", {"prompt": "x"}),
    ):
        for first, second in (
            ("X-Enrich-Strategy", "X-Enrich-Strategy"),
            ("X-Enrich-Citations", "x-enrich-citations"),  # one name, in another case
        ):
            headers = [(first, "none"), (second, "inline"), ("Content-Type", "application/json")]
            answer = httpx.post(base + path, content=json.dumps(payload), headers=headers)
            assert answer.status_code == 400, (path, answer.text)
            error = answer.json()["error"]
            assert error["code"] == "duplicate_option_header"
            assert error["param"] == first and "more than once" in error["message"]
    assert upstream.requests == []
    once = [("X-Enrich-Strategy", "none"), ("X-Enrich-Citations", "inline")]
    assert httpx.post(base + "/v1/chat/completions", json=body, headers=once).status_code == 200


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/models", "/tokenize"])
def test_option_headers_never_go_upstream(
    make_proxy: Callable[..., str], upstream: FakeUpstream, path: str
) -> None:
    base = make_proxy()
    headers = {"X-Enrich-Strategy": "retrieval", "X-Enrich-Citations": "inline"}
    if path == "/v1/models":
        httpx.get(base + path, headers=headers, timeout=30)
    else:
        httpx.post(base + path, json={"content": "x", "prompt": "x"}, headers=headers, timeout=30)
    sent = upstream.last_to(path).headers
    assert not [name for name in sent if name.lower().startswith("x-enrich-")]
