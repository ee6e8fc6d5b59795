"""The retrieval branch through the proxy: index once, cite passages, send citations once."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

from tests.fakes.embeddings import FakeEmbeddings
from tests.fakes.upstream import FakeUpstream
from tests.test_enrich import ask, pdf_part, text_part

PAGES = [
    "The lighthouse keeper fed the cats every morning with fresh sardines.",
    "Quantum chromodynamics describes the strong interaction between quarks and gluons.",
    "The bakery on the corner sells sourdough bread and croissants at dawn.",
]

# One sentence per chunk, so each page is its own passage.
SMALL_CHUNKS = {"chunk_tokens": 20, "chunk_overlap": 0}


def retrieval_body(query: str, **extra: Any) -> dict[str, Any]:
    extra.setdefault("enrich", {"strategy": "retrieval", "affinity_threshold": 0.2})
    return ask([pdf_part("book.pdf", PAGES)], query, **extra)


def test_citations_in_prompt_and_response(
    make_proxy: Callable[..., str], upstream: FakeUpstream, embeddings: FakeEmbeddings
) -> None:
    base = make_proxy(retrieval=SMALL_CHUNKS)
    response = httpx.post(
        base + "/v1/chat/completions",
        json=retrieval_body("What did the lighthouse keeper feed the cats?"),
        timeout=60,
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["citations"][0] == "book.pdf#page=1"
    first = answer["search_results"][0]
    assert first["source"] == "attachment" and first["page"] == 1 and 0 < first["score"] <= 1
    assert "sardines" in first["snippet"]
    assert response.headers["X-Enrich-Strategy"] == "retrieval"
    assert int(response.headers["X-Enrich-Citations"]) == len(answer["citations"])
    sent = upstream.last_to("/v1/chat/completions").json["messages"][-1]["content"][0]["text"]
    assert sent.startswith("The following citations were found in the files provided by the user:")
    assert 'Citation 1: "' in sent and "sardines" in sent
    assert sent.endswith("User Query:\n\nWhat did the lighthouse keeper feed the cats?")


def test_document_embedded_once(make_proxy: Callable[..., str], embeddings: FakeEmbeddings) -> None:
    base = make_proxy(retrieval=SMALL_CHUNKS)
    body = retrieval_body("sardines for the cats")
    httpx.post(base + "/v1/chat/completions", json=body, timeout=60)
    batches = len(embeddings.inputs)
    httpx.post(base + "/v1/chat/completions", json=body, timeout=60)
    # Only the query is embedded the second time.
    assert len(embeddings.inputs) == batches + 1
    assert embeddings.inputs[-1] == ["sardines for the cats"]


def test_no_passage_over_threshold(make_proxy: Callable[..., str], upstream: FakeUpstream) -> None:
    base = make_proxy(retrieval=SMALL_CHUNKS)
    body = retrieval_body(
        "zebra xylophone", enrich={"strategy": "retrieval", "affinity_threshold": 0.99}
    )
    response = httpx.post(base + "/v1/chat/completions", json=body, timeout=60)
    assert "citations" not in response.json()
    sent = upstream.last_to("/v1/chat/completions").json["messages"][-1]["content"][0]["text"]
    assert sent.startswith("Important: No citations were found in the user files")


def test_streamed_citations_once_on_first_chunk(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(retrieval=SMALL_CHUNKS)
    with httpx.stream(
        "POST",
        base + "/v1/chat/completions",
        json=retrieval_body("lighthouse cats sardines", stream=True),
        timeout=60,
    ) as response:
        raw = b"".join(response.iter_raw()).decode()
    comments = [line[2:] for line in raw.split("\n") if line.startswith(": ")]
    assert "Retrieving relevant citations for user query..." in comments
    assert any(
        c.startswith("Retrieved ") and c.endswith(" relevant citations for user query")
        for c in comments
    )
    chunks = [json.loads(e[6:]) for e in raw.split("\n\n") if e.startswith("data: {")]
    assert "citations" in chunks[0] and "search_results" in chunks[0]
    assert not any("citations" in chunk for chunk in chunks[1:])


def test_old_files_only_take_the_retrieval_path(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(retrieval={**SMALL_CHUNKS, "affinity_threshold": 0.2})
    body = {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "read this"}, text_part("old.txt", PAGES[2])],
            },
            {"role": "assistant", "content": "done"},
            {"role": "user", "content": "Where can I buy sourdough bread?"},
        ]
    }
    response = httpx.post(base + "/v1/enrich/preview", json=body, timeout=60)
    preview = response.json()
    assert preview["strategy"] == "retrieval"
    assert preview["decision"]["reason"] == "only files from earlier messages"
    # Plain text has no pages: the citation names the line its passage starts on.
    assert preview["citations"] == ["old.txt#line=1"]
    last = preview["upstream"]["body"]["messages"][-1]["content"]
    assert "sourdough" in last and last.endswith("Where can I buy sourdough bread?")


def test_embedding_server_down_is_502(
    make_proxy: Callable[..., str], upstream: FakeUpstream, embeddings: FakeEmbeddings
) -> None:
    embeddings.fail = True
    base = make_proxy(retrieval=SMALL_CHUNKS)
    response = httpx.post(base + "/v1/chat/completions", json=retrieval_body("cats"), timeout=60)
    assert response.status_code == 502
    assert "embedding server" in response.json()["error"]["message"]
    assert not [r for r in upstream.requests if r.path == "/v1/chat/completions"]
    embeddings.fail = False
    again = httpx.post(base + "/v1/chat/completions", json=retrieval_body("cats"), timeout=60)
    assert again.status_code == 200  # nothing half-indexed counts as done
