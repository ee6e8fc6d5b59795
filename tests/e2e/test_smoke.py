"""Smoke tests straight against the real llama-server instances and Chroma (no proxy)."""

from __future__ import annotations

import math

import httpx
import pytest
from openai import OpenAI
from openai.types.chat import ChatCompletion

pytestmark = pytest.mark.e2e

TIMEOUT = httpx.Timeout(60.0)


def test_health(llama_server: str) -> None:
    resp = httpx.get(f"{llama_server}/health", timeout=TIMEOUT)
    assert resp.status_code == 200
    assert resp.json() == {"status": "ok"}


def test_props_and_models_report_the_context(llama_server: str) -> None:
    props = httpx.get(f"{llama_server}/props", timeout=TIMEOUT).json()
    assert props["default_generation_settings"]["n_ctx"] == 4096
    assert props["total_slots"] == 1
    assert props["model_path"].endswith(".gguf")
    models = httpx.get(f"{llama_server}/v1/models", timeout=TIMEOUT).json()
    assert models["object"] == "list"
    (model,) = models["data"]
    assert model["owned_by"] == "llamacpp"
    assert model["meta"]["n_ctx"] == 4096
    assert model["meta"]["n_ctx_train"] >= 4096


def test_tokenize_turns_a_control_string_into_one_token(llama_server: str) -> None:
    def tokenize(parse_special: bool) -> list[int]:
        body = {"content": "<start_of_turn>", "add_special": False, "parse_special": parse_special}
        resp = httpx.post(f"{llama_server}/tokenize", json=body, timeout=TIMEOUT)
        assert resp.status_code == 200
        tokens: list[int] = resp.json()["tokens"]
        return tokens

    assert tokenize(True) == [105]
    # As plain text the same characters take several ordinary tokens.
    assert len(tokenize(False)) > 1
    resp = httpx.post(f"{llama_server}/detokenize", json={"tokens": [105]}, timeout=TIMEOUT)
    assert resp.json() == {"content": "<start_of_turn>"}


def test_chat_completion_with_the_openai_sdk(llama_server: str) -> None:
    client = OpenAI(base_url=f"{llama_server}/v1", api_key="unused", timeout=60.0)

    def ask() -> ChatCompletion:
        return client.chat.completions.create(
            model="gemma",
            messages=[{"role": "user", "content": "Say hello."}],
            max_tokens=8,
            temperature=0,
        )

    first = ask()
    assert len(first.choices) == 1
    choice = first.choices[0]
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert first.usage is not None and 0 < first.usage.completion_tokens <= 8
    # --no-cache-prompt: the same greedy request gives the same answer.
    second = ask()
    assert second.choices[0].message.content == choice.message.content


def test_embeddings(llama_embed_server: str) -> None:
    client = OpenAI(base_url=f"{llama_embed_server}/v1", api_key="unused", timeout=60.0)
    result = client.embeddings.create(model="gemma", input=["hello world", "a second text"])
    vectors = [item.embedding for item in result.data]
    assert len(vectors) == 2
    assert len(vectors[0]) == len(vectors[1]) > 0
    # Pooled embeddings come back normalised (Euclidean norm 1).
    assert math.isclose(math.fsum(x * x for x in vectors[0]), 1.0, rel_tol=1e-3)
    assert vectors[0] != vectors[1]


def test_chroma_heartbeat(chroma_server: tuple[str, int]) -> None:
    host, port = chroma_server
    resp = httpx.get(f"http://{host}:{port}/api/v2/heartbeat", timeout=TIMEOUT)
    assert resp.status_code == 200
    assert "nanosecond heartbeat" in resp.json()
