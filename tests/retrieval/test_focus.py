"""A passage over a page break is cited at the page holding what it was found for."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from proxy.documents.limits import ParseLimits
from proxy.documents.parser import DocumentParser
from proxy.retrieval.chunking import chunk_document
from proxy.retrieval.embeddings import DefaultEmbedder
from proxy.retrieval.focus import focus_page, page_parts
from tests.callers import sdk
from tests.fakes.upstream import FakeUpstream
from tests.pipeline.test_enrich import ask, pdf_bytes, pdf_part
from tests.retrieval.support import text_document
from tests.stores.support import wait_until

SPEC = Path("/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf")
"""The README tour's PDF as the issue met it: Debian's shared-mime-info package ships it."""

FERRY = [
    "Island services.\nThe harbour office on the quay sells tickets and maps.",
    "The ferry to the island leaves at seven and returns at noon.\nBikes travel free.",
]


def test_the_page_holding_the_question_words_is_cited() -> None:
    document = text_document(FERRY)
    text = "\n\n".join(FERRY)
    parts = page_parts(document, 0, len(text))
    assert [page for page, _ in parts] == [1, 2]
    assert "".join(part for _, part in parts) == text
    assert focus_page(parts, "When does the ferry leave for the island?", "english") == 2
    assert focus_page(parts, "Where are tickets sold?", "english") == 1
    # Only a word every sentence has ("island"): it tells nothing, so it weighs nothing, and
    # the page holding most of the passage is cited.
    assert focus_page(parts, "Anything about xylophones?", "english") == 2
    assert focus_page([], "Why?", "english") is None


def test_a_word_every_sentence_has_weighs_less_than_a_rare_one() -> None:
    """The passage is about the island ferry throughout; only one sentence says when it leaves."""
    about = " ".join(f"The island ferry has {n} decks." for n in range(2, 7))
    document = text_document([about, "It leaves at seven."])
    parts = page_parts(document, 0, len(about) + 2 + len("It leaves at seven."))
    assert focus_page(parts, "When does the island ferry leave?", "english") == 2


def test_a_passage_within_one_page_is_one_part() -> None:
    document = text_document(FERRY)
    assert page_parts(document, 0, 10) == [(1, FERRY[0][:10])]


@pytest.mark.skipif(not SPEC.exists(), reason=f"{SPEC} absent (Debian package shared-mime-info)")
def test_the_specification_s_facts_are_cited_at_their_pages(tmp_path: Path) -> None:
    """The issue's two: the magic file's header (page 9) and user.mime_type (page 14), each in
    a passage that starts on the page before, as the proxy parses and cuts the real file."""

    async def parsed() -> object:
        parser = DocumentParser(tmp_path, ParseLimits(), workers=1)
        try:
            return await parser.parse(SPEC.name, SPEC.read_bytes())
        finally:
            await parser.close()

    document = asyncio.run(parsed())
    chunks = chunk_document(document, count_tokens=DefaultEmbedder().count_tokens)  # type: ignore[arg-type]
    asked = [
        (
            "What does the magic file start with?",
            'The file starts with the magic string "MIME-Magic',
            9,
        ),
        (
            "Which extended attribute can hold a file's MIME type?",
            "the user.mime_type extended",
            14,
        ),
    ]
    spanning = 0
    for question, fact, page in asked:
        holding = [chunk for chunk in chunks if fact in chunk.text]
        assert holding
        for chunk in holding:
            cited = chunk.page_start
            if chunk.page_end > chunk.page_start:
                parts = page_parts(document, chunk.start, chunk.end)  # type: ignore[arg-type]
                cited = focus_page(parts, question, "english")
            assert cited == page, (question, chunk.page_start, chunk.page_end)
            spanning += chunk.page_start < page
    assert spanning == 2  # both start a page early: what citing their first page got wrong


def test_citations_search_results_and_sources_name_the_fact_s_page(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(retrieval={"chunk_tokens": 200, "chunk_overlap": 0})
    body = ask([pdf_part("ferry.pdf", FERRY)], "When does the ferry leave for the island?")
    body["enrich"] = {"strategy": "retrieval", "affinity_threshold": 0.0, "citations": "both"}
    response = httpx.post(base + "/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["citations"] == ["ferry.pdf#page=2"]
    [result] = answer["search_results"]
    assert (result["page"], result["page_start"], result["page_end"]) == (2, 1, 2)
    assert result["location"] == "page=2" and result["url"] == "ferry.pdf#page=2"
    assert answer["choices"][0]["message"]["content"].endswith("Sources:\n- ferry.pdf, page 2")
    assert response.headers["X-Enrich-Sources"] == "ferry.pdf#page=2"


def test_a_document_s_opening_is_cited_where_it_starts(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    """Given for a question about the whole document, the opening was chosen by where it sits:
    a word of the question on its second page says nothing of where it is."""
    pages = [
        "Harbour guide.\nA short guide to the island harbour for visitors.",
        "This document lists the ferry times and the opening hours of the ticket office.",
    ]
    # The fake embedder's cosines route only with an affinity set (docs/retrieval.md).
    base = make_proxy(retrieval={"chunk_tokens": 200, "chunk_overlap": 0, "overview_affinity": 0.9})
    body = ask([pdf_part("guide.pdf", pages)], "What is this document about?")
    body["enrich"] = {"strategy": "retrieval", "affinity_threshold": 0.0}
    response = httpx.post(base + "/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    [result] = response.json()["search_results"]
    assert (result["page"], result["page_start"], result["page_end"]) == (1, 1, 2)


def test_a_vector_store_s_passage_is_cited_at_the_fact_s_page(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    """A vector store's file comes to a request by reference, as passages: its pages are read
    from the parse cache, so its passage over a page break is cited at the fact's page too."""
    base = make_proxy(
        retrieval={"chunk_tokens": 200, "chunk_overlap": 0}, vector_stores={"poll_after_ms": 20}
    )
    client = sdk(base)
    file_id = client.files.create(file=("ferry.pdf", pdf_bytes(FERRY)), purpose="assistants").id
    store = client.vector_stores.create(name="ferries", file_ids=[file_id])
    wait_until(lambda: client.vector_stores.retrieve(store.id).file_counts.completed)
    answer = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "When does the ferry leave for the island?"}],
        extra_body={
            "enrich": {
                "vector_store_ids": [store.id],
                "affinity_threshold": 0.0,
                "citations": "both",
            }
        },
    )
    extra = answer.model_extra or {}
    assert extra["citations"] == ["ferry.pdf#page=2"]
    [result] = extra["search_results"]
    assert (result["page"], result["page_start"], result["page_end"]) == (2, 1, 2)
    assert (answer.choices[0].message.content or "").endswith("Sources:\n- ferry.pdf, page 2")
