"""The text adapter: chat body -> /v1/completions body, and completions back to chat shapes."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.formats import (
    ChatStreamConverter,
    FormatRegistry,
    chat_completion_from,
    completion_request,
)

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
