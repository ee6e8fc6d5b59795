"""The "Sources:" block, the X-Enrich-Sources header and the stream chunk, with plain values."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from proxy.pipeline.citing import (
    StreamSources,
    cited_files,
    source_offsets,
    sources_block,
    sources_header,
    with_sources,
)
from proxy.pipeline.rewrite import replace_last_user_text

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
