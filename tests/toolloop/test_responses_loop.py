"""The Responses API's file_search tool for a model that calls tools: the proxy runs OpenAI's
hosted loop — the model writes its queries, the proxy searches, the model answers — and the
client sees one response with a `file_search_call` per search (the real openai SDK)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.tool_calls import Calls, Reply, Say, search, tool_results
from tests.fakes.upstream import FakeUpstream
from tests.stores.support import FAST
from tests.toolloop.support import (
    CATS,
    SHARP,
    Proxy,
    chat_turns,
    file_search_tool,
    last_decision,
    model,
    ready,
    search_then_answer,
)


@pytest.fixture
def base(make_proxy: Proxy) -> str:
    return make_proxy(vector_stores=FAST)


@pytest.mark.parametrize("dialect", ["llamacpp", "vllm"])
def test_the_model_writes_the_queries_and_the_answer_cites_what_it_found(
    make_proxy: Proxy, upstream: FakeUpstream, dialect: str
) -> None:
    model(
        upstream,
        search_then_answer("lighthouse keeper fed the cats", "cats waited on the stone steps"),
        dialect,
    )
    base = make_proxy(vector_stores=FAST)
    client, store_id, ids = ready(base)
    response = client.responses.create(
        model="m",
        input=CATS,
        tools=file_search_tool(store_id, ranking_options=SHARP),
        include=["file_search_call.results"],
    )
    search_item, message = response.output
    assert search_item.type == "file_search_call" and search_item.status == "completed"
    assert search_item.queries == [  # the model's own
        "lighthouse keeper fed the cats",
        "cats waited on the stone steps",
    ]
    assert search_item.results and search_item.results[0].file_id == ids["lighthouse.txt"]
    assert "sardines" in (search_item.results[0].text or "")
    assert search_item.results[0].attributes == {"topic": "lighthouse"}
    assert response.output_text == "They were fed sardines."
    notes = message.content[0].annotations  # type: ignore[union-attr]
    assert [(n.type, n.file_id) for n in notes] == [("file_citation", ids["lighthouse.txt"])]  # type: ignore[union-attr]
    assert response.usage is not None and response.usage.output_tokens > 0

    first, second = chat_turns(upstream)
    # The question goes as asked, with the search function offered; no citation prompt.
    assert first["messages"][-1]["content"] == CATS
    [function] = first["tools"]
    assert function["function"]["name"] == "file_search"
    assert "vector store topics" in function["function"]["description"]
    assert first["tool_choice"] == "auto" and first["stream"] is True
    # The second turn carries the model's call and the passages, numbered as citations.
    call, result = second["messages"][-2:]
    assert (
        call["role"] == "assistant" and call["tool_calls"][0]["function"]["name"] == "file_search"
    )
    assert result["role"] == "tool" and result["tool_call_id"] == call["tool_calls"][0]["id"]
    assert result["content"].startswith(
        'Results for "lighthouse keeper fed the cats"; "cats waited on the stone steps":'
    )
    assert 'Citation 1: "The lighthouse keeper fed the cats' in result["content"]
    # Then the citation prompt's own ending, the user's question restated under the passages.
    assert result["content"].endswith(
        '"\n\nUse the citations above to respond to the user query, only if they are relevant. '
        "Otherwise, respond to the best of your ability without them.\n\n"
        f"User Query:\n\n{CATS}"
    )

    record = last_decision(base)["decision"]["searches"]
    assert record["mode"] == "tool" and "parses tool calls" in record["reason"]
    assert [len(c["queries"]) for c in record["calls"]] == [2]
    assert record["calls"][0]["given"] >= 1 and record["rounds"] == 2


def test_results_only_when_included_and_several_searches_each_an_item(
    base: str, upstream: FakeUpstream
) -> None:
    def script(body: dict[str, Any]) -> Reply:
        done = tool_results(body)
        if len(done) == 0:
            return Calls.of(
                search("lighthouse keeper fed the cats"),
                search("bakery on the corner sells sourdough bread and croissants"),
            )
        if len(done) == 2:
            return Calls.of(search("gluons carry colour charge between quarks"))
        return Say("Sardines, sourdough and gluons.")

    model(upstream, script)
    client, store_id, ids = ready(base)
    response = client.responses.create(
        model="m", input=CATS, tools=file_search_tool(store_id, ranking_options=SHARP)
    )
    kinds = [item.type for item in response.output]
    assert kinds == ["file_search_call"] * 3 + ["message"]
    assert [item.queries for item in response.output[:3]] == [  # type: ignore[union-attr]
        ["lighthouse keeper fed the cats"],
        ["bakery on the corner sells sourdough bread and croissants"],
        ["gluons carry colour charge between quarks"],
    ]
    assert all(item.results is None for item in response.output[:3])  # type: ignore[union-attr]
    assert len({item.id for item in response.output}) == 4
    files = {n.file_id for n in response.output[3].content[0].annotations}  # type: ignore[union-attr]
    assert files == {ids["lighthouse.txt"], ids["bakery.txt"], ids["quarks.txt"]}
    # The second turn's two calls were answered in order, each by its own tool message.
    third = chat_turns(upstream)[2]
    results = [m for m in third["messages"] if m["role"] == "tool"]
    assert "sardines" in results[0]["content"] and "sourdough" in results[1]["content"]


def test_streamed_each_search_is_an_item_where_it_happened(
    base: str, upstream: FakeUpstream
) -> None:
    cats = "lighthouse keeper fed the cats"
    model(upstream, search_then_answer(cats, said="Let me look.", answer="Sardines."))
    client, store_id, ids = ready(base)
    with client.responses.stream(
        model="m",
        input=CATS,
        tools=file_search_tool(store_id, ranking_options=SHARP),
        include=["file_search_call.results"],
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    searching = kinds.index("response.file_search_call.in_progress")
    assert kinds[searching - 1] == "response.output_item.added"
    assert kinds[searching : searching + 4] == [
        "response.file_search_call.in_progress",
        "response.file_search_call.searching",
        "response.file_search_call.completed",
        "response.output_item.done",
    ]
    # The text before the search streams first, the answer after it, in one message.
    deltas = [(kinds.index(e.type), e) for e in events if e.type == "response.output_text.delta"]
    assert deltas[0][1].delta.startswith("Let me")  # type: ignore[union-attr]
    assert [o.type for o in final.output] == ["message", "file_search_call"]
    assert final.output_text.startswith("Let me look.\n\nSardines.")
    assert final.output[1].results[0].file_id == ids["lighthouse.txt"]  # type: ignore[union-attr]
    notes = final.output[0].content[0].annotations  # type: ignore[union-attr]
    assert [n.file_id for n in notes] == [ids["lighthouse.txt"]]  # type: ignore[union-attr]


def test_a_model_that_answers_without_searching(base: str, upstream: FakeUpstream) -> None:
    model(upstream, lambda body: Say("I know this one: sardines."))
    client, store_id, _ = ready(base)
    response = client.responses.create(model="m", input=CATS, tools=file_search_tool(store_id))
    assert [o.type for o in response.output] == ["message"]
    assert response.output_text == "I know this one: sardines."
    assert response.output[0].content[0].annotations == []  # type: ignore[union-attr]
    assert len(chat_turns(upstream)) == 1
    record = last_decision(base)["decision"]["searches"]
    assert record["mode"] == "tool" and record["calls"] == [] and record["rounds"] == 1


def test_tool_choice_none_searches_nothing(base: str, upstream: FakeUpstream) -> None:
    model(upstream, lambda body: Say("No tools today."))
    client, store_id, _ = ready(base)
    response = client.responses.create(
        model="m", input=CATS, tools=file_search_tool(store_id), tool_choice="none"
    )
    assert [o.type for o in response.output] == ["message"]
    [turn] = chat_turns(upstream)
    assert "tools" not in turn and turn["messages"][-1]["content"] == CATS  # nothing injected
    decision = last_decision(base)["decision"]
    assert decision["searches"]["mode"] == "off"
    assert "tool_choice none" in decision["searches"]["reason"]


def test_tool_choice_file_search_makes_the_first_turn_search(
    base: str, upstream: FakeUpstream
) -> None:
    model(upstream, search_then_answer("cats"))
    client, store_id, _ = ready(base)
    client.responses.create(
        model="m",
        input=CATS,
        tools=file_search_tool(store_id),
        tool_choice={"type": "file_search"},
    )
    first, second = chat_turns(upstream)
    assert first["tool_choice"] == {"type": "function", "function": {"name": "file_search"}}
    assert second["tool_choice"] == "auto"  # forced once, not for ever


def test_the_output_sent_back_as_input_is_accepted(base: str, upstream: FakeUpstream) -> None:
    """A client that appends `response.output` to its next `input` (as the SDK's examples do)
    sends the file_search_call items back: they are taken, not refused."""
    model(upstream, search_then_answer("cats"))
    client, store_id, _ = ready(base)
    tools = file_search_tool(store_id)
    first = client.responses.create(model="m", input=CATS, tools=tools)
    follow_up = [
        {"role": "user", "content": CATS},
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"role": "user", "content": "And the bread?"},
    ]
    second = client.responses.create(model="m", input=follow_up, tools=tools)  # type: ignore[arg-type]
    assert second.output_text == "They were fed sardines."
