"""OpenAI chat ⇄ Ollama's native /api/chat (pure), and reading /api/show and /api/ps."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.errors import BadRequest
from proxy.upstream.ollama.answer import NativeAnswer, OllamaChatConverter, openai_error
from proxy.upstream.ollama.api import (
    default_num_ctx,
    full_name,
    honours_truncate,
    loaded_context,
    read_show,
)
from proxy.upstream.ollama.native import native_chat_request
from proxy.upstream.ollama.sizing import num_ctx_for
from proxy.upstream.sse import data_event


def native(body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    options = {"num_ctx": 8192, "num_predict": None, "truncate_field": True, **kwargs}
    return native_chat_request(body, **options)


def test_the_request_as_ollamas_openai_layer_translates_it() -> None:
    request = native(
        {
            "model": "llama3.2",
            "messages": [
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": "Hi"},
            ],
            "stop": "END",
            "max_tokens": 100,
            "seed": 7,
            "response_format": {"type": "json_object"},
            "reasoning_effort": "minimal",
            "top_k": 20,
        }
    )
    assert request == {
        "model": "llama3.2",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        "stream": False,
        "options": {
            "top_k": 20,
            "stop": ["END"],
            "num_predict": 100,
            "temperature": 1.0,  # OpenAI's defaults, as Ollama's OpenAI layer sets them
            "top_p": 1.0,
            "seed": 7,
            "num_ctx": 8192,
        },
        "truncate": False,
        "format": "json",
        "think": "low",
    }


def test_num_predict_fills_the_window_when_the_client_sets_no_max_tokens() -> None:
    request = native({"model": "m", "messages": []}, num_predict=3000)
    assert request["options"]["num_predict"] == 3000
    assert "truncate" not in native({"model": "m", "messages": []}, truncate_field=False)


def test_a_clients_own_larger_num_ctx_is_kept() -> None:
    request = native({"model": "m", "messages": [], "options": {"num_ctx": 65536, "min_p": 0.1}})
    assert request["options"]["num_ctx"] == 65536 and request["options"]["min_p"] == 0.1


def test_parts_images_tool_calls_and_results() -> None:
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look:"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "reasoning": "thinking it over",
            "tool_calls": [
                {
                    "id": "call_9",
                    "type": "function",
                    "function": {"name": "f", "arguments": '{"a": 1}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_9", "content": "42"},
    ]
    sent = native({"model": "m", "messages": messages, "stream": True})
    assert sent["stream"] is True
    assert sent["messages"] == [
        {"role": "user", "content": "Look:"},
        {"role": "user", "content": "", "images": ["iVBORw0K"]},
        {
            "role": "assistant",
            "content": "",
            "thinking": "thinking it over",
            "tool_calls": [{"id": "call_9", "function": {"name": "f", "arguments": {"a": 1}}}],
        },
        {"role": "tool", "content": "42", "tool_name": "f", "tool_call_id": "call_9"},
    ]


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (
            {"role": "user", "content": [{"type": "image_url", "image_url": "https://x/a.png"}]},
            "image URLs",
        ),
        (
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": "data:image/gif;base64,R0"}],
            },
            "JPEG",
        ),
        ({"role": "user", "content": [{"type": "input_audio"}]}, "invalid input_audio"),
        ({"role": "user", "content": [{"type": "video_url"}]}, "'video_url'"),
        (
            {
                "role": "assistant",
                "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}],
            },
            "invalid tool call arguments",
        ),
        ({"role": "user", "content": 5}, "invalid message content"),
    ],
)
def test_what_ollama_cannot_take_is_a_400(message: dict[str, Any], error: str) -> None:
    with pytest.raises(BadRequest) as caught:
        native({"model": "m", "messages": [message]})
    assert error in caught.value.message


def test_audio_goes_where_ollama_takes_it() -> None:
    part = {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
    sent = native({"model": "m", "messages": [{"role": "user", "content": [part]}]})
    assert sent["messages"] == [{"role": "user", "content": "", "images": ["UklGRg=="]}]


def test_an_unknown_reasoning_effort_is_a_400() -> None:
    with pytest.raises(BadRequest):
        native({"model": "m", "messages": [], "reasoning_effort": "extreme"})


FINAL = {
    "model": "llama3.2",
    "created_at": "2026-08-04T19:22:45.499127Z",
    "message": {"role": "assistant", "content": ""},
    "done": True,
    "done_reason": "stop",
    "prompt_eval_count": 26,
    "eval_count": 282,
}


def test_a_whole_answer_as_a_chat_completion() -> None:
    learnt: list[NativeAnswer] = []
    converter = OllamaChatConverter(on_done=learnt.append)
    answer = {**FINAL, "message": {"role": "assistant", "content": "Hello", "thinking": "hm"}}
    completion = converter.convert_json(answer)
    assert completion["object"] == "chat.completion" and completion["id"].startswith("chatcmpl-")
    assert completion["created"] == 1785871365 and completion["system_fingerprint"] == "fp_ollama"
    assert completion["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hello", "reasoning": "hm"},
            "finish_reason": "stop",
        }
    ]
    assert completion["usage"] == {
        "prompt_tokens": 26,
        "completion_tokens": 282,
        "total_tokens": 308,
    }
    assert learnt == [NativeAnswer(26, "stop")]


def test_tool_calls_get_ids_and_json_arguments() -> None:
    answer = {
        **FINAL,
        "message": {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"function": {"index": 0, "name": "get_weather", "arguments": {"city": "Tokyo"}}}
            ],
        },
    }
    choice = OllamaChatConverter().convert_json(answer)["choices"][0]
    call = choice["message"]["tool_calls"][0]
    assert call["id"].startswith("call_") and len(call["id"]) == 13  # Ollama's own form
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Tokyo"}'}
    assert choice["finish_reason"] == "tool_calls"


def events(converter: OllamaChatConverter, lines: list[dict[str, Any]]) -> list[Any]:
    out: list[Any] = []
    for line in lines:
        out += converter.convert_event(data_event(line), line)
    out += converter.convert_event(b"data: [DONE]\n\n", None)
    return out


def test_a_stream_as_chat_chunks() -> None:
    converter = OllamaChatConverter(include_usage=True)
    line = {"model": "llama3.2", "created_at": FINAL["created_at"], "done": False}
    out = events(
        converter,
        [
            {**line, "message": {"role": "assistant", "content": "", "thinking": "hm"}},
            {**line, "message": {"role": "assistant", "content": "Hel"}},
            {**line, "message": {"role": "assistant", "content": "lo"}},
            FINAL,
        ],
    )
    deltas = [chunk["choices"][0]["delta"] for chunk in out[:-2] if chunk["choices"]]
    assert deltas == [
        {"role": "assistant", "content": "", "reasoning": "hm"},
        {"content": "Hel"},
        {"content": "lo"},
        {},
    ]
    assert out[3]["choices"][0]["finish_reason"] == "stop"  # the trailer adds no content chunk
    assert out[4]["choices"] == [] and out[4]["usage"]["total_tokens"] == 308
    assert out[5] == b"data: [DONE]\n\n"
    assert len({chunk["created"] for chunk in out[:5]}) == 1  # one created for the stream
    assert len({chunk["id"] for chunk in out[:5]}) == 1


def test_thinking_and_content_in_one_line_become_two_chunks() -> None:
    line = {"model": "m", "done": False, "message": {"content": "Hi", "thinking": "hm"}}
    out = OllamaChatConverter().convert_event(data_event(line), line)
    assert [chunk["choices"][0]["delta"] for chunk in out] == [  # type: ignore[index]
        {"role": "assistant", "reasoning": "hm"},
        {"content": "Hi"},
    ]


def test_an_error_line_mid_stream_is_an_openai_error() -> None:
    line = {"error": "model runner has unexpectedly stopped"}
    assert OllamaChatConverter().convert_event(data_event(line), line) == [
        {
            "error": {
                "message": "model runner has unexpectedly stopped",
                "type": "api_error",
                "param": None,
                "code": None,
            }
        }
    ]


@pytest.mark.parametrize(
    ("status", "kind"),
    [(400, "invalid_request_error"), (404, "not_found_error"), (500, "api_error")],
)
def test_errors_as_ollamas_openai_layer_types_them(status: int, kind: str) -> None:
    assert openai_error(status, {"error": "no"})["error"]["type"] == kind


def test_reading_show_and_ps() -> None:
    shown = read_show(
        {
            # ShowHandler writes each parameter as "%-30s %#v".
            "parameters": f'{"num_ctx":<30} 8192\n{"stop":<30} "<|eot_id|>"',
            "model_info": {"general.architecture": "qwen3", "qwen3.context_length": 40960},
        }
    )
    assert (shown.trained, shown.architecture, shown.modelfile_num_ctx) == (40960, "qwen3", 8192)
    assert read_show({"model_info": {}, "details": {"context_length": 2048}}).trained == 2048
    assert read_show({}).trained is None
    ps = {"models": [{"name": "qwen3:14b", "model": "qwen3:14b", "context_length": 4096}]}
    assert loaded_context(ps, "qwen3:14b") == 4096
    assert (
        loaded_context(
            {"models": [{"name": "llama3.2:latest", "context_length": 2048}]}, "llama3.2"
        )
        == 2048
    )
    assert loaded_context({"models": [{"name": "a:latest"}]}, "a") is None  # before 0.10.0
    assert loaded_context(ps, "other") is None
    assert full_name("hf.co/org/model") == "hf.co/org/model:latest"


def test_versions() -> None:
    assert default_num_ctx("0.6.6") == 2048 and default_num_ctx("0.6.7") == 4096
    assert default_num_ctx(None) == 4096
    assert not honours_truncate("0.12.5") and honours_truncate("0.12.6") and honours_truncate(None)


@pytest.mark.parametrize(
    ("needed", "floor", "ceiling", "size"),
    [
        (5000, 4096, 32768, 8192),
        (100, 0, 32768, 2048),
        (5000, 16384, 32768, 16384),  # never below what the model runs with already
        (30000, 4096, 30000, 30000),  # the trained window is not a power of two
        (40000, 4096, 32768, None),
    ],
)
def test_num_ctx_sizing(needed: int, floor: int, ceiling: int, size: int | None) -> None:
    assert num_ctx_for(needed, floor=floor, ceiling=ceiling) == size


def test_a_converted_chunk_is_valid_json_for_the_sdk() -> None:
    line = {"model": "m", "done": False, "message": {"content": "x"}}
    chunk = OllamaChatConverter().convert_event(data_event(line), line)[0]
    assert json.loads(json.dumps(chunk))["object"] == "chat.completion.chunk"


class CountingMessage(dict[str, Any]):
    """A message that counts how often it is read."""

    reads = 0

    def get(self, key: str, default: Any = None) -> Any:
        CountingMessage.reads += 1
        return super().get(key, default)


def test_tool_results_find_their_calls_in_one_pass() -> None:
    # Each tool result names the function it answers, found by its call id: looked up once per
    # conversation, not once per result (1,500 results in 3,000 messages read each message a
    # handful of times, not 1,500 times).
    messages: list[dict[str, Any]] = []
    for n in range(1500):
        call = {"id": f"call_{n}", "function": {"name": f"tool_{n}", "arguments": "{}"}}
        messages.append(CountingMessage(role="assistant", content=None, tool_calls=[call]))
        messages.append(CountingMessage(role="tool", tool_call_id=f"call_{n}", content="ok"))
    CountingMessage.reads = 0
    sent = native({"model": "m", "messages": messages})["messages"]
    assert [m["tool_name"] for m in sent if m["role"] == "tool"] == [
        f"tool_{n}" for n in range(1500)
    ]
    assert CountingMessage.reads < 20 * len(messages)  # quadratic: over 2,000,000
