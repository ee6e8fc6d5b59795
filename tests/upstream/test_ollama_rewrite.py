"""Behind Ollama, a follow-up's standalone question is asked of /api/chat with the window the
model runs with (its OpenAI endpoint would reload it with the default) and thinking off."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.fakes.ollama import FakeOllama
from tests.fakes.servers import ServerThread
from tests.retrieval.test_conversations import faq
from tests.upstream.test_ollama import MODEL, client, text_part

FOLLOW_UP = "And with the other interface?"
STANDALONE = "How do I stop a running transfer with the multi interface?"


@pytest.fixture
def ollama(servers: ServerThread) -> FakeOllama:
    fake = FakeOllama(rewrites={FOLLOW_UP: STANDALONE})
    fake.base_url = servers.serve(fake.app())  # type: ignore[attr-defined]
    return fake


def conversation() -> list[dict[str, Any]]:
    first = [{"type": "text", "text": "How do I stop a running transfer?"}]
    return [
        {"role": "user", "content": [*first, text_part("faq.md", faq())]},
        {"role": "assistant", "content": "Return an error from the progress callback."},
        {"role": "user", "content": FOLLOW_UP},
    ]


def test_the_rewrite_is_asked_with_the_running_window_and_no_thinking(
    proxy_before: Callable[..., str], ollama: FakeOllama
) -> None:
    ollama.loaded["llama3.2:latest"] = (16384, False)  # the window /api/ps says it runs with
    base = proxy_before(
        ollama.base_url,  # type: ignore[attr-defined]
        retrieval={
            "chunk_tokens": 60,
            "chunk_overlap": 0,
            "history": {"turns": 0},
            "rewrite": {"ask": "question"},
        },
    )
    raw = client(base).chat.completions.with_raw_response.create(
        model=MODEL,
        messages=conversation(),  # type: ignore[arg-type]
    )
    raw.parse()
    assert raw.headers["X-Enrich-Rewrite"] == "rewritten"
    [rewriting] = [r for r in ollama.to("/api/chat") if "Rewrite the" in str(r.json["messages"])]
    body = rewriting.json
    assert body["options"]["num_ctx"] == 16384 and body["options"]["num_predict"] == 64
    assert body["options"]["temperature"] == 0
    assert body["think"] is False and body["stream"] is False
    # Asked with the window it runs with: the rewrite itself loaded nothing anew.
    assert ollama.seen[0].path == "/api/chat" and ollama.seen[0].num_ctx == 16384
    # The question itself (its window fits Ollama's default: the OpenAI endpoint) found the
    # multi interface's passage through the rewrite.
    [answered] = ollama.to("/v1/chat/completions")
    assert "Rewrite the" not in str(answered.json)
    assert "remove the easy handle" in str(answered.json["messages"][-1]["content"])
