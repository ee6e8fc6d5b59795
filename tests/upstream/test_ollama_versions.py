"""Ollama as the versions people run behave: the refusal of a prompt over the window in each
runner's words, and the default window that depends on the GPUs' memory from 0.15.5."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from tests.fakes.ollama import FakeOllama, OllamaModel
from tests.fakes.servers import ServerThread
from tests.upstream.test_ollama import MODEL, ask, client, document, preview


@pytest.fixture
def ollama(servers: ServerThread) -> FakeOllama:
    fake = FakeOllama()
    fake.base_url = servers.serve(fake.app())  # type: ignore[attr-defined]
    return fake


def denser(ollama: FakeOllama, times: int = 3) -> None:
    """Ollama's tokenizer counting `times` as many tokens as the estimate: it refuses."""
    original = ollama.run

    def dense(
        path: str, model: OllamaModel, messages: list[dict[str, Any]], options: dict[str, Any]
    ) -> Any:
        repeated = [
            {**m, "content": " ".join([str(m.get("content") or "")] * times)} for m in messages
        ]
        return original(path, model, repeated, options)

    ollama.run = dense  # type: ignore[method-assign]


@pytest.mark.parametrize("started", [False, True])
def test_llama_servers_refusal_through_ollama_0_30_reaches_the_client_as_one(
    proxy_before: Callable[..., str], ollama: FakeOllama, started: bool
) -> None:
    # From 0.30 Ollama runs GGUF models in llama-server: with truncate: false the prompt goes
    # there whole, and llama-server's own 400 comes back as Ollama's error text, a JSON
    # document in a string. The client gets its message, the code and how to raise the window.
    ollama.version = "0.30.11"
    denser(ollama)
    base = proxy_before(
        ollama.base_url,  # type: ignore[attr-defined]
        server={"status_delay_s": 0.0} if started else {},
        upstream={"estimate_margin": 1.0},
    )
    with pytest.raises(openai.APIError) as caught:
        list(client(base).chat.completions.create(**ask(document(6000)), stream=started))
    error = caught.value.body
    assert isinstance(error, dict) and error["code"] == "context_length_exceeded"
    assert error["message"].startswith(
        "request (18151 tokens) exceeds the available context size (8192 tokens), try "
        "increasing it; Ollama runs llama3.2 with a 4096-token window"
    )
    assert isinstance(caught.value, openai.BadRequestError) != started
    sent = ollama.to("/api/chat")[-1].json
    assert sent["truncate"] is False and not ollama.seen


def test_the_go_runners_refusal_is_read_as_before(
    proxy_before: Callable[..., str], ollama: FakeOllama
) -> None:
    denser(ollama)
    base = proxy_before(ollama.base_url, upstream={"estimate_margin": 1.0})  # type: ignore[attr-defined]
    with pytest.raises(openai.BadRequestError) as caught:
        client(base).chat.completions.create(**ask(document(6000)))
    assert caught.value.code == "context_length_exceeded"
    assert caught.value.message.endswith(
        "the input length exceeds the context length; Ollama runs llama3.2 with a 4096-token "
        "window and would cut a longer prompt without saying so; set OLLAMA_CONTEXT_LENGTH for "
        "`ollama serve` (and upstream.ollama.context_length) or PARAMETER num_ctx in the "
        "model's Modelfile, or raise upstream.ollama.max_num_ctx (32768)"
    )


@pytest.mark.parametrize(
    ("version", "prompt_tokens", "kept"),
    [("0.13.0", 4096, 4092), ("0.30.0", 4095, 4091), ("0.30.11", 2050, 2046)],
)
def test_ollama_cuts_a_long_prompt_and_keeps_answering(
    ollama: FakeOllama, version: str, prompt_tokens: int, kept: int
) -> None:
    # What the proxy never lets happen, straight to Ollama's OpenAI endpoint: the prompt cut
    # (to the window by the Go runner, one token less by llama-server, to about half from
    # 0.30.11), then the answer generated whole past the window's end by context shifting.
    ollama.version = version
    answer = httpx.post(
        ollama.base_url + "/v1/chat/completions",  # type: ignore[attr-defined]
        json={"model": MODEL, "messages": [{"role": "user", "content": document(6000)}]},
    ).json()
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert answer["choices"][0]["message"]["content"] == "The answer from the fake Ollama ."
    assert answer["usage"]["prompt_tokens"] == prompt_tokens
    assert ollama.seen[-1].truncated and len(ollama.seen[-1].words) - 4 == kept


def test_without_context_shift_the_answer_stops_at_the_windows_end(ollama: FakeOllama) -> None:
    answer = httpx.post(
        ollama.base_url + "/api/chat",  # type: ignore[attr-defined]
        json={
            "model": MODEL,
            "messages": [{"role": "user", "content": document(6000)}],
            "stream": False,
            "shift": False,
        },
    ).json()
    assert answer["done_reason"] == "length" and answer["eval_count"] == 0


def test_the_decision_says_which_window_was_planned_with(
    proxy_before: Callable[..., str], ollama: FakeOllama
) -> None:
    base = proxy_before(ollama.base_url)  # type: ignore[attr-defined]
    upstream = preview(base, ask(document(6000)))["decision"]["upstream"]
    assert "loaded 4096 (the smallest default of Ollama 0.13.0)" in upstream["window_source"]
