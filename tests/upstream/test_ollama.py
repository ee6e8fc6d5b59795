"""Ollama behind the proxy: its windows learnt, and no prompt ever cut without the client knowing
(the fake cuts prompts exactly as Ollama does), through the real openai SDK."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from proxy.config import load_settings
from proxy.upstream.facts import ContextWindow
from proxy.upstream.introspection import ModelIntrospection
from tests.fakes.ollama import FakeOllama, OllamaModel
from tests.fakes.servers import ServerThread

MODEL = "llama3.2"
FIRST, LAST = "ALPHASTART", "OMEGAEND"


# Common English words, one token each for tiktoken and for the fake's tokenizer alike.
VOCABULARY = ["house", "river", "stone", "light", "water", "green"]
VOCABULARY += ["table", "music", "paper", "glass", "night", "horse"]


def document(words: int) -> str:
    """A text of `words` words that opens with FIRST and ends with LAST."""
    body = " ".join(VOCABULARY[n % len(VOCABULARY)] for n in range(words - 2))
    return f"{FIRST} {body} {LAST}"


def text_part(name: str, text: str) -> dict[str, Any]:
    encoded = base64.b64encode(text.encode()).decode()
    return {
        "type": "file",
        "file": {"filename": name, "file_data": f"data:text/plain;base64,{encoded}"},
    }


def ask(text: str, query: str = "What does it say?", **body: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": query}, text_part("doc.txt", text)],
            }
        ],
        **body,
    }


@pytest.fixture
def ollama(servers: ServerThread) -> FakeOllama:
    fake = FakeOllama()
    fake.base_url = servers.serve(fake.app())  # type: ignore[attr-defined]
    return fake


@pytest.fixture
def start(proxy_before: Callable[..., str], ollama: FakeOllama) -> Callable[..., str]:
    def run(**upstream: Any) -> str:
        return proxy_before(ollama.base_url, upstream=upstream)  # type: ignore[attr-defined]

    return run


def client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60)


def preview(base: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(base + "/v1/enrich/preview", json=body, timeout=60)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def test_the_fake_cuts_a_long_prompt_as_ollama_does(ollama: FakeOllama) -> None:
    # The failure the proxy exists to prevent, straight to Ollama's OpenAI endpoint: a 200,
    # the prompt cut to the loaded window, and an answer that reads as any other — Ollama
    # 0.13 shifts its context and keeps generating (runner.go ShiftCacheSlot), so nothing but
    # the prompt's count, the whole window, tells that the document's start is gone.
    answer = client(ollama.base_url.removesuffix("/v1")).chat.completions.create(  # type: ignore[attr-defined]
        model=MODEL, messages=[{"role": "user", "content": document(6000)}]
    )
    assert answer.choices[0].finish_reason == "stop"
    assert answer.choices[0].message.content == "The answer from the fake Ollama ."
    assert answer.usage is not None and answer.usage.prompt_tokens == 4096
    seen = ollama.seen[-1]
    assert seen.truncated and FIRST not in seen.words and LAST in seen.words


def test_a_document_over_the_loaded_window_goes_whole_through_the_native_api(
    start: Callable[..., str], ollama: FakeOllama
) -> None:
    base = start()
    answer = client(base).chat.completions.create(**ask(document(6000)))
    assert answer.choices[0].message.content == "The answer from the fake Ollama ."
    assert answer.choices[0].finish_reason == "stop"
    seen = ollama.seen[-1]
    assert seen.path == "/api/chat" and not seen.truncated
    assert FIRST in seen.words and LAST in seen.words  # the whole document, first to last word
    sent = ollama.to("/api/chat")[-1].json
    assert sent["options"]["num_ctx"] == 8192 and sent["truncate"] is False
    assert sent["stream"] is False
    # No max_tokens: the answer may take the rest of the window, and stops at its end.
    tokens = preview(base, ask(document(6000)))["decision"]["upstream"]["prompt_tokens"]
    assert sent["options"]["num_predict"] == 8192 - tokens
    assert answer.usage is not None and answer.usage.prompt_tokens == len(seen.words)
    assert answer.model_extra is not None


def test_the_decision_record_says_kind_window_tokenizer_and_route(
    start: Callable[..., str], ollama: FakeOllama
) -> None:
    base = start()
    result = preview(base, ask(document(6000)))
    decision = result["decision"]
    assert decision["strategy"] == "inject-full-content"
    upstream = decision["upstream"]
    assert upstream["kind"] == "ollama" and upstream["kind_source"] == "GET /api/version"
    assert upstream["window"] == 32768 and upstream["window_exact"] is True
    assert "trained 131072 (/api/show model_info.llama.context_length)" in upstream["window_source"]
    assert "loaded 4096 (the smallest default of Ollama 0.13.0)" in upstream["window_source"]
    assert upstream["loaded_window"] == 4096
    assert upstream["tokenizer"] == "tiktoken:cl100k_basex1.25"
    assert upstream["tokenizer_exact"] is False
    assert (
        upstream["tokenizer_source"]
        == "tiktoken cl100k_base over a ChatML rendering, raised by 1.25"
    )
    assert upstream["route"] == "native" and upstream["num_ctx"] == 8192
    assert result["upstream"]["url"].endswith("/api/chat")
    assert decision["counts_exact"] is False


def test_a_streamed_answer_through_the_native_api(
    start: Callable[..., str], ollama: FakeOllama
) -> None:
    base = start()
    stream = client(base).chat.completions.create(
        **ask(document(6000)), stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "The answer from the fake Ollama ."
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop" and finishes.count("stop") == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == len(
        ollama.seen[-1].words
    )
    assert not ollama.seen[-1].truncated and ollama.to("/api/chat")[-1].json["stream"] is True


def test_tool_calls_through_the_native_api(start: Callable[..., str], ollama: FakeOllama) -> None:
    ollama.tool_call = {"name": "get_weather", "arguments": {"city": "Tokyo"}}
    base = start()
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    answer = client(base).chat.completions.create(**ask(document(6000)), tools=tools)
    call = answer.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert call.id == "call_x1y2z3w4" and call.type == "function"
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {
        "city": "Tokyo"
    }
    assert answer.choices[0].finish_reason == "tool_calls"
    assert ollama.to("/api/chat")[-1].json["tools"] == tools
    stream = client(base).chat.completions.create(**ask(document(6000)), tools=tools, stream=True)
    chunks = list(stream)
    calls = [
        c.choices[0].delta.tool_calls for c in chunks if c.choices and c.choices[0].delta.tool_calls
    ]
    assert calls and calls[0][0].function.name == "get_weather"  # type: ignore[index]
    assert calls[0][0].index == 0  # type: ignore[index]
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"


def test_a_conversation_with_tool_results_is_translated(
    start: Callable[..., str], ollama: FakeOllama
) -> None:
    base = start()
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": document(3000)},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"q": "x"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "found " + document(3000)},
        {"role": "user", "content": "And so?"},
    ]
    client(base).chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
    sent = ollama.to("/api/chat")[-1].json["messages"]
    assert sent[2]["tool_calls"] == [
        {"id": "call_1", "function": {"name": "lookup", "arguments": {"q": "x"}}}
    ]
    assert sent[3]["role"] == "tool" and sent[3]["tool_name"] == "lookup"
    assert sent[3]["tool_call_id"] == "call_1"
    assert not ollama.seen[-1].truncated and len(ollama.seen[-1].words) > 4096


def test_a_small_request_goes_to_the_openai_endpoint_untouched(
    start: Callable[..., str], ollama: FakeOllama
) -> None:
    base = start()
    answer = client(base).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}]
    )
    assert answer.choices[0].message.content == "The answer from the fake Ollama ."
    assert ollama.seen[-1].path == "/v1/chat/completions"
    assert not ollama.to("/api/chat")


def test_once_raised_the_window_stays_raised(start: Callable[..., str], ollama: FakeOllama) -> None:
    base = start()
    sdk = client(base)
    sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    sdk.chat.completions.create(**ask(document(6000)))
    assert ollama.reloads == 1  # from the default window to 8192
    sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi again"}])
    # Sent natively with the same window: going back to the OpenAI endpoint would reload it.
    assert ollama.seen[-1].path == "/api/chat" and ollama.seen[-1].num_ctx == 8192
    assert ollama.reloads == 1


def test_refuse_mode_plans_with_the_loaded_window(
    start: Callable[..., str], ollama: FakeOllama
) -> None:
    base = start(ollama={"overflow": "refuse"})
    decision = preview(base, ask(document(6000)))["decision"]
    assert decision["context_window"] == 4096 and decision["strategy"] == "retrieval"
    with pytest.raises(openai.BadRequestError) as caught:
        client(base).chat.completions.create(
            **ask(document(6000)), extra_body={"enrich": {"strategy": "inject-full-content"}}
        )
    error = caught.value.body
    assert isinstance(error, dict) and error["code"] == "context_length_exceeded"
    assert (
        "Ollama runs llama3.2 with a 4096-token window and would cut a longer prompt"
        in error["message"]
    )
    assert "OLLAMA_CONTEXT_LENGTH" in error["message"] and "overflow: native" in error["message"]
    assert not ollama.seen  # nothing was sent to be cut


def test_a_document_over_the_cap_is_retrieved_not_cut(
    start: Callable[..., str], ollama: FakeOllama
) -> None:
    base = start(ollama={"max_num_ctx": 8192})
    decision = preview(base, ask(document(12000)))["decision"]
    assert decision["context_window"] == 8192 and decision["strategy"] == "retrieval"
    with pytest.raises(openai.BadRequestError) as caught:
        client(base).chat.completions.create(
            **ask(document(12000)), extra_body={"enrich": {"strategy": "inject-full-content"}}
        )
    assert "raise upstream.ollama.max_num_ctx (8192)" in str(caught.value)
    assert not any(seen.truncated for seen in ollama.seen)


def test_the_loaded_window_is_the_modelfiles_or_the_stated_default(
    start: Callable[..., str], ollama: FakeOllama
) -> None:
    ollama.models["llama3.2:latest"] = OllamaModel(modelfile_num_ctx=16384)
    base = start(ollama={"overflow": "refuse"})
    decision = preview(base, ask(document(100)))["decision"]
    assert decision["context_window"] == 16384
    assert "Modelfile num_ctx" in decision["context_window_source"]
    base = start(ollama={"overflow": "refuse", "context_length": 8192}, kind="ollama")
    decision = preview(base, ask(document(100), model="qwen3"))["decision"]
    assert decision["upstream"]["kind_source"] == "upstream.kind in the config"


def test_a_model_running_with_someones_num_ctx_is_not_trusted_for_the_openai_endpoint(
    start: Callable[..., str], ollama: FakeOllama
) -> None:
    # Another client loaded the model with num_ctx 8192: /api/ps says 8192, but a request that
    # sets none (the OpenAI endpoint's) reloads it with the default 4096 and is cut there.
    ollama.loaded["llama3.2:latest"] = (8192, False)
    refusing = start(ollama={"overflow": "refuse"})
    decision = preview(refusing, ask(document(6000)))["decision"]
    assert decision["context_window"] == 4096
    assert "running with 8192 (/api/ps context_length)" in decision["context_window_source"]
    forced = {"enrich": {"strategy": "inject-full-content"}}
    with pytest.raises(openai.BadRequestError):
        client(refusing).chat.completions.create(**ask(document(6000)), extra_body=forced)
    assert not ollama.seen
    native = start()
    client(native).chat.completions.create(**ask(document(6000)), extra_body=forced)
    assert ollama.seen[-1].path == "/api/chat" and not ollama.seen[-1].truncated
    assert ollama.seen[-1].num_ctx == 8192 and ollama.reloads == 0  # kept as it runs


def test_the_stated_default_is_planned_with(start: Callable[..., str], ollama: FakeOllama) -> None:
    ollama.default_num_ctx = 8192  # ollama serve with OLLAMA_CONTEXT_LENGTH=8192
    base = start(ollama={"overflow": "refuse", "context_length": 8192})
    decision = preview(base, ask(document(5000)))["decision"]
    assert decision["context_window"] == 8192
    assert "loaded 8192 (upstream.ollama.context_length)" in decision["context_window_source"]
    answer = client(base).chat.completions.create(
        **ask(document(5000)), extra_body={"enrich": {"strategy": "inject-full-content"}}
    )
    assert answer.choices[0].finish_reason == "stop"
    # Within the window by the estimate: the loaded window, asked for as it is (no reload),
    # and Ollama's own count the judge.
    assert ollama.seen[-1].path == "/api/chat" and ollama.seen[-1].num_ctx == 8192
    assert not ollama.seen[-1].truncated and ollama.reloads == 0


@pytest.mark.parametrize("overflow", ["native", "refuse"])
def test_only_what_surely_fits_goes_to_the_openai_endpoint(
    start: Callable[..., str], ollama: FakeOllama, overflow: str
) -> None:
    base = start(ollama={"overflow": overflow})
    sdk = client(base)
    sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi " * 500}])
    assert ollama.seen[-1].path == "/v1/chat/completions"  # 1,500 bytes: surely within 4,096
    body = ask(document(2500), enrich={"strategy": "inject-full-content"})
    decision = preview(base, body)["decision"]
    assert decision["upstream"]["route"] == "native" and decision["upstream"]["num_ctx"] == 4096
    assert "only Ollama's own count can tell" in decision["upstream"]["note"]
    sdk.chat.completions.create(**ask(document(2500)), extra_body={"enrich": body["enrich"]})
    assert ollama.seen[-1].path == "/api/chat" and ollama.seen[-1].num_ctx == 4096
    assert ollama.to("/api/chat")[-1].json["truncate"] is False and ollama.reloads == 0


def test_old_ollama_gets_no_truncate_field(start: Callable[..., str], ollama: FakeOllama) -> None:
    ollama.version = "0.11.4"
    base = start()
    client(base).chat.completions.create(**ask(document(6000)))
    assert "truncate" not in ollama.to("/api/chat")[-1].json
    assert not ollama.seen[-1].truncated


def test_the_native_apis_errors_in_openais_shape(
    start: Callable[..., str], ollama: FakeOllama
) -> None:
    base = start()
    sdk = client(base)
    sdk.chat.completions.create(**ask(document(6000)))  # window learnt, raised
    del ollama.models["llama3.2:latest"]
    with pytest.raises(openai.NotFoundError) as caught:
        sdk.chat.completions.create(**ask(document(6000)))
    assert caught.value.body == {
        "message": "model 'llama3.2' not found",
        "type": "not_found_error",
        "param": None,
        "code": None,
    }


def test_a_stream_broken_off_by_ollama_ends_with_an_error(
    start: Callable[..., str], ollama: FakeOllama
) -> None:
    ollama.fail_midstream = "model runner has unexpectedly stopped"
    base = start()
    stream = client(base).chat.completions.create(**ask(document(6000)), stream=True)
    with pytest.raises(openai.APIError) as caught:
        list(stream)
    assert "model runner has unexpectedly stopped" in str(caught.value)


def test_refused_by_ollama_when_the_estimate_fell_short(
    start: Callable[..., str], ollama: FakeOllama
) -> None:
    # Words the tokenizer counts as several tokens each, far more than tiktoken's estimate:
    # Ollama (truncate: false) refuses, and the client hears it.
    base = start(estimate_margin=1.0)
    original = ollama.run

    def dense(
        path: str, model: OllamaModel, messages: list[dict[str, Any]], options: dict[str, Any]
    ) -> Any:
        doubled = [{**m, "content": " ".join([str(m.get("content") or "")] * 3)} for m in messages]
        return original(path, model, doubled, options)

    ollama.run = dense  # type: ignore[method-assign]
    with pytest.raises(openai.BadRequestError) as caught:
        client(base).chat.completions.create(**ask(document(6000)))
    error = caught.value.body
    assert isinstance(error, dict) and error["code"] == "context_length_exceeded"
    assert error["message"].startswith("the input length exceeds the context length; Ollama runs")
    assert not ollama.seen


def test_healthz_says_what_the_upstream_is(start: Callable[..., str], ollama: FakeOllama) -> None:
    base = start()
    client(base).chat.completions.create(**ask(document(6000)))
    health = httpx.get(base + "/healthz").json()
    upstream = health["details"]["upstream"]
    assert upstream["kind"] == {
        "value": "ollama",
        "source": "GET /api/version",
        "version": "0.13.0",
    }
    assert upstream["probe_requests"] == 3
    assert upstream["windows"][MODEL]["loaded"] == 4096
    assert upstream["ollama_num_ctx"] == {"llama3.2:latest": 8192}


def test_the_responses_api_through_the_native_api(
    start: Callable[..., str], ollama: FakeOllama
) -> None:
    base = start()
    data = base64.b64encode(document(6000).encode()).decode()
    response = client(base).responses.create(
        model=MODEL,
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "What does it say?"},
                    {
                        "type": "input_file",
                        "filename": "doc.txt",
                        "file_data": f"data:text/plain;base64,{data}",
                    },
                ],
            }
        ],
    )
    assert response.output_text == "The answer from the fake Ollama ."
    assert ollama.seen[-1].path == "/api/chat" and not ollama.seen[-1].truncated
    assert FIRST in ollama.seen[-1].words and LAST in ollama.seen[-1].words
    streamed = client(base).responses.create(model=MODEL, input="Hello " * 2000, stream=True)
    events = [event.type for event in streamed]
    assert events[0] == "response.created" and events[-1] == "response.completed"
    assert ollama.seen[-1].path == "/api/chat"


def test_before_0_12_6_a_prompt_that_filled_the_window_is_flagged(
    start: Callable[..., str], ollama: FakeOllama
) -> None:
    # An Ollama that knows no truncate field, and a tokenizer far denser than the estimate:
    # it cuts; the proxy cannot prevent it there, so it says so.
    ollama.version = "0.11.4"
    base = start(estimate_margin=1.0)
    original = ollama.run

    def dense(
        path: str, model: OllamaModel, messages: list[dict[str, Any]], options: dict[str, Any]
    ) -> Any:
        doubled = [{**m, "content": " ".join([str(m.get("content") or "")] * 3)} for m in messages]
        return original(path, model, doubled, options)

    ollama.run = dense  # type: ignore[method-assign]
    response = httpx.post(base + "/v1/chat/completions", json=ask(document(6000)), timeout=60)
    assert response.status_code == 200 and ollama.seen[-1].truncated
    assert response.headers["X-Enrich-Warnings"] == (
        "Ollama evaluated 8192 prompt tokens, its whole window"
    )


def test_the_text_adapter_on_ollama_is_checked_against_the_loaded_window(
    proxy_before: Callable[..., str], ollama: FakeOllama
) -> None:
    base = proxy_before(
        ollama.base_url,  # type: ignore[attr-defined]
        models={"*": {"adapter": "text", "format": "chatml"}},
        upstream={"ollama": {"overflow": "refuse"}},
    )
    with pytest.raises(openai.BadRequestError) as caught:
        client(base).chat.completions.create(
            **ask(document(6000)), extra_body={"enrich": {"strategy": "inject-full-content"}}
        )
    assert "would cut a longer prompt without saying so" in str(caught.value)
    assert not ollama.seen


def test_native_responses_stay_on_their_route_and_are_never_cut(
    start: Callable[..., str], ollama: FakeOllama
) -> None:
    # `upstream.responses: native` on an Ollama that serves /v1/responses (0.13.3+): the request
    # goes to that route, whose window is the loaded one too. What fits goes there as it came;
    # what does not is refused with both sizes (no door: /api/chat would not answer in
    # Responses' shape), never sent to be cut.
    base = start(responses="native")
    short = client(base).responses.create(model=MODEL, input=[user_file(document(500))])
    assert short.output_text == "The answer from the fake Ollama ."
    assert ollama.seen[-1].path == "/v1/responses" and not ollama.seen[-1].truncated
    assert FIRST in ollama.seen[-1].words and LAST in ollama.seen[-1].words
    sent = len(ollama.seen)
    with pytest.raises(openai.BadRequestError) as caught:
        client(base).responses.create(model=MODEL, input=[user_file(document(6000))])
    assert caught.value.code == "context_length_exceeded"
    assert "over the window of 4096" in caught.value.message
    assert len(ollama.seen) == sent and not ollama.to("/api/chat")


def user_file(text: str) -> Any:
    data = base64.b64encode(text.encode()).decode()
    return {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "What does it say?"},
            {
                "type": "input_file",
                "filename": "doc.txt",
                "file_data": f"data:text/plain;base64,{data}",
            },
        ],
    }


def test_ollamas_read_only_routes_pass_through_and_its_own_chat_does_not(
    start: Callable[..., str], ollama: FakeOllama
) -> None:
    # A client may read what the proxy reads (the model's card, the loaded window), not drive
    # /api/chat itself: that route cuts a prompt over the window unseen and its keep_alive and
    # num_ctx unload or reload the model for every caller.
    base = start()
    client(base).chat.completions.create(**ask(document(6000)))  # loads it with num_ctx 8192
    shown = httpx.post(base + "/api/show", json={"model": MODEL}, timeout=30)
    assert shown.status_code == 200 and shown.json()["model_info"]["llama.context_length"]
    running = httpx.get(base + "/api/ps", timeout=30).json()["models"]
    assert running[0]["context_length"] == 8192
    assert (
        httpx.get(base + "/api/tags", timeout=30).json()["models"][0]["name"] == MODEL + ":latest"
    )
    chats = len(ollama.to("/api/chat"))
    for method, path in [("POST", "/api/chat"), ("POST", "/api/generate"), ("POST", "/api/pull")]:
        refused = httpx.request(method, base + path, json={"model": MODEL, "keep_alive": 0})
        assert refused.status_code == 404, path
        assert refused.json()["error"]["code"] == "route_not_forwarded"
    assert len(ollama.to("/api/chat")) == chats and not ollama.to("/api/generate")


def test_a_responses_stream_ollama_breaks_off_ends_failed(
    start: Callable[..., str], ollama: FakeOllama
) -> None:
    # Ollama's NDJSON error line, reframed as an event, ends a Responses stream as OpenAI's
    # own failed stream ends: `error`, then `response.failed`, with Ollama's message.
    ollama.fail_midstream = "model runner has unexpectedly stopped"
    base = start()
    events = list(
        client(base).responses.create(model=MODEL, input=[user_file(document(6000))], stream=True)
    )
    assert ollama.seen[-1].path == "/api/chat"
    assert [event.type for event in events[-2:]] == ["error", "response.failed"]
    failed = events[-1].response  # type: ignore[union-attr]
    assert failed.error is not None
    assert "model runner has unexpectedly stopped" in failed.error.message
    assert [event.sequence_number for event in events] == list(range(len(events)))


@pytest.mark.parametrize("route", ["chat", "responses"])
@pytest.mark.parametrize("started", [False, True])
def test_ollamas_refusal_reaches_the_client_converted_started_or_not(
    proxy_before: Callable[..., str], ollama: FakeOllama, route: str, started: bool
) -> None:
    # /api/chat refuses (`{"error": "..."}`, truncate: false: the estimate fell short). Not
    # started: a 400 context_length_exceeded in OpenAI's shape. A stream the statuses started
    # (no delay): it ends with the same message and code — chat's error event, or Responses'
    # `error` and `response.failed`.
    original = ollama.run

    def dense(
        path: str, model: OllamaModel, messages: list[dict[str, Any]], options: dict[str, Any]
    ) -> Any:
        tripled = [{**m, "content": " ".join([str(m.get("content") or "")] * 3)} for m in messages]
        return original(path, model, tripled, options)

    ollama.run = dense  # type: ignore[method-assign]
    server = {"status_delay_s": 0.0} if started else {}
    base = proxy_before(
        ollama.base_url,  # type: ignore[attr-defined]
        server=server,
        upstream={"estimate_margin": 1.0},
    )
    refusal = "the input length exceeds the context length; Ollama runs"
    sdk = client(base)
    if route == "chat" or not started:
        with pytest.raises(openai.APIError) as caught:
            if route == "chat":
                list(sdk.chat.completions.create(**ask(document(6000)), stream=started))
            else:
                sdk.responses.create(model=MODEL, input=[user_file(document(6000))])
        error = caught.value.body
        assert isinstance(error, dict) and error["code"] == "context_length_exceeded"
        assert error["message"].startswith(refusal)
        assert isinstance(caught.value, openai.BadRequestError) != started
    else:
        events = list(
            sdk.responses.create(model=MODEL, input=[user_file(document(6000))], stream=True)
        )
        assert events[0].type == "response.created"
        assert [event.type for event in events[-2:]] == ["error", "response.failed"]
        assert events[-2].code == "context_length_exceeded"  # type: ignore[union-attr]
        failed = events[-1].response  # type: ignore[union-attr]
        assert failed.error is not None and failed.error.message.startswith(refusal)
    assert ollama.to("/api/chat") and not ollama.seen


KEYS = [
    {"name": "team", "key": "team-healthz-key-000001"},
    {"name": "ops", "key": "ops-healthz-key-0000002", "admin": True},
]


def test_healthz_tells_the_windows_to_an_admin_key_only(
    proxy_before: Callable[..., str], ollama: FakeOllama
) -> None:
    # /healthz needs no key. The model names are what callers sent, and the window the proxy
    # asked Ollama for says how long someone's prompt was: with keys, an admin key's only (as
    # /metrics' document sources).
    base = proxy_before(ollama.base_url, server={"api_keys": KEYS})  # type: ignore[attr-defined]
    team = openai.OpenAI(base_url=base + "/v1", api_key=KEYS[0]["key"], max_retries=0)
    team.chat.completions.create(**ask(document(6000)))  # raises the window to 8192

    def upstream_details(key: str | None) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        found: dict[str, Any] = httpx.get(base + "/healthz", headers=headers, timeout=30).json()
        return found["details"]["upstream"]  # type: ignore[no-any-return]

    for key in (None, KEYS[0]["key"]):
        seen = upstream_details(key)
        assert seen["kind"]["value"] == "ollama" and seen["probe_requests"] == 3
        assert "windows" not in seen and "ollama_num_ctx" not in seen
        assert "llama3.2" not in json.dumps(seen)
    admin = upstream_details(KEYS[1]["key"])
    assert admin["windows"][MODEL]["loaded"] == 4096
    assert admin["ollama_num_ctx"] == {"llama3.2:latest": 8192}


def test_the_windows_healthz_remembers_are_bounded() -> None:
    # Model names come from callers: /healthz keeps the last 256, as the windows' cache does.
    introspection = ModelIntrospection(load_settings(None, environ={}), None)  # type: ignore[arg-type]

    async def learn(model: str | None) -> ContextWindow:
        return ContextWindow(4096, "GET /props")

    introspection._learn_window = learn  # type: ignore[method-assign]

    async def ask_many() -> None:
        for number in range(1000):
            await introspection.context_window(f"model-{number}")

    asyncio.run(ask_many())
    windows = introspection.known()["windows"]
    assert len(windows) == 256 and "model-999" in windows and "model-0" not in windows
