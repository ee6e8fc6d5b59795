"""Native Responses upstreams: `input` enriched in place, sources added to their answer."""

from __future__ import annotations

from typing import Any

from proxy.responses.answer import Cited
from proxy.responses.items import translate_input
from proxy.responses.native import NativeStream, cite_response, patch_input

RESULTS = [{"title": "a.pdf", "page": 2}]
BLOCK = "\n\nSources:\n- a.pdf, page 2"
FILE = {"type": "input_file", "filename": "a.pdf", "file_data": "data:application/pdf;base64,AA"}


def test_user_items_take_what_the_pipeline_made_of_them() -> None:
    items: list[Any] = [
        {"role": "user", "content": [{"type": "input_text", "text": "read"}, FILE]},
        {"role": "assistant", "content": "done", "id": "msg_1"},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "q"},
                {"type": "input_image", "image_url": "https://x/i.png", "detail": "low"},
            ],
        },
    ]
    messages, origins = translate_input(items)
    enriched = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "read"},
                {"type": "text", "text": "[attached: a.pdf]"},
            ],
        },
        {"role": "assistant", "content": "done"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "PROMPT"},
                {"type": "image_url", "image_url": {"url": "https://x/i.png", "detail": "low"}},
            ],
        },
    ]
    patched = patch_input(items, origins, len(messages), enriched)
    assert patched[0]["content"] == [
        {"type": "input_text", "text": "read"},
        {"type": "input_text", "text": "[attached: a.pdf]"},
    ]
    assert patched[1] is items[1]  # not a user item: untouched, its id kept
    assert patched[2] == {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "PROMPT"},
            {"type": "input_image", "image_url": "https://x/i.png", "detail": "low"},
        ],
    }
    # Context shifting dropped the first turn: the kept messages are matched from the end.
    shifted = patch_input(items, origins, len(messages), enriched[1:])
    assert shifted[0] is items[0] and shifted[2]["content"][0]["text"] == "PROMPT"


def response(text: str = "Hi.") -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": []}
    return {
        "id": "resp_1",
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "message", "id": "msg_1", "role": "assistant", "content": [part]},
        ],
    }


def test_cite_a_whole_response() -> None:
    original = response()
    cited = cite_response(original, Cited(RESULTS, BLOCK, {"citations": ["a.pdf#page=2"]}))
    part = cited["output"][1]["content"][0]
    assert part["text"] == "Hi." + BLOCK
    assert part["annotations"] == [
        {"type": "file_citation", "filename": "a.pdf", "index": len("Hi.") + BLOCK.index("2")}
    ]
    assert cited["citations"] == ["a.pdf#page=2"]
    assert original["output"][1]["content"][0]["text"] == "Hi."  # not changed in place
    assert cite_response(original, Cited()) is original


def test_stream_gets_a_delta_annotations_and_shifted_numbers() -> None:
    done = response()["output"][1]
    where = {"item_id": "msg_1", "output_index": 1, "content_index": 0}
    upstream = [
        {"type": "response.created", "response": {"id": "resp_1", "output": []}},
        {
            "type": "response.content_part.added",
            **where,
            "part": {"type": "output_text", "text": ""},
        },
        {"type": "response.output_text.delta", **where, "delta": "Hi."},
        {"type": "response.output_text.done", **where, "text": "Hi."},
        {"type": "response.content_part.done", **where, "part": done["content"][0]},
        {"type": "response.output_item.done", "output_index": 1, "item": done},
        {"type": "response.completed", "response": response()},
    ]
    for number, event in enumerate(upstream):
        event["sequence_number"] = number
    stream = NativeStream(Cited(RESULTS, BLOCK))
    out = [event for original in upstream for event in stream.feed(original)]
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    kinds = [e["type"] for e in out]
    assert kinds[3:6] == [
        "response.output_text.delta",
        "response.output_text.annotation.added",
        "response.output_text.done",
    ]
    assert out[3]["delta"] == BLOCK and out[5]["text"] == "Hi." + BLOCK
    assert out[6]["part"]["text"] == "Hi." + BLOCK and out[6]["part"]["annotations"]
    assert out[7]["item"]["content"][0]["text"] == "Hi." + BLOCK
    assert out[8]["response"]["output"][1]["content"][0]["annotations"][0]["filename"] == "a.pdf"
    assert upstream[3]["text"] == "Hi."  # the upstream's events are not changed in place
    untouched = NativeStream(Cited())
    assert untouched.feed(upstream[2]) == [upstream[2]]
