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


def test_only_the_first_choice_is_read_whatever_else_a_chunk_holds() -> None:
    turn = Turn()
    chunk = {
        "choices": [
            "junk",
            {"index": 1, "delta": {"content": "another answer"}, "finish_reason": "stop"},
            {"index": 0, "delta": None},
            {"index": 0, "delta": {"content": "Hi"}},
        ]
    }
    assert turn.feed(chunk) == Shown("Hi") and turn.finish_reason is None


def test_thinking_under_either_name() -> None:
    turn = Turn()
    assert turn.feed({"choices": [{"delta": {"reasoning": "hmm"}}]}) == Shown("", "hmm")
    both = {"reasoning_content": "this", "reasoning": "not this"}
    assert turn.feed({"choices": [{"delta": both}]}) == Shown("", "this")
    assert turn.reasoning == "hmmthis"


def pieces(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"tool_calls": list(calls)}}]}


def test_calls_without_an_index_are_numbered_by_their_place() -> None:
    turn = Turn()
    turn.feed(
        pieces(
            {"index": True, "function": {"name": "a", "arguments": "{}"}},
            {"function": {"name": "b", "arguments": "{}"}},
        )
    )
    assert [(c.index, c.name) for c in turn.ordered_calls()] == [(0, "a"), (1, "b")]


def test_a_name_in_pieces_is_put_together_and_an_empty_or_odd_one_changes_nothing() -> None:
    turn = Turn()
    for piece in (
        {"name": "file_"},
        {"name": "search"},
        {"name": "", "arguments": "{}"},
        {"name": 5},
    ):
        turn.feed(pieces({"index": 0, "function": piece}))
    [call] = turn.ordered_calls()
    assert (call.name, call.arguments) == ("file_search", "{}")


def test_arguments_sent_parsed_are_kept_as_written() -> None:
    turn = Turn()
    parsed = {"queries": ["le phare à Brest"]}
    turn.feed(pieces({"index": 0, "function": {"name": "file_search", "arguments": parsed}}))
    assert turn.ordered_calls()[0].arguments == '{"queries": ["le phare à Brest"]}'
