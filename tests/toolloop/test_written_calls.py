"""Search calls a model wrote as text its server did not parse: Qwen2.5-Coder 1.5B copies its
template's doubled braces without the `<tool_call>` tags, and llama.cpp hands them back as the
answer's text. The loop takes a turn made only of such calls as the calls, and holds that text
back from the client while it may still be one."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from proxy.toolloop.written import may_be_call, written_calls
from tests.fakes.tool_calls import Reply, Say, tool_results
from tests.fakes.upstream import FakeUpstream
from tests.stores.support import FAST
from tests.toolloop.support import (
    CATS,
    Proxy,
    chat_turns,
    events,
    in_turn,
    last_decision,
    model,
    ready,
    searching_chat,
)

KEEPER = "lighthouse keeper fed the cats"
QWEN = '{{"name": "file_search", "arguments": {"queries": ["' + KEEPER + '"]}}}}'
"""What Qwen2.5-Coder-1.5B-Instruct wrote through xllamacpp 2026.10, braces and all."""
TOOL = {"search": "tool", "affinity_threshold": 0.6}


def arguments(text: str) -> list[Any]:
    return [json.loads(call.arguments) for call in written_calls(text)]


def test_the_shapes_models_write_calls_in_are_taken() -> None:
    assert arguments(QWEN) == [{"queries": [KEEPER]}]
    tagged = '<tool_call>\n{"name": "file_search", "arguments": {"queries": ["a"]}}\n</tool_call>'
    assert arguments(tagged) == [{"queries": ["a"]}]
    fenced = '```json\n{"name": "file_search", "arguments": "{\\"query\\": \\"b\\"}"}\n```'
    assert arguments(fenced) == [{"query": "b"}]
    two = '{"name": "file_search", "arguments": {"queries": ["a"]}}\n' + tagged
    assert arguments(two) == [{"queries": ["a"]}, {"queries": ["a"]}]
    assert [call.index for call in written_calls(two)] == [0, 1]
    spaced = '{ {"name": "file_search", "parameters": {"queries": ["c"]}} }'
    assert arguments(spaced) == [{"queries": ["c"]}]


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "get_weather", "arguments": {"city": "Oslo"}}',  # the client's to read
        'I will search. {"name": "file_search", "arguments": {"queries": ["a"]}}',
        '{"name": "file_search", "arguments": {"queries": ["a"]}} and some prose',
        '{{"name": "file_search", "arguments": {"queries": ["a"',  # cut off
        '{"answer": "sardines"}',
        "Sardines.",
        "",
    ],
)
def test_anything_else_stays_text(text: str) -> None:
    assert written_calls(text) == []


def test_text_is_held_only_while_it_may_still_be_a_call() -> None:
    prefixes = ["", " ", "{", "{{", '{{"na', QWEN[:30], "<tool", "<tool_call>\n{", "```"]
    for prefix in [*prefixes, " {", "\n{{", "{ {", ' { "name']:
        assert may_be_call(prefix), prefix
    for prefix in ["The", '{"answer"', "[1]", "```python\nprint(1)", "<b>"]:
        assert not may_be_call(prefix), prefix


def qwen_searches_then_answers(body: dict[str, Any]) -> Reply:
    if not tool_results(body):
        return Say(QWEN)  # llama.cpp streams it as content, 7 characters a chunk
    return Say("They were fed sardines.")


def test_a_call_written_as_text_is_run_and_never_shown(
    make_proxy: Proxy, upstream: FakeUpstream
) -> None:
    model(upstream, qwen_searches_then_answers)
    base = make_proxy(vector_stores=FAST)
    client, store_id, _ = ready(base)
    chunks = list(
        client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": CATS}],
            stream=True,
            extra_body={"enrich": {**TOOL, "vector_store_ids": [store_id]}},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "They were fed sardines."
    searches = last_decision(base)["decision"]["searches"]
    assert searches["written_calls"] == 1
    assert [call["queries"] for call in searches["calls"]] == [[KEEPER]]
    # The model's next turn sees its call as a call, answered by the search.
    _, second = chat_turns(upstream)
    assistant, result = second["messages"][-2:]
    assert assistant["content"] is None
    [call] = assistant["tool_calls"]
    assert call["type"] == "function"
    assert call["function"] == {
        "name": "file_search",
        "arguments": json.dumps({"queries": [KEEPER]}),
    }
    assert result == {"role": "tool", "tool_call_id": call["id"], "content": result["content"]}
    assert "sardines" in result["content"]


def test_the_responses_answer_shows_the_written_call_as_a_search(
    make_proxy: Proxy, upstream: FakeUpstream
) -> None:
    model(upstream, qwen_searches_then_answers)
    base = make_proxy(vector_stores=FAST)
    client, store_id, _ = ready(base)
    response = client.responses.create(
        model="m",
        input=CATS,
        tools=[{"type": "file_search", "vector_store_ids": [store_id]}],
    )
    search, message = response.output
    assert search.type == "file_search_call" and search.queries == [KEEPER]
    assert response.output_text == "They were fed sardines."
    assert message.type == "message" and message.content[0].annotations  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "answer", ['{"answer": "sardines"}', '{"name": "feed", "arguments": {}} is not a search']
)
def test_json_that_is_no_search_call_reaches_the_client_whole(
    make_proxy: Proxy, upstream: FakeUpstream, answer: str
) -> None:
    model(upstream, lambda body: Say(answer))
    base = make_proxy(vector_stores=FAST)
    client, store_id, _ = ready(base)
    chunks = list(
        client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": CATS}],
            stream=True,
            extra_body={"enrich": {**TOOL, "vector_store_ids": [store_id]}},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == answer
    assert len(chat_turns(upstream)) == 1
    assert last_decision(base)["decision"]["searches"]["written_calls"] == 0


def test_a_written_call_counts_as_the_call_it_is_when_the_server_counted_nothing(
    make_proxy: Proxy, upstream: FakeUpstream
) -> None:
    # No usage from the server: the turn's tokens are its call's characters over four, the text
    # it was written as set aside.
    said = {"choices": [{"index": 0, "delta": {"content": QWEN}}]}
    done = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    model(upstream, qwen_searches_then_answers, raw=in_turn(1, lambda: events(said, done)))
    base = make_proxy(vector_stores=FAST)
    _, store_id, _ = ready(base)
    response = httpx.post(base + "/v1/chat/completions", json=searching_chat(store_id), timeout=60)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "They were fed sardines."
    searches = last_decision(base)["decision"]["searches"]
    [call] = written_calls(QWEN)
    assert searches["written_calls"] == 1
    assert searches["tokens"] == (len(call.name) + len(call.arguments)) // 4
