"""Every kind of server behind the proxy: found from what it answers, its window and tokens
learnt from its own endpoints, and no prompt cut without the client knowing — through the real
openai SDK against fakes answering each server's recorded shapes."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from tests.fakes.koboldcpp import FakeKoboldCpp
from tests.fakes.llama_cpp_python import FakeLlamaCppPython
from tests.fakes.lmstudio import FakeLmStudio
from tests.fakes.openai_like import OpenAIServer
from tests.fakes.openrouter import FakeOpenRouter
from tests.fakes.servers import ServerThread
from tests.fakes.sglang import FakeSglang
from tests.fakes.tabbyapi import FakeTabbyApi
from tests.fakes.textgen import FakeTextgen
from tests.fakes.tgi import FakeTgi

WORDS = ["house", "river", "stone", "light", "water", "green", "table", "music"]


def text(words: int, first: str = "ALPHASTART") -> str:
    return " ".join([first, *(WORDS[n % len(WORDS)] for n in range(words - 1))])


def file_part(content: str) -> dict[str, Any]:
    data = base64.b64encode(content.encode()).decode()
    return {
        "type": "file",
        "file": {"filename": "doc.txt", "file_data": f"data:text/plain;base64,{data}"},
    }


def ask(model: str, content: str, **body: Any) -> dict[str, Any]:
    parts = [{"type": "text", "text": "What is in it?"}, file_part(content)]
    return {"model": model, "messages": [{"role": "user", "content": parts}], **body}


def long_chat(model: str, turns: int, words: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for n in range(turns):
        messages.append({"role": "user", "content": text(words, f"Q{n}")})
        messages.append({"role": "assistant", "content": text(words, f"A{n}")})
    messages.append({"role": "user", "content": "And the last question?"})
    return {"model": model, "messages": messages}


def client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60)


def preview(base: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(base + "/v1/enrich/preview", json=body, timeout=60)
    assert response.status_code == 200, response.text
    decision: dict[str, Any] = response.json()["decision"]
    return decision


@pytest.fixture
def behind(
    servers: ServerThread, proxy_before: Callable[..., str]
) -> Callable[..., tuple[str, Any]]:
    """A fake of one kind, and a proxy in front of it."""

    def start(fake: OpenAIServer, **sections: Any) -> tuple[str, Any]:
        fake.base_url = servers.serve(fake.app())  # type: ignore[attr-defined]
        return proxy_before(fake.base_url, **sections), fake  # type: ignore[attr-defined]

    return start


KINDS = [
    (
        FakeKoboldCpp,
        "koboldcpp",
        "GET /api/extra/version",
        "koboldcpp /api/extra/true_max_context_length",
        "koboldcpp",
        False,
        "/api/extra/tokencount",
    ),
    (
        FakeTabbyApi,
        "tabbyapi",
        "GET /.well-known/serviceinfo",
        "tabbyapi /v1/model parameters.max_seq_len",
        "tabbyapi",
        True,
        "/v1/token/encode",
    ),
    (
        FakeTextgen,
        "textgen",
        "GET /v1/internal/model/info",
        None,
        "textgen",
        True,
        "/v1/internal/token-count",
    ),
    (FakeTgi, "tgi", "GET /info", "tgi /info max_total_tokens", "tgi", True, "/chat_tokenize"),
    (
        FakeSglang,
        "sglang",
        "GET /get_model_info",
        "sglang /v1/models max_model_len",
        "sglang",
        False,
        "/tokenize",
    ),
    (
        FakeLmStudio,
        "lmstudio",
        "GET /api/v1/models",
        "lmstudio: loaded 4096 (/api/v1/models loaded_instances.config.context_length), max 262144",
        "tiktoken:cl100k_basex1.25",
        False,
        None,
    ),
    (
        FakeLlamaCppPython,
        "llama-cpp-python",
        "POST /extras/tokenize/count",
        None,
        "llama-cpp-python",
        False,
        "/extras/tokenize/count",
    ),
    (
        FakeOpenRouter,
        "openrouter",
        "GET /v1/models (context lengths in the list)",
        "/v1/models top_provider.context_length",
        "tiktoken:cl100k_base",
        False,
        None,
    ),
]


@pytest.mark.parametrize(
    ("fake_class", "kind", "found_by", "window_source", "tokenizer", "exact", "count_path"),
    KINDS,
    ids=[row[1] for row in KINDS],
)
def test_each_kind_is_found_and_its_window_and_tokens_learnt(
    behind: Callable[..., tuple[str, Any]],
    fake_class: type[OpenAIServer],
    kind: str,
    found_by: str,
    window_source: str | None,
    tokenizer: str,
    exact: bool,
    count_path: str | None,
) -> None:
    base, fake = behind(fake_class())
    decision = preview(base, ask(fake.model_id, text(300)))
    upstream = decision["upstream"]
    assert upstream["kind"] == kind and upstream["kind_source"] == found_by
    if window_source is None:  # the server does not say its window
        assert upstream["window"] is None and upstream["window_exact"] is False
        assert "does not publish its window" in upstream["window_source"]
    else:
        assert upstream["window"] == fake.window and upstream["window_exact"] is True
        assert upstream["window_source"] == window_source == decision["context_window_source"]
    assert upstream["tokenizer"] == tokenizer and decision["counter"] == tokenizer
    assert upstream["tokenizer_exact"] is exact and decision["counts_exact"] is exact
    if count_path is not None:
        assert fake.to(count_path), "the server's own tokenizer was asked"
        assert decision["file_tokens"] == 300  # the fake's tokenizer: one token per word
    answer = client(base).chat.completions.create(**ask(fake.model_id, text(300)))
    assert answer.choices[0].message.content == "The answer ."
    health = httpx.get(base + "/healthz").json()["details"]["upstream"]
    assert health["kind"]["value"] == kind


def test_lmstudio_v0_reports_the_loaded_context(behind: Callable[..., tuple[str, Any]]) -> None:
    base, fake = behind(FakeLmStudio(v1=False, window=8192))
    upstream = preview(base, ask(fake.model_id, text(50)))["upstream"]
    assert upstream["kind_source"] == "GET /api/v0/models" and upstream["window"] == 8192
    assert upstream["loaded_window"] == 8192
    assert "/api/v0/models loaded_context_length" in upstream["window_source"]


def test_lmstudio_never_gets_a_prompt_over_its_loaded_context(
    behind: Callable[..., tuple[str, Any]],
) -> None:
    # LM Studio answers such a prompt with a 200 and no content: the proxy never sends one.
    base, fake = behind(FakeLmStudio(window=2048))
    with pytest.raises(openai.BadRequestError) as caught:
        client(base).chat.completions.create(
            **ask(fake.model_id, text(3000)),
            extra_body={"enrich": {"strategy": "inject-full-content"}},
        )
    assert "lms load --context-length" in str(caught.value)
    answer = client(base).chat.completions.create(**long_chat(fake.model_id, 10, 300))
    assert answer.choices[0].message.content == "The answer ."
    assert not any(seen.truncated for seen in fake.seen)


def test_lmstudio_estimates_keep_a_margin(behind: Callable[..., tuple[str, Any]]) -> None:
    # LM Studio 0.3 answers a prompt over its window with nothing, and its tokenizer counts a
    # fifth more than tiktoken: 3,500 words are some 4,200 of its tokens, over its 4,096,
    # though tiktoken's 3,500 and the 16 asked for leave room. Only the margin (1.25) on the
    # estimate refuses it first; 3,000 words, 3,600 of its tokens, still go through.
    base, fake = behind(FakeLmStudio(version="0.3.31", v1=False, window=4096))
    direct = httpx.post(
        fake.base_url + "/v1/chat/completions",
        json={"model": fake.model_id, "messages": [{"role": "user", "content": text(3500)}]},
    )
    assert direct.json()["choices"][0]["message"]["content"] == ""  # the silent failure
    with pytest.raises(openai.BadRequestError) as caught:
        client(base).chat.completions.create(
            model=fake.model_id, messages=[{"role": "user", "content": text(3500)}], max_tokens=16
        )
    assert "answers a longer prompt with nothing" in str(caught.value)
    assert len(fake.seen) == 1
    answer = client(base).chat.completions.create(
        model=fake.model_id, messages=[{"role": "user", "content": text(3000)}], max_tokens=16
    )
    assert answer.choices[0].message.content == "The answer ."
    assert len(fake.seen) == 2 and not fake.seen[-1].truncated


def test_lmstudio_not_loaded_says_so(behind: Callable[..., tuple[str, Any]]) -> None:
    base, fake = behind(FakeLmStudio(loaded=False))
    decision = preview(base, ask(fake.model_id, text(50)))
    assert decision["upstream"]["window"] is None
    assert "not loaded yet, max 262144" in decision["upstream"]["window_source"]
    assert any("does not say its window" in w for w in decision["warnings"])


def test_koboldcpp_would_cut_the_front_and_the_proxy_never_lets_it(
    behind: Callable[..., tuple[str, Any]],
) -> None:
    base, fake = behind(FakeKoboldCpp(window=2048))
    # Straight to KoboldCpp, the fake cuts as it does: the oldest turns are gone, answer 200.
    direct = httpx.post(
        fake.base_url + "/v1/chat/completions", json=long_chat(fake.model_id, 10, 300)
    )
    assert direct.status_code == 200 and fake.seen[-1].truncated
    assert "Q0" not in fake.seen[-1].words and len(fake.seen[-1].words) == 2048 - 400
    # Through the proxy: old turns dropped by the proxy and said in a header, nothing cut.
    raw = httpx.post(base + "/v1/chat/completions", json=long_chat(fake.model_id, 10, 300))
    assert raw.status_code == 200 and int(raw.headers["X-Enrich-Dropped-Messages"]) > 0
    assert not fake.seen[-1].truncated
    with pytest.raises(openai.BadRequestError) as caught:
        client(base).chat.completions.create(
            **ask(fake.model_id, text(3000)),
            extra_body={"enrich": {"strategy": "inject-full-content"}},
        )
    assert "KoboldCpp runs with a 2048-token window and would cut the front" in str(caught.value)
    assert "relaunch it with a larger --contextsize" in str(caught.value)
    assert not fake.seen[-1].truncated and len(fake.seen) == 2


def test_koboldcpp_counts_a_long_text_in_pieces(behind: Callable[..., tuple[str, Any]]) -> None:
    # Its tokencount answers 0 for 50,000 tokens or more.
    base, fake = behind(FakeKoboldCpp(window=200_000))
    decision = preview(base, ask(fake.model_id, text(60_000)))
    assert decision["file_tokens"] == 60_000
    assert all(len(r.json["prompt"]) <= 16_000 for r in fake.to("/api/extra/tokencount"))


def test_textgen_gets_a_truncation_length_it_never_cuts_at(
    behind: Callable[..., tuple[str, Any]],
) -> None:
    # The model holds 8,192 tokens; the server's truncation_length setting is 2,048.
    base, fake = behind(FakeTextgen(window=8192))
    direct = httpx.post(
        fake.base_url + "/v1/chat/completions", json=long_chat(fake.model_id, 6, 300)
    )
    assert direct.status_code == 200 and fake.seen[-1].truncated  # straight: quietly cut
    answer = client(base).chat.completions.create(**long_chat(fake.model_id, 6, 300))
    assert answer.choices[0].message.content == "The answer ."
    sent = fake.to("/v1/chat/completions")[-1].json
    assert sent["truncation_length"] == len(fake.seen[-1].words) + 512
    assert not fake.seen[-1].truncated and "Q0" in fake.seen[-1].words
    assert fake.to("/v1/internal/chat-prompt"), "counted with its own template"


def test_textgen_with_its_window_configured(behind: Callable[..., tuple[str, Any]]) -> None:
    base, fake = behind(FakeTextgen(window=8192), models={"*": {"context_length": 2048}})
    response = httpx.post(base + "/v1/chat/completions", json=long_chat(fake.model_id, 6, 300))
    assert response.status_code == 200 and int(response.headers["X-Enrich-Dropped-Messages"]) > 0
    assert fake.to("/v1/chat/completions")[-1].json["truncation_length"] == 2048
    assert not fake.seen[-1].truncated


@pytest.mark.parametrize("fake_class", [FakeTabbyApi, FakeTgi, FakeSglang, FakeLlamaCppPython])
def test_servers_that_refuse_get_a_conversation_that_fits_their_window(
    behind: Callable[..., tuple[str, Any]], fake_class: type[OpenAIServer]
) -> None:
    models = {"*": {"context_length": 2048}} if fake_class is FakeLlamaCppPython else {}
    base, fake = behind(fake_class(window=2048), models=models)
    response = httpx.post(
        base + "/v1/chat/completions", json={**long_chat(fake.model_id, 10, 300), "max_tokens": 64}
    )
    assert response.status_code == 200, response.text
    assert int(response.headers["X-Enrich-Dropped-Messages"]) > 0


@pytest.mark.parametrize(
    ("fake_class", "status", "message"),
    [
        (FakeTabbyApi, 400, "exceeds the available context size of 2048 tokens"),
        (FakeTgi, 422, "`inputs` tokens + `max_new_tokens` must be <= 2048"),
        (FakeSglang, 400, "is longer than the model's context length (2048 tokens)"),
        (FakeLlamaCppPython, 400, "This model's maximum context length is 2048 tokens"),
    ],
)
def test_their_refusals_reach_the_client(
    behind: Callable[..., tuple[str, Any]],
    fake_class: type[OpenAIServer],
    status: int,
    message: str,
) -> None:
    # A window the proxy was told wrongly: the server's own refusal is what the client sees.
    base, fake = behind(fake_class(window=2048), models={"*": {"context_length": 100_000}})
    with pytest.raises(openai.APIStatusError) as caught:
        client(base).chat.completions.create(**ask(fake.model_id, text(3000)), max_tokens=64)
    # Whatever shape the server's error has, the SDK shows its message.
    assert caught.value.status_code == status and message in str(caught.value)


def test_openrouter_never_compresses_the_middle(behind: Callable[..., tuple[str, Any]]) -> None:
    base, fake = behind(FakeOpenRouter(window=4096), models={"*": {"context_length": 100_000}})
    client(base).chat.completions.create(**ask(fake.model_id, text(6000)))
    assert fake.to("/v1/chat/completions")[-1].json["transforms"] == []
    assert not fake.seen[-1].truncated
    client(base).chat.completions.create(
        **ask(fake.model_id, text(6000)), extra_body={"transforms": ["middle-out"]}
    )
    assert fake.seen[-1].truncated  # asked for by the client: its choice


@pytest.mark.parametrize("fake_class", [FakeKoboldCpp, FakeTabbyApi, FakeTextgen])
def test_text_completion_servers_render_with_their_own_counts(
    behind: Callable[..., tuple[str, Any]], fake_class: type[OpenAIServer]
) -> None:
    models = {"*": {"adapter": "text", "format": "chatml"}}
    if fake_class is FakeTextgen:
        models["*"]["context_length"] = 2048
    base, fake = behind(fake_class(window=2048), models=models)
    response = httpx.post(
        base + "/v1/chat/completions", json={**long_chat(fake.model_id, 10, 300), "max_tokens": 64}
    )
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "The answer ."
    assert int(response.headers["X-Enrich-Dropped-Messages"]) > 0
    sent = fake.to("/v1/completions")[-1].json
    assert sent["prompt"].startswith("<|im_start|>system")
    assert not fake.seen[-1].truncated
    assert len(fake.seen[-1].words) + 64 <= 2048
