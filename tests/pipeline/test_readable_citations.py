"""Citations a person can read: each place once, whole documents named, one marker per place."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import openai
import pytest

from proxy.pipeline.citing import (
    distinct_places,
    place_offsets,
    sources_block,
    whole_document,
)
from proxy.responses.answer import file_citations
from tests.fakes.upstream import ANSWER, FakeUpstream
from tests.pipeline.test_enrich import pdf_bytes

TEXT = "".join(ANSWER)
QUESTION = "What did the lighthouse keeper feed the cats?"
NOTES = "The lighthouse keeper fed the cats every morning with fresh sardines."
# Three paragraphs of one text file: one unit (line 1), so every passage has the same place.
STORY = "\n\n".join(
    f"The lighthouse keeper fed the {animal} every morning with fresh sardines from the harbour."
    for animal in ("cats", "gulls", "seals")
)
ONE_PER_PARAGRAPH = {"chunk_tokens": 20, "chunk_overlap": 0}
RETRIEVE = {"strategy": "retrieval", "affinity_threshold": 0.0, "retrieval_limit": 3}


def client(base: str, **headers: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=base + "/v1", api_key="unused", max_retries=0, default_headers=headers or None
    )


def text_file(name: str, text: str) -> dict[str, Any]:
    data = base64.b64encode(text.encode()).decode()
    return {
        "type": "file",
        "file": {"filename": name, "file_data": f"data:text/plain;base64,{data}"},
    }


def ask(name: str, text: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": [{"type": "text", "text": QUESTION}, text_file(name, text)]}
    ]


# -- the pure parts ------------------------------------------------------------------------------

RESULTS = [
    {"title": "a.pdf", "url": "a.pdf#page=4", "location": "page=4", "page": 4, "score": 0.5},
    {"title": "a.pdf", "url": "a.pdf#page=4", "location": "page=4", "page": 4, "score": 0.7},
    {"title": "b.docx", "url": "b.docx#section=Refunds", "location": "section=Refunds"},
    {"title": "a.pdf", "url": "a.pdf#page=1", "location": "page=1", "page": 1, "score": 0.4},
]


def test_each_place_once_with_its_first_snippet_and_best_score() -> None:
    results = [{**r, "snippet": f"passage {n}"} for n, r in enumerate(RESULTS)]
    distinct = distinct_places(results)
    assert [(r["url"], r["snippet"], r.get("score")) for r in distinct] == [
        ("a.pdf#page=4", "passage 0", 0.7),
        ("b.docx#section=Refunds", "passage 2", None),
        ("a.pdf#page=1", "passage 3", 0.4),
    ]
    # The same page of two files with the same name but other ids is two places.
    twins = [{**RESULTS[0], "file_id": "file-a"}, {**RESULTS[0], "file_id": "file-b"}]
    assert len(distinct_places(twins)) == 2


def test_a_whole_document_has_its_line_in_the_block() -> None:
    sources = [*RESULTS, whole_document("notes.txt", "file-n")]
    assert sources_block(sources) == (
        "\n\nSources:\n- a.pdf, pages 1, 4\n- b.docx, section Refunds\n- notes.txt, whole document"
    )


def test_place_offsets_point_at_each_place_in_its_line() -> None:
    block = sources_block(RESULTS)
    offsets = place_offsets(RESULTS)
    assert block[offsets[("a.pdf", ("page", "4"))]] == "4"
    assert block[offsets[("a.pdf", ("page", "1"))]] == "1"
    assert block[offsets[("b.docx", ("section", "Refunds"))] :].startswith("section Refunds")


def test_one_annotation_per_file_and_place_never_two_alike() -> None:
    block = sources_block(RESULTS)
    inline = file_citations(RESULTS, 3, block)
    text = "Hi." + block
    assert [(a["filename"], text[a["index"] :].split("\n")[0]) for a in inline] == [
        ("a.pdf", "4"),
        ("b.docx", "section Refunds"),
        ("a.pdf", "1, 4"),
    ]
    # Without a block every annotation sits at the end of the text: one per file.
    assert file_citations(RESULTS, 3, "") == [
        {"type": "file_citation", "filename": "a.pdf", "index": 3},
        {"type": "file_citation", "filename": "b.docx", "index": 3},
    ]


# -- through the openai SDK ----------------------------------------------------------------------


@pytest.fixture
def base(make_proxy: Callable[..., str]) -> str:
    return make_proxy(retrieval=ONE_PER_PARAGRAPH)


def test_chat_citations_and_search_results_name_each_place_once(
    base: str, upstream: FakeUpstream
) -> None:
    raw = client(base).chat.completions.with_raw_response.create(
        model="m", messages=ask("story.txt", STORY), extra_body={"enrich": RETRIEVE}
    )
    answer = raw.parse()
    sent = upstream.last_to("/v1/chat/completions").json["messages"][-1]["content"][0]["text"]
    assert sent.count("Citation ") == 3  # three passages went to the model...
    assert raw.headers["X-Enrich-Citations"] == "3"
    extra = answer.model_extra or {}
    assert extra["citations"] == ["story.txt#line=1"]  # ...from one place, named once
    assert [r["url"] for r in extra["search_results"]] == ["story.txt#line=1"]
    assert raw.headers["X-Enrich-Sources"] == "story.txt#line=1"


def test_a_document_sent_whole_gets_a_sources_line_with_inline_citations(
    base: str, upstream: FakeUpstream
) -> None:
    raw = client(base, **{"X-Enrich-Citations": "inline"}).chat.completions.with_raw_response
    response = raw.create(model="m", messages=ask("notes.txt", NOTES))
    assert response.headers["X-Enrich-Strategy"] == "inject-full-content"
    assert response.headers["X-Enrich-Sources"] == "notes.txt"
    content = response.parse().choices[0].message.content
    assert content == TEXT + "\n\nSources:\n- notes.txt, whole document"
    # The default style adds no fields for it (there is no passage to cite), only the header.
    plain = client(base).chat.completions.with_raw_response.create(
        model="m", messages=ask("notes.txt", NOTES)
    )
    assert plain.parse().choices[0].message.content == TEXT
    assert "citations" not in (plain.parse().model_extra or {})
    assert plain.headers["X-Enrich-Sources"] == "notes.txt"


def test_a_document_sent_whole_is_a_file_citation_in_responses(base: str) -> None:
    uploaded = client(base).files.create(file=("notes.txt", NOTES.encode()), purpose="user_data")
    response = client(base, **{"X-Enrich-Citations": "inline"}).responses.create(
        model="m",
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": QUESTION},
                    {"type": "input_file", "file_id": uploaded.id},
                ],
            }
        ],
    )
    assert response.output_text == TEXT + "\n\nSources:\n- notes.txt, whole document"
    (note,) = response.output[0].content[0].annotations  # type: ignore[union-attr]
    assert (note.type, note.filename, note.file_id) == ("file_citation", "notes.txt", uploaded.id)
    assert response.output_text[note.index :] == "whole document"


def test_responses_annotations_are_one_per_place(base: str) -> None:
    pdf = base64.b64encode(
        pdf_bytes([NOTES, "Quantum chromodynamics describes quarks.", NOTES])
    ).decode()
    response = client(base, **{"X-Enrich-Citations": "inline"}).responses.create(
        model="m",
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": QUESTION},
                    {
                        "type": "input_file",
                        "filename": "book.pdf",
                        "file_data": f"data:application/pdf;base64,{pdf}",
                    },
                ],
            }
        ],
        extra_body={"enrich": RETRIEVE},
    )
    notes = response.output[0].content[0].annotations  # type: ignore[union-attr]
    places = [response.output_text[note.index] for note in notes]
    assert len(places) == len(set(places)) >= 2  # one per page cited, each at its page number
    assert all(place.isdigit() for place in places)
    assert all(note.filename == "book.pdf" for note in notes)
