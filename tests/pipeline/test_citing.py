"""The "Sources:" block, the X-Enrich-Sources header and the stream chunk, with plain values."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

import openai
import pytest

from proxy.pipeline.citing import (
    StreamSources,
    cited_files,
    distinct_places,
    place_offsets,
    source_offsets,
    sources_block,
    sources_header,
    whole_document,
    with_sources,
)
from proxy.pipeline.rewrite import replace_last_user_text
from proxy.responses.answer import file_citations
from tests.fakes.upstream import ANSWER, FakeUpstream
from tests.pipeline.test_enrich import pdf_bytes

RESULTS = [
    {"title": "report.pdf", "page": 4},
    {"title": "notes, v2.md", "page": 1},
    {"title": "report.pdf", "page": 1},
    {"title": "report.pdf", "page": 4},
    {"title": "page-less.txt"},
]


def test_block_lists_files_in_first_cited_order_with_their_pages() -> None:
    assert cited_files(RESULTS) == [
        ("report.pdf", ["pages 1, 4"]),
        ("notes, v2.md", ["page 1"]),
        ("page-less.txt", []),
    ]
    block = sources_block(RESULTS)
    assert block == (
        "\n\nSources:\n- report.pdf, pages 1, 4\n- notes, v2.md, page 1\n- page-less.txt"
    )
    for name, at in source_offsets(RESULTS).items():
        assert block[at:].startswith(f"- {name}")
    assert sources_block([]) == ""


def test_header_is_encoded_unique_and_bounded() -> None:
    citations = ["report.pdf#page=4", "notes, v2.md#page=1", "report.pdf#page=4", "ü.pdf#page=2"]
    header = sources_header(citations)
    assert header == "report.pdf#page=4, notes%2C%20v2.md#page=1, %C3%BC.pdf#page=2"
    assert header.isascii()
    assert [unquote(part) for part in header.split(", ")] == list(dict.fromkeys(citations))
    many = [f"a-rather-long-file-name-number-{n}.pdf#page={n}" for n in range(100)]
    bounded = sources_header(many, limit=300)
    assert len(bounded) <= 300
    kept = bounded.split(", ")
    assert kept[-1] == f"+{100 - (len(kept) - 1)} more"


def chunk(content: str | None = None, finish: str | None = None) -> dict[str, Any]:
    delta = {} if content is None else {"content": content}
    return {
        "id": "x",
        "created": 1,
        "model": "m",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def texts(chunks: list[dict[str, Any]]) -> str:
    return "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])


def test_stream_block_goes_before_the_finish() -> None:
    inline = StreamSources("\n\nSources:\n- a.pdf")
    out = inline.feed(chunk("Hi")) + inline.feed(chunk("!", "stop"))
    out += inline.feed({"id": "x", "choices": [], "usage": {}}) + inline.finish()
    assert texts(out) == "Hi!\n\nSources:\n- a.pdf"
    reasons = [c["choices"][0]["finish_reason"] for c in out if c["choices"]]
    assert reasons == [None, None, "stop"]  # the block carries the finish reason


def test_stream_without_finish_gets_the_block_at_the_end() -> None:
    inline = StreamSources("\n\nSources:\n- a.pdf")
    out = inline.feed(chunk("Hi")) + inline.finish() + inline.finish()
    assert texts(out) == "Hi\n\nSources:\n- a.pdf"


def test_no_block_for_tool_calls_or_when_empty() -> None:
    inline = StreamSources("\n\nSources:\n- a.pdf")
    assert inline.feed(chunk(None, "tool_calls")) == [chunk(None, "tool_calls")]
    assert inline.finish() == []
    empty = StreamSources("")
    assert empty.feed(chunk("Hi", "stop")) == [chunk("Hi", "stop")] and empty.finish() == []


def test_json_answer_gets_the_block_after_its_text() -> None:
    answer = {
        "choices": [{"message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}]
    }
    assert with_sources(answer, "\n\nS")["choices"][0]["message"]["content"] == "Hi\n\nS"
    assert answer["choices"][0]["message"]["content"] == "Hi"  # a copy, not in place
    tools = {
        "choices": [{"message": {"content": None, "tool_calls": []}, "finish_reason": "tool_calls"}]
    }
    assert with_sources(tools, "\n\nS") == tools
    assert with_sources({"error": {}}, "\n\nS") == {"error": {}}


def test_places_other_than_pages() -> None:
    results = [
        {"title": "handbook.docx", "location": "section=2.3 Refunds"},
        {"title": "deck.pptx", "location": "slide=7"},
        {"title": "handbook.docx", "location": "section=Intro"},
        {"title": "deck.pptx", "location": "slide=2"},
        {"title": "budget.xlsx", "location": "sheet=Q3"},
        {"title": "report.pdf", "location": "page=4", "page": 4},
        {"title": "handbook.docx", "location": "section=2.3 Refunds"},
    ]
    assert sources_block(results) == (
        "\n\nSources:\n- handbook.docx, section 2.3 Refunds; section Intro\n"
        "- deck.pptx, slides 2, 7\n- budget.xlsx, sheet Q3\n- report.pdf, page 4"
    )


def test_odd_locations_and_names() -> None:
    results = [
        {"title": "a.pdf", "location": "section=x=y"},  # only the first "=" separates
        {"title": "a.pdf", "location": "Appendix"},  # a place without a kind
        {"title": "b.pdf", "location": "12"},
        {"title": "b.pdf", "location": "3"},
        {"title": "c.pdf", "location": "", "page": 2},  # an empty location: the page
        {"title": "c.pdf", "location": 7, "page": 5},  # not text: the page
        {"title": "c.pdf", "page": True},  # not a page number
        {"url": "https://example.com/d.pdf", "page": 1},  # no title: the address
        {"title": "", "page": 3},  # neither: a plain name
    ]
    assert cited_files(results) == [
        ("a.pdf", ["section x=y", "Appendix"]),
        ("b.pdf", ["3, 12"]),
        ("c.pdf", ["pages 2, 5"]),
        ("https://example.com/d.pdf", ["page 1"]),
        ("document", ["page 3"]),
    ]


def test_header_keeps_as_many_as_fit_exactly() -> None:
    citations = [f"{name}.pdf#page={n}" for n, name in enumerate(["a", "bb", "ccc", "dddd"], 1)]
    full = ", ".join(citations)
    for limit in range(len(full) + 3):
        header = sources_header(citations, limit)
        if len(full) <= limit:
            assert header == full
            continue
        *kept, more = header.split(", ")
        left = len(citations) - len(kept)
        assert kept == citations[: len(kept)] and more == f"+{left} more"
        if kept:
            assert len(header) <= limit
        # One more would not have fitted, with what it would then have had to say after it.
        bigger = [*kept, citations[len(kept)]] + ([f"+{left - 1} more"] if left > 1 else [])
        assert len(", ".join(bigger)) > limit


def test_the_stream_block_is_a_chunk_of_the_same_answer() -> None:
    inline = StreamSources("\n\nSources:\n- a.pdf")
    [opened, block] = inline.feed(chunk("!", "stop"))
    assert opened == chunk("!")
    assert block == {
        "id": "x",
        "created": 1,
        "model": "m",
        "object": "chat.completion.chunk",
        "choices": [
            {"index": 0, "delta": {"content": "\n\nSources:\n- a.pdf"}, "finish_reason": "stop"}
        ],
    }
    # Without a finish reason, the block at the end still belongs to the same answer.
    late = StreamSources("\n\nS")
    late.feed({"id": "y", "created": 2, "model": "n", "choices": [{"index": 0, "delta": {}}]})
    [end] = late.finish()
    assert (end["id"], end["created"], end["model"]) == ("y", 2, "n")
    assert end["choices"] == [{"index": 0, "delta": {"content": "\n\nS"}, "finish_reason": None}]


def test_the_stream_block_follows_the_first_choice_only() -> None:
    inline = StreamSources("\n\nS")
    # Another choice finishing, and one that is not even an object, leave the block waiting.
    other = {"choices": ["junk", {"index": 1, "delta": {"content": "b"}, "finish_reason": "stop"}]}
    assert inline.feed(other) == [other]
    # A first choice that does not say its index is choice 0 (some servers leave it out); in
    # the same chunk as another choice's finish, it still gets the block.
    both = {
        "choices": [
            {"index": 1, "delta": {}, "finish_reason": "length"},
            {"delta": {"content": "a"}, "finish_reason": "stop"},
        ]
    }
    out = inline.feed(both)
    assert [c["choices"][-1].get("finish_reason") for c in out] == [None, "stop"]
    assert texts(out[1:]) == "\n\nS"
    assert out[0]["choices"][0] == both["choices"][0]  # the other choice's finish is untouched


def test_json_answers_the_block_cannot_join() -> None:
    block = "\n\nS"
    for answer in (
        {"choices": []},
        {"choices": ["junk"]},
        {"choices": [{"message": {"content": None}, "finish_reason": "stop"}]},
        # A tool call with some text before it: not the answer yet.
        {
            "choices": [
                {
                    "message": {"content": "Let me look.", "tool_calls": []},
                    "finish_reason": "tool_calls",
                }
            ]
        },
    ):
        assert with_sources(answer, block) == answer  # type: ignore[arg-type]
    two = {
        "choices": [
            {"index": 0, "message": {"content": "A"}, "finish_reason": "stop"},
            {"index": 1, "message": {"content": "B"}, "finish_reason": "stop"},
        ]
    }
    assert [c["message"]["content"] for c in with_sources(two, block)["choices"]] == ["A\n\nS", "B"]


def test_the_last_user_text_is_replaced_and_what_follows_it_kept() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "first"},
        {"role": "user", "content": [{"type": "text", "text": "old"}, image]},
        {"role": "assistant", "content": "Prefilled start of the answer"},
    ]
    assert replace_last_user_text(messages, "new") == [
        messages[0],
        {"role": "user", "content": [{"type": "text", "text": "new"}, image]},
        messages[2],
    ]


# -- citations a person can read: each place once, whole documents named --------------------------


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

READABLE_RESULTS = [
    {"title": "a.pdf", "url": "a.pdf#page=4", "location": "page=4", "page": 4, "score": 0.5},
    {"title": "a.pdf", "url": "a.pdf#page=4", "location": "page=4", "page": 4, "score": 0.7},
    {"title": "b.docx", "url": "b.docx#section=Refunds", "location": "section=Refunds"},
    {"title": "a.pdf", "url": "a.pdf#page=1", "location": "page=1", "page": 1, "score": 0.4},
]


def test_each_place_once_with_its_first_snippet_and_best_score() -> None:
    results = [{**r, "snippet": f"passage {n}"} for n, r in enumerate(READABLE_RESULTS)]
    distinct = distinct_places(results)
    assert [(r["url"], r["snippet"], r.get("score")) for r in distinct] == [
        ("a.pdf#page=4", "passage 0", 0.7),
        ("b.docx#section=Refunds", "passage 2", None),
        ("a.pdf#page=1", "passage 3", 0.4),
    ]
    # The same page of two files with the same name but other ids is two places.
    twins = [
        {**READABLE_RESULTS[0], "file_id": "file-a"},
        {**READABLE_RESULTS[0], "file_id": "file-b"},
    ]
    assert len(distinct_places(twins)) == 2


def test_a_whole_document_has_its_line_in_the_block() -> None:
    sources = [*READABLE_RESULTS, whole_document("notes.txt", "file-n")]
    assert sources_block(sources) == (
        "\n\nSources:\n- a.pdf, pages 1, 4\n- b.docx, section Refunds\n- notes.txt, whole document"
    )


def test_place_offsets_point_at_each_place_in_its_line() -> None:
    block = sources_block(READABLE_RESULTS)
    offsets = place_offsets(READABLE_RESULTS)
    assert block[offsets[("a.pdf", ("page", "4"))]] == "4"
    assert block[offsets[("a.pdf", ("page", "1"))]] == "1"
    assert block[offsets[("b.docx", ("section", "Refunds"))] :].startswith("section Refunds")


def test_one_annotation_per_file_and_place_never_two_alike() -> None:
    block = sources_block(READABLE_RESULTS)
    inline = file_citations(READABLE_RESULTS, 3, block)
    text = "Hi." + block
    assert [(a["filename"], text[a["index"] :].split("\n")[0]) for a in inline] == [
        ("a.pdf", "4"),
        ("b.docx", "section Refunds"),
        ("a.pdf", "1, 4"),
    ]
    # Without a block every annotation sits at the end of the text: one per file.
    assert file_citations(READABLE_RESULTS, 3, "") == [
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
