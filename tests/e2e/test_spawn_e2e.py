"""The proxy's own local server (`upstream.spawn`), as the README's first command runs it."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.config import load_settings
from proxy.http.app import make_app
from proxy.upstream.launch import xllamacpp_installed
from proxy.upstream.spawn import LlamaServer
from tests.e2e.conftest import CHAT_ARGS, spawn_settings, start_spawned
from tests.fakes.servers import ServerThread

pytestmark = pytest.mark.e2e

HELLO = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]


def apply_template(base: str) -> str:
    response = httpx.post(f"{base}/apply-template", json={"messages": HELLO}, timeout=60)
    assert response.status_code == 200, response.text
    prompt: str = response.json()["prompt"]
    return prompt


def test_the_spawned_gemma_speaks_its_own_format(llama_server: str) -> None:
    # The GGUF has no template: without ours llama.cpp would render ChatML (<|im_start|>).
    assert apply_template(llama_server) == (
        "<start_of_turn>user\nBe brief.\n\nHello<end_of_turn>\n<start_of_turn>model\n"
    )


async def test_binary_backend(llama_binary: str, gemma_model: str, tmp_path: Path) -> None:
    spawn = spawn_settings(
        gemma_model, backend="binary", binary=llama_binary, extra_args=["--no-repack", *CHAT_ARGS]
    )
    server: LlamaServer = await start_spawned(tmp_path, spawn)
    try:
        assert "<start_of_turn>user\n" in apply_template(server.base_url)
        answer = httpx.post(
            f"{server.base_url}/v1/chat/completions",
            json={"messages": HELLO, "max_tokens": 4, "temperature": 0},
            timeout=120,
        )
        assert answer.status_code == 200, answer.text
    finally:
        await server.stop()


@pytest.fixture
def spawning_proxy(tmp_path: Path, gemma_model: str) -> Iterator[str]:
    if not xllamacpp_installed():
        pytest.skip("xllamacpp is not installed (pip install '.[local]')")
    thread = ServerThread()
    overrides: dict[str, Any] = {
        "upstream": {"spawn": spawn_settings(gemma_model, extra_args=CHAT_ARGS)},
        "server": {"data_dir": str(tmp_path / "data")},
    }
    try:
        yield thread.serve(make_app(load_settings(None, environ={}, overrides=overrides)))
    finally:
        thread.close()


def test_first_command_answers_about_a_pdf(spawning_proxy: str, corpus_dir: Path) -> None:
    pdf = base64.b64encode((corpus_dir / "pdf" / "tracemonkey.pdf").read_bytes()).decode()
    body = {
        "max_tokens": 24,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this document about?"},
                    {
                        "type": "file",
                        "file": {
                            "filename": "paper.pdf",
                            "file_data": "data:application/pdf;base64," + pdf,
                        },
                    },
                ],
            }
        ],
    }
    health = httpx.get(f"{spawning_proxy}/healthz", timeout=30).json()
    assert (health["status"], health["proxy"], health["upstream"]) == ("ok", "ok", 200)
    response = httpx.post(f"{spawning_proxy}/v1/chat/completions", json=body, timeout=600)
    assert response.status_code == 200, response.text
    assert response.headers["X-Enrich-Strategy"] == "retrieval"
    answer = response.json()
    assert answer["choices"][0]["message"]["content"]
    assert answer["citations"], json.dumps(answer)[:500]
    assert all(c.startswith("paper.pdf#page=") for c in answer["citations"])
