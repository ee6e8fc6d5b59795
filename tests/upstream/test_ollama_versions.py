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


FORCED = {"enrich": {"strategy": "inject-full-content"}}


@pytest.mark.parametrize(
    ("gib", "default"), [(8, 4096), (24, 32768), (48, 131072)], ids=["4k", "32k", "256k"]
)
def test_the_default_window_by_gpu_memory_is_learnt_not_assumed(
    proxy_before: Callable[..., str], ollama: FakeOllama, gib: int, default: int
) -> None:
    # Ollama 0.15.5+ gives a model 4k, 32k or 256k tokens (capped at its trained 128k) by the
    # GPUs' memory, which no endpoint says. The model not loaded yet, the proxy loads it with
    # none set, as any request would, and reads the window /api/ps says.
    ollama.version = "0.15.5"
    ollama.gpu_memory_gib = gib
    base = proxy_before(ollama.base_url, upstream={"ollama": {"overflow": "refuse"}})  # type: ignore[attr-defined]
    upstream = preview(base, ask(document(6000)))["decision"]["upstream"]
    assert upstream["loaded_window"] == default and upstream["window"] == default
    assert (
        "the default of this Ollama, learnt: /api/ps context_length after loading llama3.2"
        in (upstream["window_source"])
    )
    [load] = ollama.to("/api/generate")
    assert load.json == {"model": MODEL}
    if default == 4096:  # what the proxy assumed before, now known: still too small
        with pytest.raises(openai.BadRequestError):
            client(base).chat.completions.create(**ask(document(6000)), extra_body=FORCED)
        return
    # A document the smallest default would have turned away is answered whole, in the window
    # the model already runs with: nothing reloaded, nothing cut.
    answer = client(base).chat.completions.create(**ask(document(6000)), extra_body=FORCED)
    assert answer.choices[0].message.content == "The answer from the fake Ollama ."
    assert not ollama.seen[-1].truncated and ollama.seen[-1].num_ctx == default
    assert ollama.loads == 1 and ollama.reloads == 0


def test_the_learnt_default_serves_every_model_it_tells(
    proxy_before: Callable[..., str], ollama: FakeOllama
) -> None:
    ollama.version = "0.17.0"
    ollama.gpu_memory_gib = 24
    ollama.models["qwen3:latest"] = OllamaModel(name="qwen3:latest", trained=40960)
    ollama.models["small:latest"] = OllamaModel(name="small:latest", trained=8192)
    base = proxy_before(ollama.base_url)  # type: ignore[attr-defined]
    preview(base, ask(document(100)))
    for model, window in [("qwen3", 32768), ("small", 8192)]:
        upstream = preview(base, ask(document(100), model=model))["decision"]["upstream"]
        assert upstream["loaded_window"] == window
        assert (
            "the default of this Ollama, learnt on llama3.2 (/api/ps)"
            in (upstream["window_source"])
        )
    assert len(ollama.to("/api/generate")) == 1  # learnt once, for the server


def test_a_model_already_running_is_not_disturbed_to_learn_it(
    proxy_before: Callable[..., str], ollama: FakeOllama
) -> None:
    # Running with a window that may be someone's num_ctx: never reloaded to learn the default;
    # the smallest one is planned with, and the record says why.
    ollama.version = "0.15.5"
    ollama.gpu_memory_gib = 24
    ollama.loaded["llama3.2:latest"] = (16384, False)
    base = proxy_before(ollama.base_url, upstream={"ollama": {"overflow": "refuse"}})  # type: ignore[attr-defined]
    upstream = preview(base, ask(document(6000)))["decision"]["upstream"]
    assert upstream["loaded_window"] == 4096
    assert "not learnt, the model was loaded already" in upstream["window_source"]
    assert not ollama.to("/api/generate") and ollama.reloads == 0


def test_a_stated_default_or_an_older_ollama_needs_no_learning(
    proxy_before: Callable[..., str], ollama: FakeOllama
) -> None:
    ollama.version = "0.15.5"
    base = proxy_before(ollama.base_url, upstream={"ollama": {"context_length": 8192}})  # type: ignore[attr-defined]
    assert preview(base, ask(document(100)))["decision"]["upstream"]["loaded_window"] == 8192
    ollama.version = "0.15.4"
    base = proxy_before(ollama.base_url)  # type: ignore[attr-defined]
    assert preview(base, ask(document(100)))["decision"]["upstream"]["loaded_window"] == 4096
    assert not ollama.to("/api/generate")
