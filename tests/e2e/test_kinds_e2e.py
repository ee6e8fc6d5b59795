"""Real servers found by their answers, with their windows and token counts: llama.cpp
(xllamacpp) and, where installed, llama-cpp-python."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from proxy.config import load_settings
from tests.fakes.servers import ServerThread

pytestmark = pytest.mark.e2e

SENTENCE = "The lighthouse keeper counted ships passing in the night. "


@pytest.fixture
def proxy_for(tmp_path: Path) -> Iterator[Callable[..., str]]:
    thread = ServerThread()

    def start(upstream: str, **sections: Any) -> str:
        overrides: dict[str, Any] = {
            "upstream": {"base_url": upstream},
            "server": {"data_dir": str(tmp_path / "data"), "status_delay_s": 0.0},
        }
        for key, value in sections.items():
            overrides[key] = {**overrides.get(key, {}), **value}
        return thread.serve_proxy(load_settings(None, environ={}, overrides=overrides))

    yield start
    thread.close()


def ask(text: str, **body: Any) -> dict[str, Any]:
    data = base64.b64encode(text.encode()).decode()
    part = {
        "type": "file",
        "file": {"filename": "notes.txt", "file_data": f"data:text/plain;base64,{data}"},
    }
    return {
        "model": "gemma",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Summarise."}, part]}],
        **body,
    }


def preview(base: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(base + "/v1/enrich/preview", json=body, timeout=300)
    assert response.status_code == 200, response.text
    decision: dict[str, Any] = response.json()["decision"]
    return decision


def test_llamacpp_is_found_by_its_props(llama_server: str, proxy_for: Callable[..., str]) -> None:
    base = proxy_for(llama_server)
    upstream = preview(base, ask(SENTENCE * 5))["upstream"]
    assert upstream["kind"] == "llamacpp" and upstream["kind_source"] == "GET /props"
    assert upstream["window"] == 4096 and upstream["window_exact"] is True
    assert upstream["tokenizer"] == "llamacpp" and upstream["tokenizer_exact"] is True
    health = httpx.get(base + "/healthz").json()
    assert health["details"]["upstream"]["kind"]["value"] == "llamacpp"


def test_llama_cpp_python_its_counts_and_its_refusal(
    llama_cpp_python_server: str, proxy_for: Callable[..., str]
) -> None:
    base = proxy_for(llama_cpp_python_server, models={"*": {"context_length": 2048}})
    text = SENTENCE * 5
    decision = preview(base, ask(text))
    upstream = decision["upstream"]
    assert upstream["kind"] == "llama-cpp-python"
    assert upstream["kind_source"] == "POST /extras/tokenize/count"
    assert upstream["window"] == 2048 and upstream["window_source"] == "config"
    # The server's own tokenizer, on the document's text (parsed: its last space gone).
    own = httpx.post(
        llama_cpp_python_server + "/extras/tokenize/count", json={"input": text.strip()}
    )
    assert decision["file_tokens"] == own.json()["count"]
    client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=300)
    answer = client.chat.completions.create(**ask(text, max_tokens=8, temperature=0))
    # A 270M model may say nothing at all: the answer went through, that is what counts here.
    assert answer.choices[0].finish_reason in ("stop", "length")
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            **ask(SENTENCE * 400, max_tokens=8),
            extra_body={"enrich": {"strategy": "inject-full-content"}},
        )
    # The proxy's own check, or the server's refusal: never a prompt cut.
    assert caught.value.body["code"] == "context_length_exceeded"  # type: ignore[index]
