"""A turn read from what servers send that the fake tool model does not: a whole answer whose
calls carry their own (wrong) index, entries that are not objects, names that change mid-turn."""

from __future__ import annotations

from typing import Any

from proxy.toolloop.turn import Shown, Turn, completion_chunk


def whole(message: Any, *choices: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 7,
        "model": "served",
        "choices": [*choices, {"index": 0, "message": message, "finish_reason": "tool_calls"}],
        "usage": {"completion_tokens": 3},
    }


def call(name: str, arguments: str, **fields: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": arguments}, **fields}


def test_the_calls_of_a_whole_answer_are_numbered_in_order() -> None:
    # A server that numbers every call of a whole message 0 (or not at all) still made two.
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": ["junk", call("a", "{}", id="x", index=0), call("b", "[]", index=0)],
    }
    turn = Turn()
    turn.feed(completion_chunk(whole(message)))
    assert [(c.index, c.id, c.name, c.arguments) for c in turn.ordered_calls()] == [
        (1, "x", "a", "{}"),
        (2, "", "b", "[]"),
    ]
    assert (turn.id, turn.created, turn.model, turn.usage) == (
        "chatcmpl-1",
        7,
        "served",
        {"completion_tokens": 3},
    )
    assert turn.finish_reason == "tool_calls"


def test_a_whole_answer_skips_choices_that_are_not_objects() -> None:
    turn = Turn()
    shown = turn.feed(completion_chunk(whole({"content": "Fine."}, "junk")))
    assert shown == Shown("Fine.") and turn.finish_reason == "tool_calls"
    empty = Turn()
    assert empty.feed(completion_chunk(whole(None))) == Shown()
    assert empty.finish_reason == "tool_calls" and empty.calls == {}


def test_the_first_chunk_that_names_the_turn_names_it() -> None:
    turn = Turn()
    turn.feed({"choices": [], "id": None, "created": True, "model": 3})
    turn.feed({"id": "first", "created": 5, "model": "served", "choices": []})
    turn.feed({"id": "later", "created": 6, "model": "other", "choices": []})
    assert (turn.id, turn.created, turn.model) == ("first", 5, "served")
