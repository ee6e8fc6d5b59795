"""The loop's answer as the client reads it: named by the model's first turn (its id, created and
model), in the exact shapes of Chat Completions and Responses, with the usage of every turn, and
the proxy's own names where the upstream gave none."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.fakes.tool_calls import CREATED, Call, Calls, Reply, Say, search, tool_results
from tests.fakes.upstream import FakeUpstream
from tests.pipeline.test_enrich import text_part
from tests.stores.support import FAST
from tests.toolloop.support import (
    CATS,
    Proxy,
    chat_turns,
    model,
    ready,
    response_with_file,
    search_then_answer,
    searching_chat,
)
from tests.toolloop.test_scope import FILLER, HARBOUR, attached

KEEPER = "lighthouse keeper fed the cats"
SERVED = ("served-first", "served-second")
WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
}


@pytest.fixture
def base(make_proxy: Proxy) -> str:
    return make_proxy(vector_stores=FAST)


def post(base: str, route: str, body: dict[str, Any]) -> httpx.Response:
    response = httpx.post(base + route, json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response


def sse(response: httpx.Response) -> tuple[list[dict[str, Any]], list[str]]:
    """The data events (parsed, [DONE] left out) and the comments of a stream."""
    events, comments = [], []
    for block in response.text.split("\n\n"):
        for line in block.splitlines():
            if line.startswith(": "):
                comments.append(line[2:])
            elif line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[6:]))
    return events, comments


def added(turns: list[dict[str, Any]]) -> dict[str, int]:
    keys = ("prompt_tokens", "completion_tokens", "total_tokens")
    return {key: sum(turn["usage"][key] for turn in turns) for key in keys}


def test_a_whole_chat_answer_is_named_by_the_first_turn(base: str, upstream: FakeUpstream) -> None:
    tool_model = model(upstream, search_then_answer(KEEPER), models=SERVED)
    _, store_id, _ = ready(base)
    answer = post(base, "/v1/chat/completions", searching_chat(store_id)).json()
    first = tool_model.answered[0]
    assert (answer["id"], answer["object"], answer["created"], answer["model"]) == (
        first["id"],
        "chat.completion",
        CREATED + 1,
        "served-first",
    )
    assert answer["choices"][0]["index"] == 0
    assert answer["choices"][0]["message"]["role"] == "assistant"
    assert "reasoning_content" not in answer["choices"][0]["message"]
    assert answer["usage"] == added(tool_model.answered)


@pytest.mark.parametrize("dialect", ["llamacpp", "vllm"])
def test_every_chunk_of_a_streamed_answer_is_named_by_the_first_turn(
    base: str, upstream: FakeUpstream, dialect: str
) -> None:
    tool_model = model(upstream, search_then_answer(KEEPER), dialect, models=SERVED)
    _, store_id, _ = ready(base)
    body = searching_chat(store_id, stream=True, stream_options={"include_usage": True})
    chunks, _ = sse(post(base, "/v1/chat/completions", body))
    first = tool_model.answered[0]
    names = {(c["id"], c["object"], c["created"], c["model"]) for c in chunks}
    assert names == {(first["id"], "chat.completion.chunk", CREATED + 1, "served-first")}
    assert all(len(c["choices"]) == 1 and c["choices"][0]["index"] == 0 for c in chunks[:-1])
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert not any("role" in c["choices"][0]["delta"] for c in chunks[1:-1])
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == added(tool_model.answered)


def test_a_stream_says_what_is_searched_and_what_was_found(
    base: str, upstream: FakeUpstream
) -> None:
    model(upstream, search_then_answer(KEEPER, "sardines harbour"))
    _, store_id, _ = ready(base)
    chunks, comments = sse(
        post(base, "/v1/chat/completions", searching_chat(store_id, stream=True))
    )
    searching = f'Searching the files for "{KEEPER}"; "sardines harbour"...'
    assert searching in comments
    assert comments[comments.index(searching) + 1] == "Found 1 passages"
    # Usage only when the client asked for it.
    assert all(c["choices"] and "usage" not in c for c in chunks)


def test_without_the_upstreams_names_the_answer_has_the_proxys(
    base: str, upstream: FakeUpstream
) -> None:
    model(upstream, search_then_answer(KEEPER), bare=True)
    _, store_id, _ = ready(base)
    whole = post(base, "/v1/chat/completions", searching_chat(store_id))
    answer = whole.json()
    assert answer["id"] == f"chatcmpl-{whole.headers['X-Request-ID']}"
    assert answer["model"] == "m" and answer["object"] == "chat.completion"
    assert isinstance(answer["created"], int) and answer["created"] > CREATED

    enrich = {**searching_chat(store_id)["enrich"], "citations": "both"}  # the Sources block too
    streamed = post(
        base, "/v1/chat/completions", searching_chat(store_id, stream=True, enrich=enrich)
    )
    chunks, _ = sse(streamed)
    assert "Sources:" in "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    ids = {(c["id"], c["model"], c["object"]) for c in chunks}
    assert ids == {(f"chatcmpl-{streamed.headers['X-Request-ID']}", "m", "chat.completion.chunk")}
    assert all(isinstance(c["created"], int) and c["created"] > CREATED for c in chunks)


def test_the_last_turn_names_the_model_when_the_first_did_not(
    base: str, upstream: FakeUpstream
) -> None:
    tool_model = model(upstream, search_then_answer(KEEPER), models=("", "served-second"))
    _, store_id, _ = ready(base)
    answer = post(base, "/v1/chat/completions", searching_chat(store_id)).json()
    assert answer["model"] == "served-second" and answer["id"] == tool_model.answered[0]["id"]


def two_calls_of_the_client(body: dict[str, Any]) -> Reply:
    if not tool_results(body):
        return Calls.of(search(KEEPER))
    return Calls.of(Call("get_weather", '{"city": "Brest"}'), Call("get_weather", "{}"))


def test_the_clients_calls_without_ids_are_numbered(base: str, upstream: FakeUpstream) -> None:
    model(upstream, two_calls_of_the_client, call_ids=False, bare=True)
    _, store_id, _ = ready(base)
    whole = post(base, "/v1/chat/completions", searching_chat(store_id, tools=[WEATHER])).json()
    message = whole["choices"][0]["message"]
    assert [c["id"] for c in message["tool_calls"]] == ["call_0", "call_1"]
    assert [c["type"] for c in message["tool_calls"]] == ["function", "function"]
    assert message["content"] is None and whole["choices"][0]["finish_reason"] == "tool_calls"

    body = searching_chat(store_id, tools=[WEATHER], stream=True)
    chunks, _ = sse(post(base, "/v1/chat/completions", body))
    [calls] = [c["choices"][0]["delta"]["tool_calls"] for c in chunks if c["choices"][0]["delta"]]
    assert [(c["index"], c["id"], c["function"]["name"]) for c in calls] == [
        (0, "call_0", "get_weather"),
        (1, "call_1", "get_weather"),
    ]
    assert chunks[-1]["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "tool_calls"}
    assert {c["model"] for c in chunks} == {"m"}

    # The search turn's calls had no ids either: the conversation numbers them by turn.
    second = chat_turns(upstream)[1]["messages"]
    [asked] = [m for m in second if m.get("tool_calls")]
    [told] = [m for m in second if m["role"] == "tool"]
    assert asked["tool_calls"][0]["id"] == told["tool_call_id"] == "call_1_0"


def responses(store_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "input": CATS,
        "tools": [{"type": "file_search", "vector_store_ids": [store_id], "score_threshold": 0.6}],
        **fields,
    }


def test_a_response_is_named_by_the_first_turn_with_every_turns_usage(
    base: str, upstream: FakeUpstream
) -> None:
    tool_model = model(upstream, search_then_answer(KEEPER), models=SERVED * 2)
    _, store_id, _ = ready(base)
    response = post(base, "/v1/responses", responses(store_id)).json()
    assert response["model"] == "served-first" and isinstance(response["created_at"], int)
    total = added(tool_model.answered)
    usage = response["usage"]
    assert (usage["input_tokens"], usage["output_tokens"], usage["total_tokens"]) == (
        total["prompt_tokens"],
        total["completion_tokens"],
        total["total_tokens"],
    )

    events, _ = sse(post(base, "/v1/responses", responses(store_id, stream=True)))
    # The first turn said nothing before it searched: the response still starts first.
    assert [e["type"] for e in events[:3]] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    done = events[-1]["response"]
    assert events[-1]["type"] == "response.completed" and done["model"] == "served-first"
    total = added(tool_model.answered[2:])
    assert done["usage"]["output_tokens"] == total["completion_tokens"]


def test_a_response_without_the_upstreams_names_has_the_requests_model(
    base: str, upstream: FakeUpstream
) -> None:
    model(upstream, search_then_answer(KEEPER), bare=True)
    _, store_id, _ = ready(base)
    assert post(base, "/v1/responses", responses(store_id)).json()["model"] == "m"
    events, _ = sse(post(base, "/v1/responses", responses(store_id, stream=True)))
    assert events[-1]["response"]["model"] == "m"


def test_a_responses_client_call_without_an_id_is_numbered(
    base: str, upstream: FakeUpstream
) -> None:
    model(upstream, two_calls_of_the_client, call_ids=False)
    _, store_id, _ = ready(base)
    function = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
    body = responses(store_id)
    body["tools"].append(function)
    output = post(base, "/v1/responses", body).json()["output"]
    assert [(o["type"], o.get("call_id")) for o in output] == [
        ("file_search_call", None),
        ("function_call", "call_0"),
        ("function_call", "call_1"),
    ]
    events, _ = sse(post(base, "/v1/responses", {**body, "stream": True}))
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    output = events[-1]["response"]["output"]
    assert [o.get("call_id") for o in output] == [None, "call_0", "call_1"]
    assert [o.get("arguments") for o in output[1:]] == ['{"city": "Brest"}', "{}"]


def test_thinking_is_kept_apart_in_a_whole_answer(base: str, upstream: FakeUpstream) -> None:
    script = search_then_answer(KEEPER, answer="Sardines.", reasoning="The passage says sardines.")
    model(upstream, script)
    _, store_id, _ = ready(base)
    message = post(base, "/v1/chat/completions", searching_chat(store_id)).json()["choices"][0][
        "message"
    ]
    assert message["reasoning_content"] == "The passage says sardines."
    assert message["content"].startswith("Sardines.")


def cut_off_after_a_search(body: dict[str, Any]) -> Reply:
    if not tool_results(body):
        return Calls.of(search(KEEPER))
    return Say("Sardines, and", finish="length")


def test_an_answer_cut_off_says_so_in_every_shape(base: str, upstream: FakeUpstream) -> None:
    model(upstream, cut_off_after_a_search)
    _, store_id, _ = ready(base)
    whole = post(base, "/v1/chat/completions", searching_chat(store_id)).json()
    assert whole["choices"][0]["finish_reason"] == "length"
    chunks, _ = sse(post(base, "/v1/chat/completions", searching_chat(store_id, stream=True)))
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "length"

    response = post(base, "/v1/responses", responses(store_id)).json()
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    events, _ = sse(post(base, "/v1/responses", responses(store_id, stream=True)))
    done = events[-1]["response"]
    assert done["status"] == "incomplete"
    assert done["incomplete_details"] == {"reason": "max_output_tokens"}


def test_a_call_written_as_text_but_cut_off_is_shown_as_text(
    base: str, upstream: FakeUpstream
) -> None:
    # Whole as far as it goes, but the token limit ended it: what came next is unknown.
    cut = '{"name": "file_search", "arguments": {"queries": ["lighthouse"]}}'
    model(upstream, lambda body: Say(cut, finish="length"))
    _, store_id, _ = ready(base)
    chunks, _ = sse(post(base, "/v1/chat/completions", searching_chat(store_id, stream=True)))
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == cut and chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert len(chat_turns(upstream)) == 1


def test_a_stream_started_by_the_statuses_carries_the_loops_answer(
    make_proxy: Proxy, upstream: FakeUpstream
) -> None:
    # No status delay: the document's statuses start the stream while the proxy prepares; the
    # loop's answer then goes on in that same stream.
    model(upstream, search_then_answer("harbour master opens the lock gates", answer="At six."))
    base = make_proxy(server={"status_delay_s": 0.0})
    body = attached("When do the gates open?", strategy="retrieval")
    body = {**body, **body.pop("extra_body"), "stream": True}
    streamed = post(base, "/v1/chat/completions", body)
    chunks, comments = sse(streamed)
    assert comments and streamed.text.startswith(": ")
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text.startswith("At six.")
    assert streamed.text.endswith("data: [DONE]\n\n")

    # Another document: one parsed already would take no time to prepare.
    part = text_part("harbour.txt", HARBOUR + "\n\n" + FILLER + "\n\nAsked again.")["file"]
    asked = response_with_file("When do the gates open?", part, enrich=body["enrich"], stream=True)
    streamed = post(base, "/v1/responses", asked)
    events, comments = sse(streamed)
    assert comments and streamed.text.startswith(": ")
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
    assert [o["type"] for o in events[-1]["response"]["output"]] == ["file_search_call", "message"]


def test_a_response_that_begins_with_the_clients_call_starts_first(
    base: str, upstream: FakeUpstream
) -> None:
    model(upstream, lambda body: Calls.of(Call("get_weather", "{}")))
    _, store_id, _ = ready(base)
    function = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
    body = responses(store_id, stream=True)
    body["tools"].append(function)
    events, _ = sse(post(base, "/v1/responses", body))
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [o["type"] for o in events[-1]["response"]["output"]] == ["function_call"]


def test_without_a_model_named_anywhere_the_answer_says_unknown(
    base: str, upstream: FakeUpstream
) -> None:
    model(upstream, search_then_answer(KEEPER), bare=True)
    _, store_id, _ = ready(base)
    body = searching_chat(store_id)
    del body["model"]
    assert post(base, "/v1/chat/completions", body).json()["model"] == "unknown"
    chunks, _ = sse(post(base, "/v1/chat/completions", {**body, "stream": True}))
    assert {c["model"] for c in chunks} == {"unknown"}


def test_the_headers_of_the_loops_answers(base: str, upstream: FakeUpstream) -> None:
    model(upstream, search_then_answer(KEEPER))
    _, store_id, _ = ready(base)
    common = {
        "x-request-id",
        "x-enrich-search",
        "x-enrich-citations",
        "x-enrich-searches",
        "x-enrich-search-queries",
        "x-enrich-sources",
        "x-enrich-strategy",
        "x-enrich-guard-changes",
        "date",
        "server",
    }
    answers = [
        post(base, "/v1/chat/completions", searching_chat(store_id)),
        post(base, "/v1/responses", responses(store_id)),
    ]
    for answer in answers:
        assert answer.headers["content-type"] == "application/json"
        assert set(answer.headers) == common | {"content-type", "content-length"}, answer.headers
        # One search, one query, one passage given.
        found = [answer.headers[f"x-enrich-{name}"] for name in ("citations", "searches")]
        assert found == ["1", "1"], answer.headers
        assert answer.headers["x-enrich-search-queries"] == quote(KEEPER), answer.headers
    streams = [
        post(base, "/v1/chat/completions", searching_chat(store_id, stream=True)),
        post(base, "/v1/responses", responses(store_id, stream=True)),
    ]
    for stream in streams:
        assert stream.headers["content-type"] == "text/event-stream"
        # Sent before the model searched: what the searches gave comes in the stream.
        names = {"x-request-id", "x-enrich-search", "x-enrich-strategy", "date", "server"}
        names |= {"content-type", "cache-control", "transfer-encoding"}
        assert set(stream.headers) == names, stream.headers


def test_a_whole_answer_joins_every_turns_thinking_and_ends_with_its_sources(
    base: str, upstream: FakeUpstream
) -> None:
    def script(body: dict[str, Any]) -> Reply:
        if not tool_results(body):
            return Calls.of(search(KEEPER), reasoning="I should search.")
        return Say("Sardines.", reasoning="It says sardines.")

    model(upstream, script)
    _, store_id, _ = ready(base)
    enrich = {**searching_chat(store_id)["enrich"], "citations": "both"}
    answer = post(base, "/v1/chat/completions", searching_chat(store_id, enrich=enrich)).json()
    message = answer["choices"][0]["message"]
    assert message["reasoning_content"] == "I should search.\n\nIt says sardines."
    assert message["content"] == "Sardines.\n\nSources:\n- lighthouse.txt, line 1"


def test_each_search_of_a_response_is_numbered_in_its_id(base: str, upstream: FakeUpstream) -> None:
    def script(body: dict[str, Any]) -> Reply:
        done = tool_results(body)
        if len(done) < 2:
            return Calls.of(search(["lighthouse keeper", "bakery bread"][len(done)]))
        return Say("Sardines.")

    model(upstream, script)
    _, store_id, _ = ready(base)
    response = post(base, "/v1/responses", responses(store_id)).json()
    searches = [o["id"] for o in response["output"] if o["type"] == "file_search_call"]
    token = response["id"].removeprefix("resp_")
    assert searches == [f"fs_{token}_1", f"fs_{token}_2"]


def test_the_models_own_words_before_its_search_stay_in_the_conversation(
    base: str, upstream: FakeUpstream
) -> None:
    model(upstream, search_then_answer(KEEPER, said="Let me look that up.", answer="Sardines."))
    _, store_id, _ = ready(base)
    post(base, "/v1/chat/completions", searching_chat(store_id))
    [said] = [m for m in chat_turns(upstream)[1]["messages"] if m["role"] == "assistant"]
    assert said["content"] == "Let me look that up."
    assert [call["type"] for call in said["tool_calls"]] == ["function"]
