"""Reading what a request references, through whole requests: uploads by id, paths, URLs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from tests.fakes.servers import ServerThread
from tests.fakes.upstream import FakeUpstream
from tests.pipeline.test_enrich import ask, sent_text

CHAT = "/v1/chat/completions"
FULL = {"strategy": "inject-full-content"}


def upload(base: str, name: str, data: bytes) -> str:
    files = {"file": (name, data), "purpose": (None, "user_data")}
    response = httpx.post(base + "/v1/files", files=files, timeout=30)
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


def test_a_file_id_is_shown_by_its_stored_name_unless_the_part_names_it(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy()
    file_id = upload(base, "minutes.txt", b"The board met on Tuesday.")
    unnamed = {"type": "input_file", "file_id": file_id}
    response = httpx.post(base + CHAT, json=ask([unnamed], enrich=FULL), timeout=30)
    assert response.status_code == 200, response.text
    assert "** minutes.txt full content **" in sent_text(upstream)
    named = {"type": "input_file", "file_id": file_id, "filename": "board.txt"}
    response = httpx.post(base + CHAT, json=ask([named], enrich=FULL), timeout=30)
    assert response.status_code == 200, response.text
    assert "** board.txt full content **" in sent_text(upstream)


def test_passages_of_an_uploaded_file_carry_its_id(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(retrieval={"chunk_tokens": 20, "chunk_overlap": 0})
    file_id = upload(base, "keeper.txt", b"The lighthouse keeper fed the cats with sardines.")
    body = ask(
        [{"type": "input_file", "file_id": file_id}],
        "Who fed the cats?",
        enrich={"strategy": "retrieval"},
    )
    response = httpx.post(base + CHAT, json=body, timeout=60)
    assert response.status_code == 200, response.text
    results = response.json()["search_results"]
    assert results and {r["file_id"] for r in results} == {file_id}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "empty.txt").write_bytes(b"")
    # documents.max_file_mb 0.001 below: int(0.001 * 1024 * 1024) = 1048 bytes at most.
    (docs / "fits.txt").write_bytes(b"a" * 1048)
    (docs / "over.txt").write_bytes(b"a" * 1049)
    return docs


def test_path_references_are_held_to_the_size_limit_and_named_when_refused(
    make_proxy: Callable[..., str], upstream: FakeUpstream, root: Path
) -> None:
    base = make_proxy(documents={"roots": {"docs": str(root)}, "max_file_mb": 0.001})

    def read(name: str) -> httpx.Response:
        body = {"messages": [{"role": "user", "content": f"Read #file:docs/{name}"}]}
        return httpx.post(base + CHAT, json=body, timeout=30)

    assert read("fits.txt").status_code == 200
    over = read("over.txt")
    assert over.status_code == 413, over.text
    assert over.json()["error"]["message"].startswith("over.txt: ")
    empty = read("empty.txt")
    assert empty.status_code == 400, empty.text
    error = empty.json()["error"]
    assert (error["message"], error["code"]) == (
        "empty.txt: the file is empty (0 bytes)",
        "empty_file",
    )


@pytest.fixture
def slow_site(servers: ServerThread) -> str:
    async def missing(request: web.Request) -> web.Response:
        return web.Response(status=404)

    async def stalled(request: web.Request) -> web.Response:
        await asyncio.sleep(3600)
        return web.Response()

    app = web.Application()
    app.router.add_get("/docs/missing.pdf", missing)
    app.router.add_get("/docs/stalled.pdf", stalled)
    return servers.serve(app)


def test_url_references_are_named_in_errors_and_time_out(
    make_proxy: Callable[..., str], upstream: FakeUpstream, slow_site: str
) -> None:
    base = make_proxy(
        documents={"allowed_url_prefixes": [slow_site + "/docs/"], "url_timeout_s": 0.5}
    )

    def read(name: str) -> dict[str, str]:
        part = {"type": "input_file", "file_url": f"{slow_site}/docs/{name}"}
        response = httpx.post(base + CHAT, json=ask([part]), timeout=30)
        assert 400 <= response.status_code < 500, response.text
        return dict(response.json()["error"])

    assert read("missing.pdf")["message"].startswith("missing.pdf: ")
    stalled = read("stalled.pdf")
    assert stalled["message"].startswith("stalled.pdf: ")
    assert stalled["code"] == "file_url_timeout"
