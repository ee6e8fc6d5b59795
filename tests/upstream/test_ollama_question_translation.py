"""Behind Ollama, a question translated for a document in another language is asked with the
window the model runs with, so that translating reloads nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.fakes.ollama import FakeOllama
from tests.fakes.servers import ServerThread
from tests.retrieval.test_cross_language import CONTRACT, FIND, IN_RUSSIAN, QUESTION, SMALL
from tests.upstream.test_ollama import MODEL, ask, client, document, preview, text_part


@pytest.fixture
def ollama(servers: ServerThread) -> FakeOllama:
    fake = FakeOllama(translations={QUESTION: IN_RUSSIAN})
    fake.base_url = servers.serve(fake.app())  # type: ignore[attr-defined]
    return fake


@pytest.fixture
def base(proxy_before: Callable[..., str], ollama: FakeOllama) -> str:
    return proxy_before(ollama.base_url, retrieval=SMALL)  # type: ignore[attr-defined]


def contract_question() -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": QUESTION},
                    text_part("договор.txt", CONTRACT),
                ],
            }
        ],
        "enrich": FIND,
    }


def test_a_translation_reloads_nothing_once_the_window_was_raised(
    base: str, ollama: FakeOllama
) -> None:
    sdk = client(base)
    sdk.chat.completions.create(**ask(document(6000)))  # the proxy raises the window to 8192
    assert ollama.loaded["llama3.2:latest"] == (8192, False) and ollama.reloads == 0
    body = contract_question()
    sdk.chat.completions.create(
        model=MODEL, messages=body["messages"], extra_body={"enrich": body["enrich"]}
    )
    # Neither the translation nor the question after it reloaded the model (each did before:
    # Ollama's OpenAI endpoint asks for the default window, the question again for 8192).
    assert ollama.reloads == 0 and ollama.loaded["llama3.2:latest"] == (8192, False)
    [translating] = [r for r in ollama.to("/api/chat") if "Translate" in str(r.json["messages"])]
    assert translating.json["options"]["num_ctx"] == 8192
    assert translating.json["options"]["num_predict"] <= 96
    assert translating.json["options"]["temperature"] == 0 and translating.json["stream"] is False
    assert not ollama.to("/v1/chat/completions")
    record = preview(base, contract_question())["decision"]["retrieval"]
    [translation] = record["translations"]
    assert translation["endpoint"] == "native" and translation["query"] == IN_RUSSIAN


def test_a_model_loaded_with_someones_window_is_asked_with_it(
    base: str, ollama: FakeOllama
) -> None:
    ollama.loaded["llama3.2:latest"] = (16384, False)  # another client's num_ctx, /api/ps says
    [translation] = preview(base, contract_question())["decision"]["retrieval"]["translations"]
    assert translation["endpoint"] == "native" and translation["query"] == IN_RUSSIAN
    assert ollama.to("/api/chat")[-1].json["options"]["num_ctx"] == 16384
    assert ollama.reloads == 0


def test_with_the_default_window_the_openai_endpoint_is_asked_as_before(
    base: str, ollama: FakeOllama
) -> None:
    [translation] = preview(base, contract_question())["decision"]["retrieval"]["translations"]
    assert translation["endpoint"] == "chat" and translation["query"] == IN_RUSSIAN
    assert ollama.to("/v1/chat/completions") and not ollama.to("/api/chat")
