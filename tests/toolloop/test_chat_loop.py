"""Chat Completions with `enrich.search: tool`: the same loop, answered as one chat completion
(or its chunks) with `citations` and `search_results`; and each behaviour of the loop at its
edges — a model that loops, malformed calls, the client's own functions, a stream cut, a client
gone, an upstream that cannot call tools (the real openai SDK)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from tests.callers import sdk
from tests.fakes.tool_calls import Call, Calls, Reply, Say, search, tool_results
from tests.fakes.upstream import FakeUpstream
from tests.stores.support import FAST
from tests.toolloop.support import (
    CATS,
    Proxy,
    chat_turns,
    last_decision,
    model,
    ready,
    search_then_answer,
)

KEEPER = "lighthouse keeper fed the cats"
TOOL = {"search": "tool", "affinity_threshold": 0.6}


def ask(store_id: str, **enrich: Any) -> dict[str, Any]:
    return {"enrich": {**TOOL, "vector_store_ids": [store_id], **enrich}}


@pytest.fixture
def base(make_proxy: Proxy) -> str:
    return make_proxy(vector_stores=FAST)


@pytest.mark.parametrize("dialect", ["llamacpp", "vllm"])
def test_chat_answer_with_citations_and_the_searches_in_headers(
    make_proxy: Proxy, upstream: FakeUpstream, dialect: str
) -> None:
    model(upstream, search_then_answer(KEEPER, "sardines harbour"), dialect)
    base = make_proxy(vector_stores=FAST)
    client, store_id, ids = ready(base)
    raw = client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": CATS}], extra_body=ask(store_id)
    )
    answer = raw.parse()
    assert answer.choices[0].message.content == "They were fed sardines."
    assert answer.choices[0].finish_reason == "stop"
    assert answer.choices[0].message.tool_calls is None  # the proxy's own calls stay inside
    extra = answer.model_extra or {}
    assert extra["citations"] == ["lighthouse.txt#line=1"]
    assert extra["search_results"][0]["file_id"] == ids["lighthouse.txt"]
    assert raw.headers["X-Enrich-Search"] == "tool"
    assert raw.headers["X-Enrich-Searches"] == "1"
    assert (
        raw.headers["X-Enrich-Search-Queries"]
        == "lighthouse%20keeper%20fed%20the%20cats, sardines%20harbour"
    )
    assert raw.headers["X-Enrich-Sources"] == "lighthouse.txt#line=1"
    assert answer.usage is not None
    turns = chat_turns(upstream)
    # The search turn's tokens are counted too: the answer alone is four words.
    assert answer.usage.completion_tokens > 4 and len(turns) == 2
    # Both turns' tokens are counted: the answer cost both.
    assert answer.usage.prompt_tokens > sum(len(m["content"].split()) for m in turns[0]["messages"])


@pytest.mark.parametrize("dialect", ["llamacpp", "vllm"])
def test_streamed_chat_hides_the_search_turns(
    make_proxy: Proxy, upstream: FakeUpstream, dialect: str
) -> None:
    reasoning = "The citation says sardines."
    script = search_then_answer(KEEPER, said="Looking.", answer="Sardines.", reasoning=reasoning)
    model(upstream, script, dialect)
    base = make_proxy(vector_stores=FAST)
    client, store_id, _ = ready(base)
    chunks = list(
        client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": CATS}],
            stream=True,
            stream_options={"include_usage": True},
            extra_body=ask(store_id, citations="both"),
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Looking.\n\nSardines.\n\nSources:\n- lighthouse.txt, line 1"
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finishes == ["stop"]  # the search turn's "tool_calls" never reaches the client
    assert len({c.id for c in chunks}) == 1  # one answer, one id
    cited = [c for c in chunks if (c.model_extra or {}).get("citations")]
    assert len(cited) == 1 and cited[0].model_extra["citations"] == ["lighthouse.txt#line=1"]  # type: ignore[index]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    thinking = "".join(
        (c.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
        for c in chunks
        if c.choices
    )
    assert thinking == "The citation says sardines."


def test_a_model_that_loops_is_asked_for_its_answer_without_tools(
    make_proxy: Proxy, upstream: FakeUpstream
) -> None:
    def script(body: dict[str, Any]) -> Reply:
        if "tools" not in body:
            return Say("Enough searching: sardines.")
        return Calls.of(search(f"{KEEPER} {len(tool_results(body))}"))

    model(upstream, script)
    base = make_proxy(vector_stores=FAST, tool_search={"rounds": 2})
    client, store_id, _ = ready(base)
    answer = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": CATS}], extra_body=ask(store_id)
    )
    assert answer.choices[0].message.content == "Enough searching: sardines."
    turns = chat_turns(upstream)
    assert ["tools" in turn for turn in turns] == [True, True, False]
    assert "tool_choice" not in turns[2]
    assert turns[2]["messages"][-1]["content"].endswith("without calling any function.")
    record = last_decision(base)["decision"]["searches"]
    assert "still searching after 2 turns" in record["forced"] and record["rounds"] == 3
    assert len(record["calls"]) == 2


def test_the_token_bound_ends_the_searching_too(make_proxy: Proxy, upstream: FakeUpstream) -> None:
    def script(body: dict[str, Any]) -> Reply:
        if "tools" not in body:
            return Say("Done.")
        return Calls.of(search(KEEPER + " " + "more words " * 60))

    model(upstream, script)
    base = make_proxy(vector_stores=FAST, tool_search={"max_tokens": 64})
    client, store_id, _ = ready(base)
    client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": CATS}], extra_body=ask(store_id)
    )
    assert ["tools" in turn for turn in chat_turns(upstream)] == [True, False]
    record = last_decision(base)["decision"]["searches"]
    assert "tool_search.max_tokens 64" in record["forced"] and record["tokens"] >= 64


def test_malformed_calls_are_told_to_the_model_which_tries_again(
    base: str, upstream: FakeUpstream
) -> None:
    def script(body: dict[str, Any]) -> Reply:
        done = tool_results(body)
        if len(done) == 0:
            return Calls.of(Call("file_search", '{"queries": ["cats"'))  # cut JSON
        if len(done) == 1:
            return Calls.of(Call("search_web", '{"q": "cats"}'))  # no such function
        if len(done) == 2:
            return Calls.of(Call("file_search", '{"queries": []}'))  # nothing to search
        if len(done) == 3:
            return Calls.of(Call("file_search", json.dumps({"query": KEEPER})))  # singular
        return Say("Sardines.")

    model(upstream, script)
    client, store_id, _ = ready(base)
    answer = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": CATS}], extra_body=ask(store_id)
    )
    assert answer.choices[0].message.content == "Sardines."
    told = [m for m in chat_turns(upstream)[-1]["messages"] if m["role"] == "tool"]
    assert told[0]["content"].startswith("error: the arguments are not valid JSON")
    assert 'there is no function named "search_web"' in told[1]["content"]
    assert told[2]["content"].startswith("error: no query was given")
    assert "sardines" in told[3]["content"]
    # What the model wrote stays in the conversation, as JSON a template can read.
    calls = [m for m in chat_turns(upstream)[-1]["messages"] if m.get("tool_calls")]
    assert calls[0]["tool_calls"][0]["function"]["arguments"] == "{}"
    errors = [c["error"] for c in last_decision(base)["decision"]["searches"]["calls"]]
    assert errors[:3] != ["", "", ""] and errors[3] == ""


def test_the_clients_own_function_ends_the_loop_with_what_was_searched(
    base: str, upstream: FakeUpstream
) -> None:
    weather = {
        "type": "function",
        "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
    }

    def script(body: dict[str, Any]) -> Reply:
        if not tool_results(body):
            return Calls.of(search(KEEPER))
        return Calls.of(Call("get_weather", '{"city": "Brest"}'), search("more"))

    model(upstream, script)
    client, store_id, _ = ready(base)
    answer = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": CATS}],
        tools=[weather],  # type: ignore[list-item]
        extra_body=ask(store_id),
    )
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls or []
    assert call.function.name == "get_weather" and call.function.arguments == '{"city": "Brest"}'
    assert (answer.model_extra or {})["citations"] == ["lighthouse.txt#line=1"]
    first = chat_turns(upstream)[0]
    assert [t["function"]["name"] for t in first["tools"]] == ["file_search", "get_weather"]
    record = last_decision(base)["decision"]["searches"]
    assert (
        "get_weather" in record["stopped"]
        and "1 search call(s) of that turn not run" in record["stopped"]
    )

    # The same through the Responses API: the function call after the search item.
    response = client.responses.create(
        model="m",
        input=CATS,
        tools=[
            {"type": "file_search", "vector_store_ids": [store_id]},
            {"type": "function", "name": "get_weather", "parameters": {"type": "object"}},
        ],  # type: ignore[list-item]
    )
    assert [o.type for o in response.output] == ["file_search_call", "function_call"]
    assert response.output[1].name == "get_weather"  # type: ignore[union-attr]


def test_a_client_function_named_like_the_search_is_refused(
    base: str, upstream: FakeUpstream
) -> None:
    model(upstream, lambda body: Say("x"))
    client, store_id, _ = ready(base)
    clash = {"type": "function", "function": {"name": "file_search", "parameters": {}}}
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": CATS}],
            tools=[clash],  # type: ignore[list-item]
            extra_body=ask(store_id),
        )
    assert "name of the proxy's search function" in str(caught.value)
    assert chat_turns(upstream) == []


def test_an_upstream_cut_mid_loop_ends_the_stream_with_an_error(
    base: str, upstream: FakeUpstream
) -> None:
    tool_model = model(
        upstream,
        search_then_answer(KEEPER, answer="A long answer that never arrives."),
        die_in_turn=2,
    )
    client, store_id, _ = ready(base)
    stream = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": CATS}],
        stream=True,
        extra_body=ask(store_id),
    )
    with pytest.raises(openai.APIError) as caught:
        list(stream)
    assert "broke off the stream in turn 2" in str(caught.value)
    assert caught.value.code == "upstream_stream_broken"

    # A whole answer: the same error, before anything was sent.
    tool_model.die_in_turn = tool_model.turns + 2  # the next request's second turn
    whole = httpx.post(
        base + "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": CATS}], **ask(store_id)},
        timeout=60,
    )
    error = whole.json()["error"]
    assert whole.status_code == 502 and error["code"] == "upstream_stream_broken", error
    assert error["message"].startswith("upstream http://127.0.0.1:")
    assert "broke off the stream in turn 2 of the search loop" in error["message"]

    tool_model.die_in_turn = tool_model.turns + 2
    events = list(
        client.responses.create(
            model="m",
            input=CATS,
            tools=[{"type": "file_search", "vector_store_ids": [store_id]}],
            stream=True,
        )
    )
    kinds = [e.type for e in events]
    assert kinds[-2:] == ["error", "response.failed"]
    assert "response.file_search_call.completed" in kinds  # the search before the cut stood
    record = last_decision(base)
    assert record["status"] == 200 and "broke off" in (record["error"] or "")


def test_a_client_that_goes_away_cancels_the_upstream_turn(
    base: str, upstream: FakeUpstream
) -> None:
    tool_model = model(upstream, search_then_answer(KEEPER), hang_in_turn=2)
    _, store_id, _ = ready(base)
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": CATS}],
        "stream": True,
        **ask(store_id),
    }
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=30) as response:
        for line in response.iter_lines():
            if line.startswith(": Found"):
                break  # the search ran; turn 2 hangs upstream: hang up
    assert tool_model.cancelled.wait(10), "the upstream turn was not cancelled"
    assert tool_model.turns == 2


def test_an_upstream_that_cannot_call_tools_is_searched_once(
    base: str, upstream: FakeUpstream
) -> None:
    # The fake's default: a ChatML template without tool calls (as the bundled Gemma).
    client, store_id, _ = ready(base)
    raw = client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": CATS}], extra_body=ask(store_id)
    )
    assert raw.headers["X-Enrich-Search"] == "once"
    [turn] = chat_turns(upstream)
    assert "tools" not in turn
    assert turn["messages"][-1]["content"].startswith("The following citations were found")
    record = last_decision(base)["decision"]["searches"]
    assert record["mode"] == "once"
    assert "does not parse the model's tool calls" in record["reason"]
    assert "supports_tool_calls" in record["reason"] or "chat template" in record["reason"]


def test_unknown_tool_support_falls_back_and_says_how_to_turn_it_on(
    make_proxy: Proxy, upstream: FakeUpstream
) -> None:
    upstream.kind = "plain"  # a server that says nothing of tools
    base = make_proxy(vector_stores=FAST)
    client, store_id, _ = ready(base)
    client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": CATS}], extra_body=ask(store_id)
    )
    reason = last_decision(base)["decision"]["searches"]["reason"]
    assert "unknown" in reason and "models.m.tools: true" in reason


def test_a_model_configured_to_call_tools_gets_the_loop(
    make_proxy: Proxy, upstream: FakeUpstream
) -> None:
    model(upstream, search_then_answer(KEEPER))
    upstream.kind = "plain"  # says nothing of tools: the configuration does
    configured = make_proxy(vector_stores=FAST, models={"m": {"tools": True}})
    client, store_id, _ = ready(configured)
    answer = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": CATS}], extra_body=ask(store_id)
    )
    assert answer.choices[0].message.content == "They were fed sardines."
    assert last_decision(configured)["decision"]["searches"]["mode"] == "tool"


def test_the_search_header_asks_for_the_loop(base: str, upstream: FakeUpstream) -> None:
    model(upstream, search_then_answer(KEEPER))
    _, store_id, _ = ready(base)
    headed = sdk(base, **{"X-Enrich-Search": "tool", "X-Enrich-Vector-Stores": store_id})
    answer = headed.chat.completions.create(model="m", messages=[{"role": "user", "content": CATS}])
    assert answer.choices[0].message.content == "They were fed sardines."
    bad = httpx.post(
        base + "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": CATS}]},
        headers={"X-Enrich-Search": "sometimes"},
    )
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "X-Enrich-Search"


@pytest.mark.parametrize("stream", [False, True])
def test_a_first_turn_that_fails_is_the_upstreams_error_answer(
    base: str, upstream: FakeUpstream, stream: bool
) -> None:
    tool_model = model(upstream, search_then_answer(KEEPER), fail_in_turn=1)
    client, store_id, _ = ready(base)
    with pytest.raises(openai.InternalServerError) as caught:
        answer = client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": CATS}],
            stream=stream,
            extra_body=ask(store_id),
        )
        list(answer) if stream else None  # type: ignore[call-overload]
    assert caught.value.status_code == 500 and "slot unavailable" in str(caught.value)
    tool_model.fail_in_turn = tool_model.turns + 1
    with pytest.raises(openai.InternalServerError):
        client.responses.create(
            model="m",
            input=CATS,
            tools=[{"type": "file_search", "vector_store_ids": [store_id]}],
            stream=stream,
        )
    # Later, once the answer has begun, it ends as a failed stream ends.
    tool_model.fail_in_turn = tool_model.turns + 2
    events = list(
        client.responses.create(
            model="m",
            input=CATS,
            tools=[{"type": "file_search", "vector_store_ids": [store_id]}],
            stream=True,
        )
    )
    assert [e.type for e in events][-2:] == ["error", "response.failed"]
    assert "turn 2 of the search loop: slot unavailable" in events[-2].message  # type: ignore[union-attr]


def test_a_passage_is_given_once_however_often_it_is_found(
    base: str, upstream: FakeUpstream
) -> None:
    def script(body: dict[str, Any]) -> Reply:
        if len(tool_results(body)) < 2:
            return Calls.of(search(KEEPER))  # the same search twice
        return Say("Sardines.")

    model(upstream, script)
    client, store_id, _ = ready(base)
    client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": CATS}], extra_body=ask(store_id)
    )
    first, second = [
        m["content"] for m in chat_turns(upstream)[-1]["messages"] if m["role"] == "tool"
    ]
    assert "sardines" in first
    assert second == f'The passages found for "{KEEPER}" were all given above already.'
    calls = last_decision(base)["decision"]["searches"]["calls"]
    assert [(c["found"], c["given"], c["left_out"]) for c in calls] == [(1, 1, 0), (1, 0, 1)]


def test_the_preview_shows_the_first_turn_of_the_loop(base: str, upstream: FakeUpstream) -> None:
    model(upstream, search_then_answer(KEEPER))
    _, store_id, _ = ready(base)
    preview = httpx.post(
        base + "/v1/enrich/preview",
        json={"model": "m", "messages": [{"role": "user", "content": CATS}], **ask(store_id)},
        timeout=60,
    ).json()
    body = preview["upstream"]["body"]
    assert [tool["function"]["name"] for tool in body["tools"]] == ["file_search"]
    assert body["tool_choice"] == "auto" and body["stream"] is True
    assert body["messages"] == [{"role": "user", "content": CATS}]
    assert preview["decision"]["searches"]["mode"] == "tool"
    assert chat_turns(upstream) == []  # nothing generated


def test_a_turn_of_many_calls_runs_only_the_first_few(base: str, upstream: FakeUpstream) -> None:
    def script(body: dict[str, Any]) -> Reply:
        if not tool_results(body):
            return Calls.of(*[search(f"{KEEPER} {n}") for n in range(12)])
        return Say("Sardines.")

    model(upstream, script)
    client, store_id, _ = ready(base)
    client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": CATS}], extra_body=ask(store_id)
    )
    told = [m["content"] for m in chat_turns(upstream)[-1]["messages"] if m["role"] == "tool"]
    assert len(told) == 12  # every call answered, as chat templates expect
    assert all(t.startswith("error: not run: at most 8 calls") for t in told[8:])
    calls = last_decision(base)["decision"]["searches"]["calls"]
    assert sum(1 for c in calls if c["queries"]) == 8
