"""What clients without body fields get: header options, inline sources, model aliases, names."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest
from aiohttp import web

from tests.fakes.servers import ServerThread
from tests.fakes.upstream import ANSWER, FakeUpstream
from tests.pipeline.test_enrich import ask, pdf_bytes, pdf_part, sent_text, text_part

PAGES = [
    "The lighthouse keeper fed the cats every morning with fresh sardines.",
    "Quantum chromodynamics describes the strong interaction between quarks and gluons.",
]
SMALL_CHUNKS = {"chunk_tokens": 20, "chunk_overlap": 0}
HEADERS = {
    "X-Enrich-Strategy": "retrieval",
    "X-Enrich-Affinity-Threshold": "0.2",
    "X-Enrich-Citations": "inline",
}
SHA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
TEXT = "".join(ANSWER)


def sdk(base: str, **headers: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0, default_headers=headers)


def question(*parts: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": [{"type": "text", "text": "What did the cats eat?"}, *parts]}
    ]


def test_header_options_and_inline_sources_in_json(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(retrieval=SMALL_CHUNKS)
    raw = sdk(base, **HEADERS).chat.completions.with_raw_response.create(
        model="m",
        messages=question(pdf_part("book.pdf", PAGES)),  # type: ignore[arg-type]
    )
    answer = raw.parse()
    content = answer.choices[0].message.content or ""
    assert content.startswith(TEXT + "\n\nSources:\n- book.pdf, page")
    assert "citations" not in (answer.model_extra or {})  # inline only
    assert raw.headers["X-Enrich-Strategy"] == "retrieval"
    sources = raw.headers["X-Enrich-Sources"].split(", ")
    assert sources[0] == "book.pdf#page=1"
    assert int(raw.headers["X-Enrich-Citations"]) == len(sources)  # still the count
    sent = upstream.last_to("/v1/chat/completions")
    assert not any(name.lower().startswith("x-enrich") for name in sent.headers)


def test_inline_sources_streamed_as_the_last_delta(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(retrieval={**SMALL_CHUNKS, "citations": "both"})
    headers = {k: v for k, v in HEADERS.items() if k != "X-Enrich-Citations"}
    chunks = list(
        sdk(base, **headers).chat.completions.create(
            model="m",
            messages=question(pdf_part("book.pdf", PAGES)),
            stream=True,  # type: ignore[arg-type]
        )
    )
    deltas = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert deltas[-1].startswith("\n\nSources:\n- book.pdf, page")
    assert "".join(deltas) == TEXT + deltas[-1]
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert (chunks[0].model_extra or {})["citations"][0] == "book.pdf#page=1"  # both: fields too


def test_body_wins_and_bad_headers_are_named(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(retrieval=SMALL_CHUNKS)
    client = sdk(base, **HEADERS)
    raw = client.chat.completions.with_raw_response.create(
        model="m",
        messages=question(pdf_part("book.pdf", PAGES)),  # type: ignore[arg-type]
        extra_body={"enrich": {"strategy": "inject-full-content"}},
    )
    assert raw.headers["X-Enrich-Strategy"] == "inject-full-content"
    # The headers' inline citations still apply: the document went whole, and says so.
    content = raw.parse().choices[0].message.content or ""
    assert content.endswith("\n\nSources:\n- book.pdf, whole document")
    with pytest.raises(openai.BadRequestError) as caught:
        sdk(base, **{"X-Enrich-Retrieval-Limit": "lots"}).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
    assert caught.value.body["param"] == "X-Enrich-Retrieval-Limit"  # type: ignore[index]


def test_model_alias_carries_options_and_becomes_the_real_name(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    alias = {
        "enrich": {"strategy": "retrieval", "affinity_threshold": 0.2, "citations": "inline"},
        "upstream_model": "gemma-3",
    }
    base = make_proxy(retrieval=SMALL_CHUNKS, models={"enrich-full": alias})
    answer = sdk(base).chat.completions.create(
        model="enrich-full",
        messages=question(pdf_part("book.pdf", PAGES)),  # type: ignore[arg-type]
    )
    assert "\n\nSources:\n- book.pdf, page" in (answer.choices[0].message.content or "")
    assert upstream.last_to("/v1/chat/completions").json["model"] == "gemma-3"
    sdk(base).chat.completions.create(model="plain", messages=[{"role": "user", "content": "hi"}])
    assert upstream.last_to("/v1/chat/completions").json["model"] == "plain"
    # Front ends pick models from the list: the alias is in it, beside the upstream's own.
    assert [card.id for card in sdk(base).models.list()] == ["fake-model", "enrich-full"]


def test_placeholder_and_path_names(make_proxy: Callable[..., str], upstream: FakeUpstream) -> None:
    base = make_proxy(retrieval=SMALL_CHUNKS)
    body = ask(
        [
            pdf_part(f"{SHA}.pdf", PAGES[:1]),
            text_part("LC_AUTOGENERATED", "The bakery sells bread."),
            text_part("/home/ann/notes/todo.md", "Buy milk."),
        ],
        stream=True,
        enrich={"strategy": "inject-full-content"},
    )
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=60) as response:
        raw = b"".join(response.iter_raw()).decode()
    prompt = sent_text(upstream)
    for name in ("document-1.pdf", "document-2.txt", "todo.md"):
        assert f"** {name} full content **" in prompt
    assert SHA not in prompt and "LC_AUTOGENERATED" not in prompt and "/home" not in prompt
    comments = [line[2:] for line in raw.split("\n") if line.startswith(": ")]
    assert "Loading parser for document-1.pdf..." in comments
    assert "Parsing file document-2.txt... (100%)" in comments


def test_numbered_names_hold_across_turns_and_in_citations(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(retrieval={**SMALL_CHUNKS, "affinity_threshold": 0.2})
    body = {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "read"}, pdf_part(f"{SHA}.pdf", PAGES)],
            },
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "What did the lighthouse keeper feed the cats?"},
        ]
    }
    preview = httpx.post(base + "/v1/enrich/preview", json=body, timeout=60).json()
    assert preview["citations"][0] == "document-1.pdf#page=1"
    first = preview["upstream"]["body"]["messages"][0]["content"]
    assert {"type": "text", "text": "[attached: document-1.pdf]"} in first


@pytest.fixture
def files_site(servers: ServerThread) -> str:
    pdf = pdf_bytes(PAGES)

    async def serve(request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name == "moved.pdf":
            raise web.HTTPFound("/docs/book.pdf")
        if name == "huge.pdf":
            return web.Response(body=b"%PDF-" + b"0" * (2 * 1024 * 1024))
        return web.Response(body=pdf, content_type="application/pdf")

    app = web.Application()
    app.router.add_get("/docs/{name}", serve)
    app.router.add_get("/private/{name}", serve)
    return servers.serve(app)


def test_file_url_fetched_only_under_allowed_prefixes(
    make_proxy: Callable[..., str], upstream: FakeUpstream, files_site: str
) -> None:
    base = make_proxy(documents={"allowed_url_prefixes": [files_site + "/docs/"], "max_file_mb": 1})

    def send(url: str) -> httpx.Response:
        part = {"type": "input_file", "file_url": url}
        body = ask([part], enrich={"strategy": "inject-full-content"})
        return httpx.post(base + "/v1/chat/completions", json=body, timeout=60)

    ok = send(files_site + "/docs/book.pdf?version=2")
    assert ok.status_code == 200, ok.text
    assert "** book.pdf full content **" in sent_text(upstream) and "sardines" in sent_text(
        upstream
    )
    refused = {
        "/private/book.pdf": (400, "file_url_not_allowed"),
        "/docs/../private/book.pdf": (400, "file_url_not_allowed"),
        "/docs/%2e%2e/private/book.pdf": (400, "file_url_not_allowed"),
        "/docs/moved.pdf": (400, "file_url_failed"),
        "/docs/huge.pdf": (413, "file_too_large"),
    }
    for path, (status, code) in refused.items():
        response = send(files_site + path)
        assert (response.status_code, response.json()["error"]["code"]) == (status, code), path


def test_uploaded_path_names_keep_their_last_part(make_proxy: Callable[..., str]) -> None:
    base = make_proxy()
    files = {"file": ("C:\\Users\\ann\\report.txt", b"hello"), "purpose": (None, "user_data")}
    created = httpx.post(base + "/v1/files", files=files, timeout=30).json()
    assert created["filename"] == "report.txt"


def test_an_unnamed_document_takes_its_own_title(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    import pymupdf

    document = pymupdf.open()
    document.new_page().insert_text((50, 72), "The lighthouse keeper fed the cats.")
    document.set_metadata({"title": "Annual <|im_start|> Report 2024"})
    data = base64.b64encode(document.tobytes()).decode()
    part = {
        "type": "file",
        "file": {"filename": f"{SHA}.pdf", "file_data": f"data:application/pdf;base64,{data}"},
    }
    base = make_proxy(retrieval=SMALL_CHUNKS)
    body = ask([part], enrich={"strategy": "inject-full-content"})
    assert httpx.post(base + "/v1/chat/completions", json=body, timeout=60).status_code == 200
    # The title names it, made safe: no control token can come in through a name.
    assert "** Annual im_start Report 2024.pdf full content **" in sent_text(upstream)
