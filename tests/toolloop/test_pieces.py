"""The loop's pure parts: reading a turn from llama.cpp's and vLLM's chunks, reading the queries
of a call, the function offered, who writes the searches, the text of several turns as one."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.http.search_loop import Joined
from proxy.pipeline.search_space import (
    MAX_QUERY_CHARS,
    MAX_RESTATED,
    _capped,
    _merged,
    results_text,
)
from proxy.pipeline.stages.search_mode import ONCE_BY_DEFAULT, choose_search_mode
from proxy.retrieval.budget import Passage
from proxy.retrieval.history import HistoryRule
from proxy.retrieval.history import Turn as Said
from proxy.toolloop.function import (
    CallError,
    object_arguments,
    proxy_queries,
    read_queries,
    search_function,
)
from proxy.toolloop.loop import Text, added_usage, client_names, first_choice, must_search
from proxy.toolloop.turn import Shown, Turn, completion_chunk
from proxy.upstream.facts import Fact
from tests.fakes.tool_calls import Calls, Say, ToolModel, search

BODY: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("dialect", ["llamacpp", "vllm"])
def test_a_streamed_turn_is_put_together_from_the_servers_pieces(dialect: str) -> None:
    reply = Calls.of(search("cats", "dogs"), search("bread"), text="Let me see.")
    chunks = ToolModel(lambda body: reply, dialect=dialect).chunks(
        {**BODY, "stream_options": {"include_usage": True}}, reply
    )
    turn = Turn()
    shown = [turn.feed(chunk) for chunk in chunks]
    assert "".join(s.content for s in shown) == "Let me see."
    first, second = turn.ordered_calls()
    assert (first.name, first.arguments) == ("file_search", '{"queries": ["cats", "dogs"]}')
    assert (second.name, second.arguments) == ("file_search", '{"queries": ["bread"]}')
    assert first.id and second.id and first.id != second.id
    assert turn.finish_reason == "tool_calls"
    assert turn.usage is not None and turn.written_tokens() == turn.usage["completion_tokens"]
    if dialect == "vllm":  # the last piece of arguments came with the finish reason
        assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
        assert chunks[-2]["choices"][0]["delta"]["tool_calls"]


def test_a_name_sent_again_as_it_grows_is_one_name() -> None:
    turn = Turn()
    for piece in ({"name": "file_"}, {"name": "file_search"}, {"arguments": "{}"}):
        turn.feed(
            {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": piece}]}}]}
        )
    [call] = turn.ordered_calls()
    assert (call.name, call.arguments) == ("file_search", "{}")


def test_thinking_and_a_whole_answer_are_read_too() -> None:
    turn = Turn()
    assert turn.feed({"choices": [{"delta": {"reasoning_content": "hmm"}}]}) == Shown("", "hmm")
    reply = Say("Fine.")
    whole = ToolModel(lambda body: reply).completion(BODY, Calls.of(search("x")))
    turn = Turn()
    turn.feed(completion_chunk(whole))
    assert turn.ordered_calls()[0].name == "file_search" and turn.finish_reason == "tool_calls"
    assert Turn(content="a" * 40).written_tokens() == 10  # no usage: about four characters


@pytest.mark.parametrize(
    ("arguments", "queries", "dropped"),
    [
        ('{"queries": ["a b", "c"]}', ["a b", "c"], 0),
        ('{"query": "one"}', ["one"], 0),
        ('{"queries": "one"}', ["one"], 0),
        ('{"queries": ["  spaced   out ", "spaced out", ""]}', ["spaced out"], 0),
        ('{"queries": ["1", "2", "3", "4"]}', ["1", "2"], 2),
    ],
)
def test_queries_are_read_leniently(arguments: str, queries: list[str], dropped: int) -> None:
    found = read_queries(arguments, max_queries=2)
    assert (found.run, found.dropped) == (queries, dropped)


@pytest.mark.parametrize(
    ("arguments", "told"),
    [
        ('{"queries": ["a"', "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"queries": [1]}', "list of strings"),
        ('{"queries": []}', "no query was given"),
        ("", "no query was given"),
    ],
)
def test_a_bad_call_says_what_was_wrong(arguments: str, told: str) -> None:
    with pytest.raises(CallError, match=told):
        read_queries(arguments, max_queries=5)


def test_a_query_is_cut_to_a_bounded_length() -> None:
    [query] = read_queries('{"queries": ["' + "word " * 500 + '"]}', 5).run
    assert len(query) == 500


def test_the_function_names_what_it_searches_and_its_limit() -> None:
    scope = [f"f{n}.pdf" for n in range(25)]
    function = search_function(scope, 3)["function"]
    assert function["name"] == "file_search"
    assert "f0.pdf" in function["description"] and "and 5 more" in function["description"]
    assert "f24.pdf" not in function["description"]
    assert function["parameters"]["properties"]["queries"]["maxItems"] == 3
    assert object_arguments('{"a": 1}') == '{"a": 1}'
    assert object_arguments("[1]") == "{}" and object_arguments("{bad") == "{}"


YES: Fact[bool | None] = Fact(True, True, "llama.cpp /props chat_template_caps")
NO: Fact[bool | None] = Fact(False, True, "caps say no")
UNKNOWN: Fact[bool | None] = Fact(None, False, "a server that does not say")


@pytest.mark.parametrize(
    ("asked", "tool", "choice", "tools", "here", "mode", "why"),
    [
        ("auto", True, None, YES, None, "tool", "parses tool calls (llama.cpp"),
        ("auto", False, None, YES, None, "once", ONCE_BY_DEFAULT),
        ("tool", False, None, YES, None, "tool", "parses tool calls"),
        ("once", True, None, YES, None, "once", "enrich.search: once"),
        ("auto", True, "none", YES, None, "off", "tool_choice none"),
        ("auto", True, None, NO, None, "once", "does not parse the model's tool calls (caps"),
        ("tool", False, None, UNKNOWN, None, "once", "models.m.tools: true"),
        ("tool", False, None, YES, "Ollama: why", "once", "searched once: Ollama: why"),
    ],
)
def test_who_writes_the_searches(
    asked: str,
    tool: bool,
    choice: Any,
    tools: Fact[bool | None],
    here: str | None,
    mode: str,
    why: str,
) -> None:
    found, reason = choose_search_mode(asked, tool, choice, tools, here, "m")
    assert found == mode and why in reason


def test_the_first_turn_may_be_forced_and_the_rest_are_free() -> None:
    assert first_choice(None, forced_search=True)["function"]["name"] == "file_search"
    assert first_choice("required", False) == "required"
    named = {"type": "function", "function": {"name": "get_weather"}}
    assert first_choice(named, False) == named
    assert first_choice("auto", False) == first_choice(None, False) == "auto"


def test_the_first_turn_must_search_when_forced_or_required_with_nothing_else_to_call() -> None:
    weather = [{"type": "function", "function": {"name": "weather"}}]
    assert must_search("auto", True, weather) and must_search(None, True, [])
    assert must_search("required", False, []) and not must_search("required", False, weather)
    assert not must_search("auto", False, []) and not must_search(None, False, [])
    named = {"type": "function", "function": {"name": "weather"}}
    assert not must_search(named, False, weather)


def test_the_proxys_own_queries_read_a_follow_up_as_the_search_without_a_model_does() -> None:
    rule = HistoryRule()
    assert proxy_queries("  Why?  ", [], rule) == ["Why?"]
    earlier = [Said("user", "How fast is it? "), Said("assistant", "Fastest on 9 of 26 tests.")]
    assert proxy_queries("Where is it slower?", earlier, rule) == [
        "Where is it slower?",
        "How fast is it? Where is it slower?",
        "Fastest on 9 of 26 tests. Where is it slower?",  # "it" points back
    ]
    # A question of its own gets no answer before it; nor any, with `reply` 0.
    assert len(proxy_queries("What does the cache hold?", earlier, rule)) == 2
    assert len(proxy_queries("Where is it slower?", earlier, HistoryRule(reply=0.0))) == 2
    # The answer's first words only; the question always whole, within a query's length.
    long_answer = [Said("assistant", " ".join(f"w{n}" for n in range(200)))]
    *_, after = proxy_queries("And why?", long_answer, rule)
    assert after.startswith("w0 w1 ") and after.endswith("w39 And why?")
    long = "x" * (MAX_QUERY_CHARS + 10)
    assert proxy_queries(long, [Said("user", "earlier"), Said("assistant", "it")], rule) == [
        long[:MAX_QUERY_CHARS]  # no room for the question before it, nor the answer
    ]
    _, after_question, after_answer = proxy_queries(
        "And why?", [Said("user", "w " * MAX_QUERY_CHARS), Said("assistant", "a " * 400)], rule
    )
    assert len(after_question) <= MAX_QUERY_CHARS and after_question.endswith("w And why?")
    assert len(after_answer) <= MAX_QUERY_CHARS and after_answer.endswith("a And why?")
    # A long question leaves the answer what room there is, to the character.
    answered = [Said("assistant", "Fastest on nine tests.")]
    for length, said in [(480, "Fastest on nine tes"), (498, "F")]:
        question = "And why " + "y" * (length - 9) + "?"
        *_, last = proxy_queries(question, answered, rule)
        assert last == f"{said} {question}" and len(last) == MAX_QUERY_CHARS
    assert proxy_queries("And why " + "y" * 490 + "?", answered, rule) == [
        "And why " + "y" * 490 + "?"
    ]
    # A follow-up that only continues the exchange (the answer at `continuing`, 1) gets it too.
    assert proxy_queries("And for binary data?", answered, rule)[-1] == (
        "Fastest on nine tests. And for binary data?"
    )


def test_usage_of_every_turn_is_added_up() -> None:
    one = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    two = {"prompt_tokens": 30, "completion_tokens": 5, "total_tokens": 35}
    assert added_usage(added_usage(None, one), two) == {
        "prompt_tokens": 40,
        "completion_tokens": 7,
        "total_tokens": 47,
    }
    assert added_usage(one, None) == one
    # What is no count of tokens is left out: a server's null, text or flag.
    odd = {"prompt_tokens": None, "completion_tokens": "5", "total_tokens": True}
    assert added_usage(one, odd) == one


def test_the_text_of_later_turns_starts_after_a_blank_line() -> None:
    joined = Joined()
    pieces = [
        joined.take(Text(Shown("Let me ", ""), 1)),
        joined.take(Text(Shown("look.", ""), 1)),
        joined.take(Text(Shown("", "thinking"), 2)),
        joined.take(Text(Shown("Sardines.", ""), 3)),
    ]
    assert pieces[-1] == ("\n\nSardines.", "")
    assert joined.content == "Let me look.\n\nSardines." and joined.reasoning == "thinking"


def _passage(source: int, rank: int, text: str) -> Passage:
    return Passage(source, rank, text)


def test_a_call_takes_its_best_passages_rank_by_rank_leaving_out_what_was_given() -> None:
    by_source = [
        [_passage(0, 0, "a0"), _passage(0, 1, "a1"), _passage(0, 2, "a2")],
        [_passage(1, 0, "b0"), _passage(1, 1, "b1")],
    ]
    kept = _capped(by_source, 3, given={"a0"})
    assert [[p.text for p in source] for source in kept] == [["a1"], ["b0", "b1"]]
    text = results_text(["q1", "q2"], ["one", "two"], "How old is it?")
    assert text == (
        'Results for "q1"; "q2":\n\nCitation 1: "one"\n\nCitation 2: "two"\n\n'
        "Use the citations above to respond to the user query, only if they are relevant. "
        "Otherwise, respond to the best of your ability without them.\n\n"
        "User Query:\n\nHow old is it?"
    )


def test_a_long_or_empty_user_query_is_not_restated_after_the_results() -> None:
    told = "Use the citations above to respond to the user query, only if they are relevant. "
    told += "Otherwise, respond to the best of your ability without them."
    at_most = "x" * MAX_RESTATED
    assert results_text(["q"], ["one"], at_most).endswith(f"User Query:\n\n{at_most}")
    for question in [at_most + "x", "", "  \n"]:
        assert (
            results_text(["q"], ["one"], question)
            == f'Results for "q":\n\nCitation 1: "one"\n\n{told}'
        )


def test_rankings_of_several_queries_merge_rank_by_rank() -> None:
    from dataclasses import dataclass

    @dataclass
    class Chunk:
        index: int

    @dataclass
    class Hit:
        chunk: Chunk

    first = [Hit(Chunk(1)), Hit(Chunk(2))]
    second = [Hit(Chunk(3)), Hit(Chunk(1)), Hit(Chunk(4))]
    merged = _merged([first, second])  # type: ignore[list-item]
    assert [hit.chunk.index for hit in merged] == [1, 3, 2, 4]


def test_a_turn_without_usage_counts_about_four_characters_a_token() -> None:
    # Text, thinking and a call, each in pieces; no usage from the server: every character the
    # model wrote counts, the whole of each piece kept, rounded down.
    reply = Calls.of(search("cats"), text="Let me see.", reasoning="Cats eat fish, I think.")
    turn = Turn()
    for chunk in ToolModel(lambda body: reply).chunks(BODY, reply):
        turn.feed(chunk)
    [call] = turn.ordered_calls()
    assert (turn.content, turn.reasoning) == ("Let me see.", "Cats eat fish, I think.")
    written = len("Let me see.") + len("Cats eat fish, I think.") + len(call.name)
    written += len(call.arguments)
    assert turn.usage is None and written % 4 and turn.written_tokens() == written // 4
    # A server's count is taken as given, none included.
    assert Turn(content="a" * 40, usage={"completion_tokens": 0}).written_tokens() == 0


def test_the_clients_function_names_are_read_from_whatever_tools_it_sent() -> None:
    tools = ["x", {"type": "function"}, {"function": "get_time"}, {"function": {"name": 3}}]
    tools.append({"type": "function", "function": {"name": "get_weather"}})
    assert client_names({"tools": tools}) == {"get_weather"}
    assert client_names({}) == set()
