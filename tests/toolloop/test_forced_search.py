"""A search the request forces (Responses `tool_choice: {"type": "file_search"}`, or
`required` with no function of the client's) is made even when the server lets the model answer
instead — llama.cpp reads tool_choice as a string only and does not hold every model to
`required`: the proxy then writes the search itself and drops the answer made without it."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.fakes.tool_calls import Calls, Reply, Say, search, tool_results
from tests.fakes.upstream import FakeUpstream
from tests.stores.support import FAST
from tests.toolloop.support import (
    CATS,
    Proxy,
    chat_turns,
    file_search_tool,
    last_decision,
    model,
    ready,
    searching_chat,
)

GUESS = "I believe they ate mice."
"""What the model says when it does not search: never shown when the search was forced."""
GROUNDED = "They were fed sardines."


def answers_without_searching(body: dict[str, Any]) -> Reply:
    """A model that ignores tool_choice: it guesses, and answers from results once given some."""
    return Say(GROUNDED) if tool_results(body) else Say(GUESS)


def forced(client: openai.OpenAI, store_id: str, asked: Any = CATS, **fields: Any) -> Any:
    """A Responses request over the store whose first turn has to search."""
    return client.responses.create(
        model="m",
        input=asked,
        tools=file_search_tool(store_id),
        tool_choice={"type": "file_search"},
        **fields,
    )


@pytest.fixture
def base(make_proxy: Proxy) -> str:
    return make_proxy(vector_stores=FAST)


def test_a_forced_search_the_model_skipped_is_made_for_it(
    base: str, upstream: FakeUpstream
) -> None:
    model(upstream, answers_without_searching)
    client, store_id, ids = ready(base)
    response = forced(client, store_id, include=["file_search_call.results"])
    search_item, _ = response.output
    assert search_item.type == "file_search_call" and search_item.queries == [CATS]
    assert search_item.results and search_item.results[0].file_id == ids["lighthouse.txt"]
    assert response.output_text == GROUNDED and GUESS not in str(response.output)
    first, second = chat_turns(upstream)
    assert first["tool_choice"] == {"type": "function", "function": {"name": "file_search"}}
    call = second["messages"][-2]
    assert call["role"] == "assistant" and call["content"] is None
    assert call["tool_calls"][0]["id"] == "call_proxy_1"
    assert call["tool_calls"][0]["function"]["name"] == "file_search"
    assert second["messages"][-1]["tool_call_id"] == "call_proxy_1"
    assert "sardines" in second["messages"][-1]["content"]
    searches = last_decision(base)["decision"]["searches"]
    assert searches["searched_for_model"] == (
        "the upstream answered without the search the request forced (tool_choice): the proxy "
        "searched for the question"
    )
    assert [call["queries"] for call in searches["calls"]] == [[CATS]]


def test_a_forced_follow_up_is_searched_with_the_question_before_it(
    base: str, upstream: FakeUpstream
) -> None:
    model(upstream, answers_without_searching)
    client, store_id, _ = ready(base)
    follow_up = "And what did they drink?"
    conversation = [
        {"role": "user", "content": CATS},
        {"role": "assistant", "content": "Sardines."},
        {"role": "user", "content": follow_up},
    ]
    response = forced(client, store_id, conversation)
    assert response.output[0].queries == [  # type: ignore[union-attr]
        follow_up,
        f"{CATS} {follow_up}",
        f"Sardines. {follow_up}",  # "And …": it continues the exchange
    ]


def test_the_streamed_answer_never_shows_the_guess(base: str, upstream: FakeUpstream) -> None:
    model(upstream, answers_without_searching)
    client, store_id, _ = ready(base)
    events = list(forced(client, store_id, stream=True))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == GROUNDED
    done = [e.item.type for e in events if e.type == "response.output_item.done"]
    assert done == ["file_search_call", "message"]


def test_required_without_functions_of_the_clients_has_to_search(
    base: str, upstream: FakeUpstream
) -> None:
    model(upstream, answers_without_searching)
    _, store_id, _ = ready(base)
    body = searching_chat(store_id, tool_choice="required")
    answer = httpx.post(base + "/v1/chat/completions", json=body, timeout=60).json()
    assert answer["choices"][0]["message"]["content"] == GROUNDED
    assert last_decision(base)["decision"]["searches"]["searched_for_model"]


def test_a_model_that_searches_as_forced_keeps_its_own_queries_and_words(
    base: str, upstream: FakeUpstream
) -> None:
    def obeys(body: dict[str, Any]) -> Reply:
        if tool_results(body):
            return Say(GROUNDED)
        return Calls.of(search("keeper cats food"), text="Let me look.")

    model(upstream, obeys)
    client, store_id, _ = ready(base)
    response = forced(client, store_id)
    assert response.output[0].queries == ["keeper cats food"]  # type: ignore[union-attr]
    assert last_decision(base)["decision"]["searches"]["searched_for_model"] == ""


def test_nothing_is_forced_beside_a_function_of_the_clients_or_when_the_model_may_choose(
    base: str, upstream: FakeUpstream
) -> None:
    model(upstream, answers_without_searching)
    _, store_id, _ = ready(base)
    weather = {
        "type": "function",
        "function": {"name": "weather", "parameters": {"type": "object", "properties": {}}},
    }
    # `required` may be met by the client's own function: its call is the client's business.
    body = searching_chat(store_id, tool_choice="required", tools=[weather])
    answer = httpx.post(base + "/v1/chat/completions", json=body, timeout=60).json()
    assert answer["choices"][0]["message"]["content"] == GUESS
    assert chat_turns(upstream)[0]["tool_choice"] == "required"
    upstream.requests.clear()
    body = searching_chat(store_id)  # auto
    answer = httpx.post(base + "/v1/chat/completions", json=body, timeout=60).json()
    assert answer["choices"][0]["message"]["content"] == GUESS
    assert last_decision(base)["decision"]["searches"]["calls"] == []
    upstream.requests.clear()


def test_a_forced_turn_cut_at_the_limit_after_a_call_written_whole_searches_with_it(
    base: str, upstream: FakeUpstream
) -> None:
    """llama.cpp held to `required`: the model wrote its call as text, then blank lines to the
    token limit (seen with Qwen2.5-Coder-1.5B)."""
    written = '```json\n{"name": "file_search", "arguments": {"queries": ["keeper cats"]}}\n```'

    def pads(body: dict[str, Any]) -> Reply:
        return Say(GROUNDED) if tool_results(body) else Say(written + "\n" * 40, finish="length")

    model(upstream, pads)
    _, store_id, _ = ready(base)
    body = searching_chat(store_id, tool_choice="required")
    answer = httpx.post(base + "/v1/chat/completions", json=body, timeout=60).json()
    assert answer["choices"][0]["message"]["content"] == GROUNDED
    searches = last_decision(base)["decision"]["searches"]
    assert [call["queries"] for call in searches["calls"]] == [["keeper cats"]]
    assert searches["written_calls"] == 1 and searches["searched_for_model"] == ""
    # Not forced, a turn cut at the limit is the answer, whatever it holds.
    answer = httpx.post(base + "/v1/chat/completions", json=searching_chat(store_id), timeout=60)
    assert answer.json()["choices"][0]["finish_reason"] == "length"
