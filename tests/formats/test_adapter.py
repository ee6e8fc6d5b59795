"""The text adapter: chat body -> /v1/completions body, and completions back to chat shapes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.formats import (
    ChatStreamConverter,
    FormatRegistry,
    chat_completion_from,
    completion_request,
    render_prompt,
)
from tests.fakes.upstream import FakeUpstream, fake_tokens
from tests.fakes.upstream import chatml as fake_chatml

CHATML = FormatRegistry().get("chatml")
STOPS = CHATML.stop


def test_completion_request_fields() -> None:
    body = {
        "model": "base",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function"}],
        "tool_choice": "auto",
        "response_format": {"type": "text"},
        "stream": False,
        "stream_options": {"include_usage": True},
        "max_tokens": 5,
        "temperature": 0.2,
        "top_p": 0.9,
        "n": 1,
        "seed": 7,
        "presence_penalty": 0.1,
        "frequency_penalty": 0.2,
        "logit_bias": {"1": -100},
        "user": "u1",
        "cache_prompt": False,
        "top_k": 40,
        "stop": ["END", "<|im_end|>"],
    }
    out = completion_request(body, CHATML, "PROMPT")
    assert out["prompt"] == "PROMPT"
    assert out["stop"] == ["<|im_end|>", "<|im_start|>", "END"]  # format first, deduped
    for key in ("messages", "tools", "tool_choice", "response_format", "stream_options"):
        assert key not in out
    for key in ("model", "max_tokens", "temperature", "top_p", "n", "seed", "presence_penalty"):
        assert out[key] == body[key]
    for key in ("frequency_penalty", "logit_bias", "user", "cache_prompt", "top_k", "stream"):
        assert out[key] == body[key]
    assert body["stop"] == ["END", "<|im_end|>"]  # input untouched


def test_completion_request_stream_usage_and_string_stop() -> None:
    body = {"stream": True, "stream_options": {"include_usage": True}, "stop": "###"}
    out = completion_request(body, CHATML, "P")
    assert out["stream_options"] == {"include_usage": True}
    assert out["stop"] == ["<|im_end|>", "<|im_start|>", "###"]


def test_completion_request_max_completion_tokens_and_special_tokens() -> None:
    out = completion_request({"max_completion_tokens": 9}, CHATML, "P", keep_special_tokens=True)
    assert out["max_tokens"] == 9 and "max_completion_tokens" not in out
    assert out["skip_special_tokens"] is False
    alpaca = FormatRegistry().get("alpaca")
    assert "skip_special_tokens" not in completion_request(
        {}, alpaca, "P", keep_special_tokens=True
    )


COMPLETION: dict[str, Any] = {
    "id": "cmpl-1",
    "object": "text_completion",
    "created": 123,
    "model": "base",
    "choices": [
        {"index": 0, "text": "Hello!<|im_end|>\n<|im_start|>user", "finish_reason": "length"}
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
    "timings": {"predicted_ms": 1.0},
}


def test_chat_completion_from() -> None:
    out = chat_completion_from(COMPLETION, stop=STOPS)
    assert out["id"] == "cmpl-1" and out["created"] == 123 and out["model"] == "base"
    assert out["object"] == "chat.completion"
    assert out["usage"] == COMPLETION["usage"] and out["timings"] == COMPLETION["timings"]
    choice = out["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "Hello!"}
    assert choice["finish_reason"] == "stop"  # a stop string was cut off


def test_chat_completion_from_clean_text_keeps_reason() -> None:
    clean = {**COMPLETION, "choices": [{"index": 0, "text": " ok ", "finish_reason": "length"}]}
    choice = chat_completion_from(clean, stop=STOPS)["choices"][0]
    assert choice["message"]["content"] == " ok " and choice["finish_reason"] == "length"


def event(text: str, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "cmpl-9",
        "object": "text_completion",
        "created": 5,
        "model": "base",
        "choices": [{"index": 0, "text": text, "finish_reason": finish}],
        **extra,
    }


def run(events: list[dict[str, Any]], stops: list[str]) -> tuple[str, list[dict[str, Any]]]:
    conv = ChatStreamConverter(stops)
    chunks = [c for e in events for c in conv.feed(e)] + conv.finish()
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c.get("choices"))
    return text, chunks


def test_stream_role_content_finish_ids() -> None:
    text, chunks = run([event("Hel"), event("lo"), event("", "stop")], STOPS)
    assert text == "Hello"
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["id"] == "cmpl-9" and c["object"] == "chat.completion.chunk" for c in chunks)
    assert all(c["created"] == 5 and c["model"] == "base" for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert sum(1 for c in chunks if c["choices"][0]["finish_reason"]) == 1


def test_stream_split_stop_string_never_leaks() -> None:
    parts = ["Hi", " there<|", "im_", "end|>\n<|im_start|>user\nmore"]
    text, chunks = run([event(p) for p in parts] + [event("", "length")], STOPS)
    assert text == "Hi there"
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes.count("stop") == 1 and "length" not in finishes


def test_stream_false_alarm_prefix_is_released() -> None:
    text, _ = run([event("a <|"), event("b"), event("", "stop")], STOPS)
    assert text == "a <|b"
    text, _ = run([event("tail <|im")], STOPS)  # no finish_reason: flushed at [DONE]
    assert text == "tail <|im"


def test_stream_usage_chunk_and_error() -> None:
    conv = ChatStreamConverter(STOPS)
    conv.feed(event("x"))
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    [chunk] = conv.feed({"id": "cmpl-9", "choices": [], "usage": usage})
    assert chunk["choices"] == [] and chunk["usage"] == usage
    final = conv.feed(event("", "stop", usage=usage))
    assert final[-1]["usage"] == usage and final[-1]["choices"][0]["finish_reason"] == "stop"
    error = {"error": {"message": "boom", "type": "server_error", "code": 500}}
    assert conv.feed(error) == [error]


@given(st.text(alphabet="ab<|>imend_", max_size=30), st.lists(st.integers(0, 30), max_size=5))
def test_stream_equals_non_stream(text: str, cuts: list[int]) -> None:
    points = sorted({min(c, len(text)) for c in cuts})
    parts = [text[i:j] for i, j in zip([0, *points], [*points, len(text)], strict=True)]
    streamed, _ = run([event(p) for p in parts] + [event("", "stop")], STOPS)
    whole = chat_completion_from({"choices": [{"text": text}]}, stop=STOPS)
    assert streamed == whole["choices"][0]["message"]["content"]
    assert not any(s in streamed for s in STOPS)


def test_stream_several_choices_each_open_with_role() -> None:
    conv = ChatStreamConverter(STOPS)
    both = {
        "id": "c",
        "choices": [
            {"index": 0, "text": "a<|im_end|>", "finish_reason": None},
            {"index": 1, "text": "b", "finish_reason": "length"},
        ],
    }
    chunks = conv.feed(both)
    roles = [c["choices"][0]["index"] for c in chunks if "role" in c["choices"][0]["delta"]]
    assert roles == [0, 1]
    finishes = {c["choices"][0]["index"]: c["choices"][0]["finish_reason"] for c in chunks}
    assert finishes == {0: "stop", 1: "length"}


def test_chat_completion_from_passes_errors() -> None:
    error = {"error": {"message": "bad", "type": "invalid_request_error"}}
    assert chat_completion_from(error) == error


# -- text-completion upstreams and context shifting, through the proxy ----------------------------


CONVERSATION = [
    {"role": "system", "content": "You are {{char}}."},
    {"role": "user", "content": "Hello, I am {{user}}. {{ 7*7 }}"},
]


def test_chat_becomes_a_completion_and_back(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(
        models={"base-*": {"adapter": "text", "format": "chatml"}},
        formats={"variables": {"user": "Ann", "char": "Aria"}},
    )
    client = openai.OpenAI(base_url=base + "/v1", api_key="k", max_retries=0)
    answer = client.chat.completions.create(
        model="base-7b",
        messages=CONVERSATION,
        stop=["###"],
        max_tokens=5,
        extra_body={"top_k": 3},  # type: ignore[arg-type]
    )
    assert answer.object == "chat.completion"
    assert answer.choices[0].message.content == "Hi there"  # the leaked stop string is cut
    assert answer.usage is not None and answer.usage.total_tokens == 7
    sent = upstream.last_to("/v1/completions").json
    expected = render_prompt(
        FormatRegistry().get("chatml"),
        [
            {"role": "system", "content": "You are Aria."},
            {"role": "user", "content": "Hello, I am Ann. {{ 7*7 }}"},
        ],
    )
    assert sent["prompt"] == expected
    assert "{{ 7*7 }}" in sent["prompt"]  # user text is data, never a template
    assert sent["stop"] == ["<|im_end|>", "###"] or set(sent["stop"]) >= {"<|im_end|>", "###"}
    assert sent["max_tokens"] == 5 and sent["top_k"] == 3
    assert "messages" not in sent


def test_streamed_text_completion_converted(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(models={"base-*": {"adapter": "text", "format": "chatml"}})
    client = openai.OpenAI(base_url=base + "/v1", api_key="k", max_retries=0)
    stream = client.chat.completions.create(model="base-7b", messages=CONVERSATION, stream=True)  # type: ignore[arg-type]
    chunks = list(stream)
    assert all(chunk.object == "chat.completion.chunk" for chunk in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hi there"
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_chat_models_are_not_adapted(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(models={"base-*": {"adapter": "text"}})
    httpx.post(base + "/v1/chat/completions", json={"model": "chat-7b", "messages": CONVERSATION})
    assert upstream.last.path == "/v1/chat/completions"


def long_conversation(turns: int) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": "sys"}]
    for n in range(turns):
        messages.append({"role": "user", "content": f"question {n} " + "word " * 40})
        messages.append({"role": "assistant", "content": f"answer {n} " + "word " * 40})
    messages.append({"role": "user", "content": "last question"})
    return messages


def test_context_shifting_drops_oldest_turns(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    upstream.n_ctx = 400
    base = make_proxy()
    response = httpx.post(
        base + "/v1/chat/completions",
        json={"model": "m", "messages": long_conversation(10), "max_tokens": 50},
    )
    assert response.status_code == 200
    dropped = int(response.headers["X-Enrich-Dropped-Messages"])
    sent = upstream.last_to("/v1/chat/completions").json["messages"]
    assert dropped > 0 and len(sent) == 22 - dropped
    assert sent[0]["content"] == "sys"
    assert sent[-1]["content"] == "last question"
    assert sent[1]["content"].startswith("question ")  # whole turns: still user, assistant, ...


def test_short_conversations_are_not_counted(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy()
    upstream.tokenize_calls = 0
    response = httpx.post(
        base + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}
    )
    assert response.status_code == 200
    assert "X-Enrich-Dropped-Messages" not in response.headers
    assert upstream.tokenize_calls == 0


def test_tool_call_arguments_count_towards_the_shortcut(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    upstream.n_ctx = 400
    base = make_proxy()
    upstream.tokenize_calls = 0
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "x" * 3000}}
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "user", "content": "go on"},
    ]
    httpx.post(base + "/v1/chat/completions", json={"messages": messages, "max_tokens": 10})
    # 3 KB of arguments cannot be assumed to fit 400 tokens without counting.
    assert upstream.tokenize_calls > 0


def test_even_the_minimum_does_not_fit(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    upstream.n_ctx = 30
    base = make_proxy()
    messages = [{"role": "user", "content": "word " * 200}]
    response = httpx.post(base + "/v1/chat/completions", json={"messages": messages})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert "30" in error["message"]
    assert not [r for r in upstream.requests if r.path == "/v1/chat/completions"]


def test_format_by_its_sillytavern_name_and_any_case(
    make_proxy: Callable[..., str], upstream: FakeUpstream, tmp_path: Path
) -> None:
    presets = tmp_path / "formats"
    presets.mkdir()
    st_llama3 = {
        "name": "Llama 3 Instruct",
        "input_sequence": "<|start_header_id|>user<|end_header_id|>\n\n",
        "output_sequence": "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "system_sequence": "<|start_header_id|>system<|end_header_id|>\n\n",
        "input_suffix": "<|eot_id|>",
        "output_suffix": "<|eot_id|>",
        "system_suffix": "<|eot_id|>",
        "stop_sequence": "<|eot_id|>",
        "wrap": False,
    }
    (presets / "Llama 3 Instruct.json").write_text(json.dumps(st_llama3))
    base = make_proxy(
        models={
            "st-*": {"adapter": "text", "format": "Llama 3 Instruct"},
            "mixed-*": {"adapter": "text", "format": "ChatML"},
        },
        formats={"presets_dir": str(presets)},
    )
    messages = [{"role": "user", "content": "Hi"}]
    httpx.post(base + "/v1/chat/completions", json={"model": "st-8b", "messages": messages})
    assert upstream.last_to("/v1/completions").json["prompt"] == (
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    httpx.post(base + "/v1/chat/completions", json={"model": "mixed-1", "messages": messages})
    assert upstream.last_to("/v1/completions").json["prompt"].startswith("<|im_start|>user\nHi")


def test_tool_calls_reach_a_text_upstream_in_the_models_convention(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(models={"base-*": {"adapter": "text", "format": "chatml"}})
    client = openai.OpenAI(base_url=base + "/v1", api_key="k", max_retries=0)
    client.chat.completions.create(
        model="base-7b",
        messages=[
            {"role": "user", "content": "Weather in Oslo?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "snow"},
        ],
    )
    prompt = upstream.last_to("/v1/completions").json["prompt"]
    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "weather", "arguments": {"city": "Oslo"}}'
        "\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nsnow\n</tool_response>"
        "<|im_end|>\n<|im_start|>assistant\n"
    ) in prompt


def test_roles_that_cannot_alternate_are_a_400_before_the_upstream(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(models={"base-*": {"adapter": "text", "format": "Mistral"}})
    response = httpx.post(
        base + "/v1/chat/completions",
        json={
            "model": "base-7b",
            "messages": [
                {"role": "assistant", "content": "I start."},
                {"role": "user", "content": "Hi"},
            ],
        },
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "roles_must_alternate" and "messages[0]" in error["message"]
    assert not [r for r in upstream.requests if r.path == "/v1/completions"]


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_context_shifting_leaves_room_for_the_answer(
    make_proxy: Callable[..., str], upstream: FakeUpstream, field: str
) -> None:
    messages = long_conversation(3)
    # What the fake counts for the whole conversation: the words of its template.
    tokens = len(fake_tokens(fake_chatml(messages)))
    upstream.n_ctx = tokens + 100
    base = make_proxy()

    def send(answer_tokens: int) -> tuple[httpx.Response, list[dict[str, Any]]]:
        body = {"model": "m", "messages": messages, field: answer_tokens}
        response = httpx.post(base + "/v1/chat/completions", json=body)
        assert response.status_code == 200, response.text
        return response, upstream.last_to("/v1/chat/completions").json["messages"]

    # Exactly room for 100 answer tokens: nothing goes.
    response, sent = send(100)
    assert "X-Enrich-Dropped-Messages" not in response.headers
    assert sent == messages
    # One more, and the oldest turn (a question and its answer) makes room.
    response, sent = send(101)
    assert response.headers["X-Enrich-Dropped-Messages"] == "2"
    assert sent == [messages[0], *messages[3:]]
    assert sent[-1] == messages[-1] and sent[-1]["content"] == "last question"
    shift = httpx.get(base + "/v1/enrich/decisions").json()["data"][0]["decision"]["context_shift"]
    assert shift["dropped_messages"] == 2 and shift["limit"] == tokens - 1
    assert 0 < shift["tokens"] <= tokens - 1


@pytest.mark.parametrize("format_name", ["chatml", "llama3"])
def test_a_text_upstreams_prompt_is_shifted_to_leave_room_for_the_answer(
    make_proxy: Callable[..., str], upstream: FakeUpstream, format_name: str
) -> None:
    fmt = FormatRegistry().get(format_name)
    messages = long_conversation(3)
    # What the fake counts for the whole prompt: its words.
    tokens = len(fake_tokens(render_prompt(fmt, messages)))
    upstream.n_ctx = tokens + 100
    base = make_proxy(models={"base-*": {"adapter": "text", "format": format_name}})

    def send(answer_tokens: int) -> tuple[httpx.Response, str]:
        body = {"model": "base-7b", "messages": messages, "max_tokens": answer_tokens}
        response = httpx.post(base + "/v1/chat/completions", json=body | {"stop": ["###"]})
        assert response.status_code == 200, response.text
        return response, str(upstream.last_to("/v1/completions").json["prompt"])

    # Exactly room for 100 answer tokens: the whole conversation, rendered without the BOS
    # (the upstream adds its own).
    response, prompt = send(100)
    assert "X-Enrich-Dropped-Messages" not in response.headers
    assert prompt == render_prompt(fmt, messages, include_bos=False)
    # One more, and the oldest turn goes.
    response, prompt = send(101)
    assert response.headers["X-Enrich-Dropped-Messages"] == "2"
    kept = [messages[0], *messages[3:]]
    assert prompt == render_prompt(fmt, kept, include_bos=False)
    record = httpx.get(base + "/v1/enrich/decisions").json()["data"][0]["decision"]
    assert record["context_shift"] == {
        "dropped_messages": 2,
        "tokens": len(fake_tokens(render_prompt(fmt, kept))),
        "limit": tokens - 1,
    }
    assert record["adapter"] == {
        "kind": "text",
        "format": format_name,
        "stop": [*fmt.stop, "###"],
    }
    # The window as the record shows it: what the counted prompt leaves for the answer.
    assert record["window"]["answer_room"] == upstream.n_ctx - record["context_shift"]["tokens"]
    assert "2 old messages dropped" in record["window"]["note"]


@pytest.mark.parametrize("adapter", ["chat", "text"])
def test_a_models_own_tokenizer_counts_its_context_shifting(
    make_proxy: Callable[..., str], upstream: FakeUpstream, adapter: str
) -> None:
    upstream.n_ctx = 200
    base = make_proxy(models={"tik-*": {"tokenizer": "tiktoken", "adapter": adapter}})
    body = {"model": "tik-1", "messages": long_conversation(10), "max_tokens": 20}
    response = httpx.post(base + "/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    assert int(response.headers["X-Enrich-Dropped-Messages"]) > 0
    # Counted here with tiktoken, as the model's settings say: the upstream is never asked.
    assert upstream.to("/tokenize") == [] and upstream.to("/apply-template") == []


def test_a_short_conversation_for_a_text_upstream_is_not_counted(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(models={"base-*": {"adapter": "text"}})
    body = {"model": "base-1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 9}
    response = httpx.post(base + "/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    assert upstream.to("/tokenize") == []


def test_a_models_own_context_length_is_the_window_shifted_to(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(models={"small-*": {"context_length": 300}})
    body = {"messages": long_conversation(10), "max_tokens": 20}
    large = httpx.post(base + "/v1/chat/completions", json={**body, "model": "large-1"})
    assert "X-Enrich-Dropped-Messages" not in large.headers  # the upstream's 4096 tokens
    small = httpx.post(base + "/v1/chat/completions", json={**body, "model": "small-1"})
    assert int(small.headers["X-Enrich-Dropped-Messages"]) > 0


def test_an_answer_longer_than_the_window_leaves_one_token_for_the_prompt(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    upstream.n_ctx = 30
    messages = [{"role": "user", "content": "word " * 200}]
    body = {"messages": messages, "max_tokens": 500}
    response = httpx.post(make_proxy() + "/v1/chat/completions", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["message"].endswith("but the context allows 1")


def test_an_answer_of_one_token_is_room_taken_and_an_odd_one_none(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    messages = long_conversation(3)
    upstream.n_ctx = len(fake_tokens(fake_chatml(messages)))  # exactly the conversation
    base = make_proxy()
    one = httpx.post(base + "/v1/chat/completions", json={"messages": messages, "max_tokens": 1})
    assert one.headers["X-Enrich-Dropped-Messages"] == "2"
    # Not a number: no room is reserved for it (the upstream will judge it), and no 500 here.
    odd = {"messages": messages, "max_tokens": "many"}
    response = httpx.post(base + "/v1/chat/completions", json=odd)
    assert response.status_code == 200
    assert "X-Enrich-Dropped-Messages" not in response.headers
