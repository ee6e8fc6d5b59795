"""Chat chunks → Responses stream events, with plain values, checked by the SDK's own parser."""

from __future__ import annotations

from typing import Any

from openai import omit
from openai._models import construct_type
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import ResponseStreamEvent

from proxy.responses.answer import Cited, Ids, response_from_chat
from proxy.responses.events import ResponseStream, sse
from proxy.responses.replay import events_from_response
from proxy.responses.request import Asked

IDS = Ids("abc")
RESULTS = [{"title": "a.pdf", "page": 4, "file_id": "file-1"}]
BLOCK = "\n\nSources:\n- a.pdf, page 4"


def chunk(content: str | None = None, finish: str | None = None, **delta: Any) -> dict[str, Any]:
    if content is not None:
        delta["content"] = content
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "gemma",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def call(index: int, name: str | None = None, arguments: str = "", id: str | None = None) -> Any:
    function: dict[str, Any] = {"arguments": arguments}
    if name is not None:
        function["name"] = name
    return {"index": index, "id": id, "type": "function", "function": function}


def run(chunks: list[dict[str, Any]], cited: Cited | None = None) -> list[dict[str, Any]]:
    stream = ResponseStream(Asked(model="m"), IDS, cited or Cited(), created_at=1)
    events = stream.start()
    for piece in chunks:
        events += stream.feed(piece)
    return events + stream.finish() + stream.finish()  # a second finish adds nothing


def parsed(events: list[dict[str, Any]]) -> Any:
    """What the openai SDK's stream helper makes of the events (it raises on a bad sequence)."""
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    for event in events:
        state.handle_event(construct_type(type_=ResponseStreamEvent, value=event))  # type: ignore[arg-type]
    return state._completed_response


def test_text_stream_with_sources() -> None:
    usage = {"id": "c", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}
    events = run(
        [chunk("Hel", role="assistant"), chunk("lo"), chunk(finish="stop"), usage],
        Cited(RESULTS, BLOCK, {"citations": ["a.pdf#page=4"]}),
    )
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.annotation.added",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[6]["delta"] == BLOCK
    assert events[7]["annotation"] == {
        "type": "file_citation",
        "file_id": "file-1",
        "filename": "a.pdf",
        # At its place in its file's line of the block.
        "index": len("Hello") + BLOCK.index("4"),
    }
    final = events[-1]["response"]
    assert final["usage"]["input_tokens"] == 5 and final["model"] == "gemma"
    assert final["citations"] == ["a.pdf#page=4"]
    response = parsed(events)
    assert response.output_text == "Hello" + BLOCK
    assert response.output[0].content[0].annotations[0].filename == "a.pdf"


def test_tool_calls_interleaved_with_text() -> None:
    events = run(
        [
            chunk("Let me check."),
            chunk(tool_calls=[call(0, "weather", '{"ci', id="call_a")]),
            chunk(tool_calls=[call(0, arguments='ty":"Oslo"}')]),
            chunk(tool_calls=[call(1, "time", "{}", id="call_b")]),
            chunk(finish="tool_calls"),
        ],
        Cited(RESULTS, BLOCK),
    )
    response = parsed(events)
    kinds = [item.type for item in response.output]
    assert kinds == ["message", "function_call", "function_call"]
    assert response.output_text == "Let me check."  # no block: the answer is not finished
    assert response.output[0].content[0].annotations[0].index == len("Let me check.")
    weather, clock = response.output[1], response.output[2]
    assert (weather.call_id, weather.name, weather.arguments) == (
        "call_a",
        "weather",
        '{"city":"Oslo"}',
    )
    assert (clock.call_id, clock.name) == ("call_b", "time")
    # The first call is done before the second one starts.
    order = [(e["type"], e.get("output_index")) for e in events]
    assert order.index(("response.output_item.done", 1)) < order.index(
        ("response.output_item.added", 2)
    )


def test_cut_off_and_empty_streams() -> None:
    cut = parsed(run([chunk("Hi"), chunk(finish="length")]))
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"
    empty = parsed(run([]))
    assert empty.output_text == "" and empty.status == "completed"


def test_other_choices_are_ignored() -> None:
    second = {"choices": [{"index": 1, "delta": {"content": "other"}, "finish_reason": None}]}
    assert parsed(run([chunk("one"), second])).output_text == "one"


def test_a_whole_response_as_events() -> None:
    completion = {
        "model": "gemma",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "content": "Sure.",
                    "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}],
                },
            }
        ],
    }
    whole = response_from_chat(completion, Asked(), IDS, Cited(RESULTS), created_at=1)
    events = events_from_response(whole)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    response = parsed(events)
    assert response.output_text == "Sure."
    assert response.output[1].arguments == "{}"
    assert sse(events[0]).startswith(b"event: response.created\ndata: {")
