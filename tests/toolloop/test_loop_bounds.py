"""Where the loop stops: the tokens the model wrote in its search turns, counted over every turn
up to the bound itself; a turn cut off or asked without tools, whose calls are not run; and
what the record says stopped it."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from proxy.pipeline.search_space import LAST_TURN
from tests.fakes.tool_calls import Call, Calls, Reply, Say, search, tool_results
from tests.fakes.upstream import FakeUpstream
from tests.stores.support import FAST
from tests.toolloop.support import (
    Proxy,
    chat_turns,
    last_decision,
    model,
    ready,
    search_then_answer,
    searching_chat,
)

KEEPER = "lighthouse keeper fed the cats"


@pytest.fixture
def base(make_proxy: Proxy) -> str:
    return make_proxy(vector_stores=FAST)


def asked(base: str, store_id: str, **fields: Any) -> dict[str, Any]:
    response = httpx.post(
        base + "/v1/chat/completions", json=searching_chat(store_id, **fields), timeout=60
    )
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def of_tokens(count: int, word: str) -> Call:
    """A search call the fake counts as `count` tokens written (a quarter of its arguments' length,
    plus one)."""
    call = search("")
    query = word * (4 * (count - 1) - len(call.arguments))
    found = search(query)
    assert len(found.arguments) // 4 + 1 == count
    return found


def test_the_tokens_of_every_search_turn_count_up_to_the_bound(
    make_proxy: Proxy, upstream: FakeUpstream
) -> None:
    def script(body: dict[str, Any]) -> Reply:
        if "tools" not in body:
            return Say("Sardines.")
        return Calls.of(of_tokens(32, "ab"[len(tool_results(body))]))

    model(upstream, script)
    base = make_proxy(vector_stores=FAST, tool_search={"rounds": 3, "max_tokens": 64})
    _, store_id, _ = ready(base)
    asked(base, store_id)
    # Two turns of 32 tokens reach 64: the third, though within its rounds, has no tools.
    assert ["tools" in turn for turn in chat_turns(upstream)] == [True, True, False]
    record = last_decision(base)["decision"]["searches"]
    assert record["tokens"] == 64 and record["rounds"] == 3
    assert record["forced"] == (
        "the model wrote 64 tokens in its search turns (tool_search.max_tokens 64)"
    )


def test_a_loop_within_its_bounds_forced_nothing(base: str, upstream: FakeUpstream) -> None:
    model(upstream, search_then_answer(KEEPER))
    _, store_id, _ = ready(base)
    asked(base, store_id)
    assert ["tools" in turn for turn in chat_turns(upstream)] == [True, True]
    record = last_decision(base)["decision"]["searches"]
    assert record["forced"] == "" and record["rounds"] == 2
    [told] = tool_results(chat_turns(upstream)[1])
    assert LAST_TURN not in told  # the model may still search: it is not told otherwise


def test_a_model_that_searches_without_tools_is_answered_as_it_is(
    make_proxy: Proxy, upstream: FakeUpstream
) -> None:
    # It calls the search in the turn asked without tools too: that call is not run.
    model(upstream, lambda body: Calls.of(search(f"{KEEPER} {len(tool_results(body))}")))
    base = make_proxy(vector_stores=FAST, tool_search={"rounds": 1})
    _, store_id, _ = ready(base)
    answer = asked(base, store_id)
    assert len(chat_turns(upstream)) == 2
    assert "tool_calls" not in answer["choices"][0]["message"]
    record = last_decision(base)["decision"]["searches"]
    assert record["forced"] == "the model was still searching after 1 turns (tool_search.rounds)"
    assert len(record["calls"]) == 1


def test_a_call_written_as_text_in_the_turn_without_tools_is_its_answer(
    make_proxy: Proxy, upstream: FakeUpstream
) -> None:
    written = json.dumps({"name": "file_search", "arguments": {"queries": [KEEPER]}})

    def script(body: dict[str, Any]) -> Reply:
        return Say(written) if "tools" not in body else Calls.of(search(KEEPER))

    model(upstream, script)
    base = make_proxy(vector_stores=FAST, tool_search={"rounds": 1})
    _, store_id, _ = ready(base)
    answer = asked(base, store_id)
    assert answer["choices"][0]["message"]["content"].startswith(written)
    assert len(chat_turns(upstream)) == 2
    assert last_decision(base)["decision"]["searches"]["written_calls"] == 0


def test_calls_cut_off_at_the_token_limit_are_not_run(base: str, upstream: FakeUpstream) -> None:
    model(upstream, lambda body: Calls.of(search(KEEPER), finish="length"))
    _, store_id, _ = ready(base)
    answer = asked(base, store_id)
    assert answer["choices"][0]["finish_reason"] == "length"
    assert len(chat_turns(upstream)) == 1
    assert last_decision(base)["decision"]["searches"]["calls"] == []


def test_the_record_names_the_clients_functions_called_and_the_searches_left(
    base: str, upstream: FakeUpstream
) -> None:
    tools = [
        {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
        for name in ("get_weather", "get_time")
    ]

    def script(body: dict[str, Any]) -> Reply:
        if not tool_results(body):
            return Calls.of(search(KEEPER))
        calls = (Call("get_weather", "{}"), search("x"), Call("get_time", "{}"))
        return Calls.of(*calls, text="Let me ask.")

    tool_model = model(upstream, script)
    _, store_id, _ = ready(base)
    answer = asked(base, store_id, tools=tools)
    message = answer["choices"][0]["message"]
    assert message["content"] == "Let me ask."
    calls = message["tool_calls"]
    assert [call["function"]["name"] for call in calls] == ["get_weather", "get_time"]
    assert answer["usage"]["completion_tokens"] == sum(
        turn["usage"]["completion_tokens"] for turn in tool_model.answered
    )
    assert last_decision(base)["decision"]["searches"]["stopped"] == (
        "the model called get_time, get_weather of the client's functions: the answer goes back "
        "with the call (1 search call(s) of that turn not run)"
    )


def test_the_record_names_the_clients_function_called_alone(
    base: str, upstream: FakeUpstream
) -> None:
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {}}}
    model(upstream, lambda body: Calls.of(Call("get_weather", "{}")))
    _, store_id, _ = ready(base)
    assert asked(base, store_id, tools=[weather])["choices"][0]["finish_reason"] == "tool_calls"
    assert last_decision(base)["decision"]["searches"]["stopped"] == (
        "the model called get_weather of the client's functions: the answer goes back with the call"
    )


def test_the_record_keeps_each_call_of_a_turn_with_what_was_wrong(
    base: str, upstream: FakeUpstream
) -> None:
    def script(body: dict[str, Any]) -> Reply:
        if tool_results(body):
            return Say("Sardines.")
        made_up, broken = Call("search_web", "{}"), Call("file_search", "[1]")
        return Calls.of(made_up, broken, *[search(f"{KEEPER} {n}") for n in range(7)])

    model(upstream, script)
    _, store_id, _ = ready(base)
    asked(base, store_id)
    calls = last_decision(base)["decision"]["searches"]["calls"]
    assert [(c["round"], c["queries"], c["error"]) for c in calls] == [
        (1, [], "unknown function 'search_web'"),
        (
            1,
            [],
            'the arguments must be a JSON object such as {"queries": '
            '["a short search query", "another wording of it"]}',
        ),
        *[(1, [f"{KEEPER} {n}"], "") for n in range(6)],
        (
            1,
            [],
            "not run: at most 8 calls are run from one turn; give several queries in one "
            "file_search call instead",
        ),
    ]


def test_an_empty_answer_after_searching_is_asked_again_without_tools(
    base: str, upstream: FakeUpstream
) -> None:
    # Seen with Qwen2.5-Coder-1.5B: after its searches, a turn with no text and no call.
    def script(body: dict[str, Any]) -> Reply:
        if not tool_results(body):
            return Calls.of(search(KEEPER))
        return Say("Sardines." if "tools" not in body else "")

    model(upstream, script)
    _, store_id, _ = ready(base)
    answer = asked(base, store_id)
    assert answer["choices"][0]["message"]["content"] == "Sardines."
    turns = chat_turns(upstream)
    assert ["tools" in turn for turn in turns] == [True, True, False]
    # The same conversation once more, its last result telling the model to answer now.
    assert turns[2]["messages"][:-1] == turns[1]["messages"][:-1]
    assert tool_results(turns[2])[-1] == f"{tool_results(turns[1])[-1]}\n\n{LAST_TURN}"
    record = last_decision(base)["decision"]["searches"]
    assert record["forced"] == "the model answered nothing after its searches"
    assert record["rounds"] == 3 and len(record["calls"]) == 1

    # Streamed, the client sees the one answer.
    streamed = httpx.post(
        base + "/v1/chat/completions", json=searching_chat(store_id, stream=True), timeout=60
    )
    text = "".join(
        (json.loads(line[6:])["choices"] or [{}])[0].get("delta", {}).get("content") or ""
        for line in streamed.text.splitlines()
        if line.startswith("data: {")
    )
    assert text == "Sardines."


def test_an_empty_answer_without_a_search_or_when_told_to_answer_is_the_answer(
    base: str, upstream: FakeUpstream
) -> None:
    # Without a search the loop gave the model nothing to answer from: its answer is its own.
    model(upstream, lambda body: Say(""))
    _, store_id, _ = ready(base)
    assert asked(base, store_id)["choices"][0]["message"]["content"] == ""
    assert len(chat_turns(upstream)) == 1
    assert last_decision(base)["decision"]["searches"]["forced"] == ""

    # Empty again when told to answer: that is the answer, no fourth turn.
    upstream.requests.clear()
    model(upstream, lambda body: Calls.of(search(KEEPER)) if not tool_results(body) else Say(""))
    assert asked(base, store_id)["choices"][0]["message"]["content"] == ""
    assert ["tools" in turn for turn in chat_turns(upstream)] == [True, True, False]


def test_an_empty_turn_cut_off_at_the_token_limit_after_searching_is_the_answer(
    base: str, upstream: FakeUpstream
) -> None:
    # Its tokens ran out (a model that thought them all away): asking again would not help.
    def script(body: dict[str, Any]) -> Reply:
        return Calls.of(search(KEEPER)) if not tool_results(body) else Say("", finish="length")

    model(upstream, script)
    _, store_id, _ = ready(base)
    answer = asked(base, store_id)
    assert answer["choices"][0]["finish_reason"] == "length"
    assert ["tools" in turn for turn in chat_turns(upstream)] == [True, True]
    assert last_decision(base)["decision"]["searches"]["forced"] == ""
