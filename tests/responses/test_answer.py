"""chat.completion → response object, with plain values."""

from __future__ import annotations

from typing import Any

from proxy.responses.answer import (
    Cited,
    Ids,
    file_citations,
    response_from_chat,
    usage_from_chat,
)
from proxy.responses.request import Asked

IDS = Ids("abc")
RESULTS = [
    {"title": "a.pdf", "page": 4, "file_id": "file-1"},
    {"title": "b.txt", "page": 1},
    {"title": "a.pdf", "page": 2, "file_id": "file-1"},
]


def completion(content: Any = "Hi.", finish: str = "stop", **message: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gemma",
        "choices": [
            {
                "index": 0,
                "finish_reason": finish,
                "message": {"role": "assistant", "content": content, **message},
            }
        ],
        "usage": {
            "prompt_tokens": 12,
            "completion_tokens": 3,
            "total_tokens": 15,
            "prompt_tokens_details": {"cached_tokens": 4},
        },
    }


def test_message_usage_and_echoed_request() -> None:
    asked = Asked(model="alias", instructions="be brief", metadata={"k": "v"}, temperature=0.1)
    response = response_from_chat(completion(), asked, IDS, Cited(), created_at=7)
    assert response["id"] == "resp_abc" and response["object"] == "response"
    assert response["status"] == "completed" and response["incomplete_details"] is None
    assert response["model"] == "gemma" and response["created_at"] == 7
    assert response["instructions"] == "be brief" and response["metadata"] == {"k": "v"}
    assert response["temperature"] == 0.1 and response["store"] is False
    assert response["output"] == [
        {
            "id": "msg_abc",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Hi.", "annotations": [], "logprobs": []}],
        }
    ]
    assert response["usage"] == {
        "input_tokens": 12,
        "input_tokens_details": {"cached_tokens": 4},
        "output_tokens": 3,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    }


def test_citations_as_annotations_at_the_end_of_the_text() -> None:
    fields = {"citations": ["a.pdf#page=4"], "search_results": RESULTS}
    response = response_from_chat(
        completion(), Asked(), IDS, Cited(RESULTS, "", fields), created_at=0
    )
    part = response["output"][0]["content"][0]
    assert part["text"] == "Hi."
    # No block to point into: places cannot be told apart, so one annotation per file.
    assert part["annotations"] == [
        {"type": "file_citation", "file_id": "file-1", "filename": "a.pdf", "index": 3},
        {"type": "file_citation", "filename": "b.txt", "index": 3},
    ]
    assert response["citations"] == ["a.pdf#page=4"]


def test_inline_block_follows_the_text_and_annotations_point_into_it() -> None:
    block = "\n\nSources:\n- a.pdf, pages 2, 4\n- b.txt, page 1"
    response = response_from_chat(completion(), Asked(), IDS, Cited(RESULTS, block), created_at=0)
    part = response["output"][0]["content"][0]
    assert part["text"] == "Hi." + block
    # One per file and place, each pointing at its place in its file's line.
    text = part["text"]
    assert [
        (a["filename"], text[: a["index"]].rsplit("\n", 1)[1], text[a["index"]])
        for a in part["annotations"]
    ] == [
        ("a.pdf", "- a.pdf, pages 2, ", "4"),
        ("b.txt", "- b.txt, page ", "1"),
        ("a.pdf", "- a.pdf, pages ", "2"),
    ]


def test_tool_calls_become_function_call_items_without_a_block() -> None:
    calls = [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
        {"id": "call_2", "type": "function", "function": {"name": "g", "arguments": '{"x":1}'}},
    ]
    block = "\n\nSources:\n- a.pdf, page 4"
    response = response_from_chat(
        completion(None, "tool_calls", tool_calls=calls),
        Asked(),
        IDS,
        Cited(RESULTS[:1], block),
        created_at=0,
    )
    assert response["output"] == [
        {
            "id": "fc_abc_0",
            "type": "function_call",
            "status": "completed",
            "call_id": "call_1",
            "name": "f",
            "arguments": "{}",
        },
        {
            "id": "fc_abc_1",
            "type": "function_call",
            "status": "completed",
            "call_id": "call_2",
            "name": "g",
            "arguments": '{"x":1}',
        },
    ]
    # Text beside tool calls: kept, but the answer is not finished, so no block.
    mixed = response_from_chat(
        completion("Checking.", "tool_calls", tool_calls=calls[:1]),
        Asked(),
        IDS,
        Cited(RESULTS[:1], block),
        created_at=0,
    )
    assert mixed["output"][0]["content"][0]["text"] == "Checking."
    assert mixed["output"][1]["type"] == "function_call"


def test_cut_off_answer_is_incomplete() -> None:
    response = response_from_chat(completion("Hi", "length"), Asked(), IDS, Cited(), created_at=0)
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["output"][0]["status"] == "incomplete"


def test_odd_answers() -> None:
    empty = response_from_chat({"choices": []}, Asked(model="m"), IDS, Cited(), created_at=0)
    assert empty["output"][0]["content"][0]["text"] == "" and empty["model"] == "m"
    assert empty["usage"] is None
    parts = completion([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])
    assert (
        response_from_chat(parts, Asked(), IDS, Cited(), created_at=0)["output"][0]["content"][0][
            "text"
        ]
        == "ab"
    )
    refused = response_from_chat(
        completion(None, refusal="no"), Asked(), IDS, Cited(), created_at=0
    )
    assert refused["output"][0]["content"][1] == {"type": "refusal", "refusal": "no"}


def test_usage_and_citations_helpers() -> None:
    assert usage_from_chat(None) is None
    assert usage_from_chat({"prompt_tokens": 2, "completion_tokens": 1})["total_tokens"] == 3  # type: ignore[index]
    assert file_citations([], 5, "") == []
