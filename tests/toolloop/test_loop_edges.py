"""The loop at its edges as the client and the model see them: the first turn as the preview
shows it, a turn the upstream refuses, an upstream that answers a streamed turn whole, what the
model is told of a function it made up, and calls it wrote as text."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

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
WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
}
EXAMPLE = '{"queries": ["a short search query", "another wording of it"]}'


@pytest.fixture
def base(make_proxy: Proxy) -> str:
    return make_proxy(vector_stores=FAST)


def test_the_preview_shows_the_clients_fields_tools_and_choice(
    make_proxy: Proxy, upstream: FakeUpstream
) -> None:
    model(upstream, search_then_answer(KEEPER))
    base = make_proxy(vector_stores=FAST, tool_search={"queries_per_call": 3})
    _, store_id, _ = ready(base)
    asked = searching_chat(store_id, temperature=0.3, tools=[WEATHER], tool_choice="required")
    preview = httpx.post(base + "/v1/enrich/preview", json=asked, timeout=60).json()
    body = preview["upstream"]["body"]
    assert body["temperature"] == 0.3 and body["model"] == "m"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["tool_choice"] == "required"
    search_tool, weather = body["tools"]
    assert weather == WEATHER
    assert search_tool["function"]["parameters"]["properties"]["queries"]["maxItems"] == 3
    assert "Give 1 to 3 short search queries" in search_tool["function"]["description"]


def test_a_refused_turn_says_which_and_what_to_do(base: str, upstream: FakeUpstream) -> None:
    model(upstream, search_then_answer(KEEPER), fail_in_turn=2)
    _, store_id, _ = ready(base)
    response = httpx.post(base + "/v1/chat/completions", json=searching_chat(store_id), timeout=60)
    assert response.status_code == 500
    assert response.json()["error"] == {
        "message": "the upstream answered 500 to turn 2 of the search loop: slot unavailable; "
        "its log says why: ask again, or search once instead (enrich.search: once, "
        "X-Enrich-Search: once)",
        "type": "upstream_error",
        "param": None,
        "code": "upstream_error",
    }


@pytest.mark.parametrize("dialect", ["llamacpp", "vllm"])
def test_an_upstream_that_answers_a_turn_whole_is_read_whole(
    base: str, upstream: FakeUpstream, dialect: str
) -> None:
    def script(body: dict[str, Any]) -> Reply:
        if not tool_results(body):
            return Calls.of(search(KEEPER), search("sardines harbour"))
        return Say("Sardines.", reasoning="It says sardines.")

    tool_model = model(upstream, script, dialect, whole=True)
    _, store_id, _ = ready(base)
    answer = httpx.post(
        base + "/v1/chat/completions", json=searching_chat(store_id), timeout=60
    ).json()
    message = answer["choices"][0]["message"]
    assert message["content"].startswith("Sardines.")
    assert message["reasoning_content"] == "It says sardines."
    assert answer["id"] == tool_model.answered[0]["id"]
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert answer["usage"]["completion_tokens"] == sum(
        turn["usage"]["completion_tokens"] for turn in tool_model.answered
    )
    calls = last_decision(base)["decision"]["searches"]["calls"]
    assert [call["queries"] for call in calls] == [[KEEPER], ["sardines harbour"]]
    assert answer["citations"] == ["lighthouse.txt#line=1"]


@pytest.mark.parametrize("stream", [False, True])
def test_whole_turns_text_reaches_the_client_one_turn_after_another(
    base: str, upstream: FakeUpstream, stream: bool
) -> None:
    # Text without thinking, as most models write: each whole turn's words are the client's,
    # streamed or not, a blank line where the next turn's begin.
    script = search_then_answer(KEEPER, said="Let me look that up.", answer="Sardines.")
    model(upstream, script, whole=True)
    _, store_id, _ = ready(base)
    body = searching_chat(store_id, stream=stream)
    answer = httpx.post(base + "/v1/chat/completions", json=body, timeout=60)
    if stream:
        chunks = [json.loads(line[6:]) for line in answer.text.split("\n") if line[6:7] == "{"]
        deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
        assert not any(delta.get("reasoning_content") for delta in deltas)
        content = "".join(delta.get("content") or "" for delta in deltas)
    else:
        message = answer.json()["choices"][0]["message"]
        assert "reasoning_content" not in message
        content = message["content"]
    assert content.startswith("Let me look that up.\n\nSardines.")


def test_a_made_up_function_is_named_back_cut_short(base: str, upstream: FakeUpstream) -> None:
    name = "look_up_" + "x" * 300

    def script(body: dict[str, Any]) -> Reply:
        if not tool_results(body):
            return Calls.of(Call(name, "{}"))
        return Say("Sardines.")

    model(upstream, script)
    _, store_id, _ = ready(base)
    httpx.post(base + "/v1/chat/completions", json=searching_chat(store_id), timeout=60)
    [told] = tool_results(chat_turns(upstream)[-1])
    assert told == (
        f"error: there is no function named {json.dumps(name)[:200]}; call file_search to "
        "search the user's files"
    )


def test_a_call_written_as_text_keeps_its_words_and_may_lack_arguments(
    base: str, upstream: FakeUpstream
) -> None:
    french = "le gardien du phare nourrit les chats à Brest"

    def script(body: dict[str, Any]) -> Reply:
        done = tool_results(body)
        if not done:
            arguments = {"queries": [french]}
            return Say(json.dumps({"name": "file_search", "arguments": arguments}))
        if len(done) == 1:
            return Say('{"name": "file_search"}')
        return Say("Sardines.")

    model(upstream, script)
    _, store_id, _ = ready(base)
    httpx.post(base + "/v1/chat/completions", json=searching_chat(store_id), timeout=60)
    messages = chat_turns(upstream)[-1]["messages"]
    first, second = [m["tool_calls"][0] for m in messages if m.get("tool_calls")]
    # The model's words as it wrote them, not escaped: what it reads back is what it wrote.
    assert first["function"]["arguments"] == '{"queries": ["' + french + '"]}'
    assert first["id"] == "call_1_0" and second["id"] == "call_2_0"
    told = tool_results(chat_turns(upstream)[-1])[1]
    assert told == f"error: no query was given; call file_search with {EXAMPLE}"
    assert last_decision(base)["decision"]["searches"]["written_calls"] == 2


def test_every_turn_carries_the_clients_fields_and_the_models_own_call_ids(
    base: str, upstream: FakeUpstream
) -> None:
    tool_model = model(upstream, search_then_answer(KEEPER))
    _, store_id, _ = ready(base)
    asked = searching_chat(
        store_id, temperature=0.3, max_tokens=50, tools=[WEATHER], tool_choice="required"
    )
    httpx.post(base + "/v1/chat/completions", json=asked, timeout=60)
    first, second = chat_turns(upstream)
    for turn in (first, second):
        assert (turn["temperature"], turn["max_tokens"], turn["model"]) == (0.3, 50, "m")
        assert [tool["function"]["name"] for tool in turn["tools"]] == [
            "file_search",
            "get_weather",
        ]
    assert (first["tool_choice"], second["tool_choice"]) == ("required", "auto")
    [call] = next(m for m in second["messages"] if m.get("tool_calls"))["tool_calls"]
    assert call["id"] == tool_model.answered[0]["call_ids"][0]


@pytest.mark.parametrize("stream", [False, True])
def test_the_answers_finish_reason_when_the_server_gives_none_or_the_wrong_one(
    base: str, upstream: FakeUpstream, stream: bool
) -> None:
    # A client's call ends the answer as a call, whatever the server said (Ollama says "stop");
    # an answer the server ended without a reason ended as any answer does: "stop".
    def finished(body: dict[str, Any]) -> str:
        answer = httpx.post(base + "/v1/chat/completions", json=body, timeout=60)
        if not stream:
            [choice] = answer.json()["choices"]
            return str(choice["finish_reason"])
        chunks = [json.loads(line[6:]) for line in answer.text.split("\n") if line[6:7] == "{"]
        return next(
            c["choices"][0]["finish_reason"]
            for c in chunks
            if c["choices"] and c["choices"][0]["finish_reason"]
        )

    _, store_id, _ = ready(base)
    model(upstream, lambda body: Calls.of(Call("get_weather", "{}"), finish="stop"))
    assert finished(searching_chat(store_id, tools=[WEATHER], stream=stream)) == "tool_calls"
    model(upstream, lambda body: Say("Sardines.", finish=""))
    assert finished(searching_chat(store_id, stream=stream)) == "stop"
