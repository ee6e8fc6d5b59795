"""GET /api/ps through the proxy: with keys, the window the proxy raised for someone's prompt
(and the sizes and times it shapes) for an admin key only, as /healthz decides."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import openai
import pytest

from proxy.upstream.ollama.api import public_processes
from tests.fakes.ollama import FakeOllama
from tests.fakes.servers import ServerThread
from tests.upstream.test_ollama import KEYS, ask, document


@pytest.fixture
def ollama(servers: ServerThread) -> FakeOllama:
    fake = FakeOllama()
    fake.base_url = servers.serve(fake.app())  # type: ignore[attr-defined]
    return fake


def running(base: str, key: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.get(base + "/api/ps", headers=headers, timeout=30)


def test_a_key_sees_which_models_are_loaded_not_how(
    proxy_before: Callable[..., str], ollama: FakeOllama
) -> None:
    base = proxy_before(ollama.base_url, server={"api_keys": KEYS})  # type: ignore[attr-defined]
    team = openai.OpenAI(base_url=base + "/v1", api_key=KEYS[0]["key"], max_retries=0)
    team.chat.completions.create(**ask(document(6000)))  # the proxy raises the window to 8192
    seen = running(base, KEYS[0]["key"])
    assert seen.status_code == 200 and seen.headers["Content-Type"].startswith("application/json")
    [model] = seen.json()["models"]
    assert model["name"] == "llama3.2:latest" and model["details"]["family"] == "llama"
    assert "8192" not in seen.text
    assert not {"context_length", "size", "size_vram", "expires_at"} & set(model)
    assert running(base, None).status_code == 401  # no key, no answer (as every route)
    admin = running(base, KEYS[1]["key"]).json()["models"][0]
    assert admin["context_length"] == 8192 and admin["size_vram"] and admin["expires_at"]


def test_without_keys_everyone_is_the_operator(
    proxy_before: Callable[..., str], ollama: FakeOllama
) -> None:
    base = proxy_before(ollama.base_url)  # type: ignore[attr-defined]
    openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0).chat.completions.create(
        **ask(document(6000))
    )
    assert running(base, None).json()["models"][0]["context_length"] == 8192


def test_what_a_key_may_read_of_the_loaded_models() -> None:
    body = {
        "models": [
            {
                "name": "m:latest",
                "model": "m:latest",
                "size": 1,
                "digest": "d",
                "details": {"family": "llama"},
                "expires_at": "2026-08-01T10:05:00Z",
                "size_vram": 1,
                "context_length": 8192,
            },
            "not a model",
        ]
    }
    assert public_processes(body) == {
        "models": [
            {"name": "m:latest", "model": "m:latest", "digest": "d", "details": {"family": "llama"}}
        ]
    }
    assert public_processes([]) == {"models": []}
