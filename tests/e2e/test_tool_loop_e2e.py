"""Searches the model decides on, against real llama.cpp servers (xllamacpp): the bundled Gemma,
which cannot call tools, is searched once and the record says why; the same model given a chat
template with tool calls gets the loop (llama.cpp takes the function, the turns stream back); a
model trained for tools, when one is installed (`ENRICH_TOOL_GGUF`), writes its own queries."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import openai
import pytest
import pytest_asyncio

from proxy.upstream.spawn import LlamaServer
from tests.e2e.conftest import CHAT_ARGS, spawn_settings, start_spawned
from tests.e2e.test_vector_stores_e2e import HANDBOOK, proxy_for, write_pdf  # noqa: F401
from tests.fakes.upstream import HERMES_TEMPLATE

pytestmark = pytest.mark.e2e

QUESTION = "What did the lighthouse keeper feed the cats?"
TOOL_GGUF = os.environ.get("ENRICH_TOOL_GGUF")
"""A GGUF of a model trained for tool calls (Qwen 2.5 Instruct, Llama 3.1 Instruct, ...): none
can be had from the package registries here (docs/vector-stores.md), so this is not in CI."""


def store_with_handbook(client: openai.OpenAI, tmp_path: Path) -> str:
    handbook = write_pdf(tmp_path / "handbook.pdf", HANDBOOK)
    store = client.vector_stores.create(name="handbook")
    with handbook.open("rb") as file:
        client.vector_stores.files.upload_and_poll(vector_store_id=store.id, file=file)
    return store.id


def searches(base: str) -> dict[str, object]:
    data = httpx.get(base + "/v1/enrich/decisions?limit=1", timeout=30).json()["data"]
    record: dict[str, object] = data[0]["decision"]["searches"]
    return record


def test_the_bundled_model_is_searched_once_and_the_record_says_why(
    llama_server: str,
    llama_embed_server: str,
    proxy_for: Callable[..., str],  # noqa: F811
    tmp_path: Path,
) -> None:
    base = proxy_for(llama_server, llama_embed_server)
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", timeout=600)
    store_id = store_with_handbook(client, tmp_path)
    raw = client.responses.with_raw_response.create(
        model="gemma",
        input=QUESTION,
        tools=[{"type": "file_search", "vector_store_ids": [store_id]}],
        max_output_tokens=16,
        temperature=0,
    )
    assert raw.headers["X-Enrich-Search"] == "once"
    search, _ = raw.parse().output
    assert search.type == "file_search_call" and search.queries == [QUESTION]
    record = searches(base)
    assert record["mode"] == "once"
    assert "chat_template_caps.supports_tool_calls is false" in str(record["reason"])


@pytest_asyncio.fixture(loop_scope="session")
async def tool_template_server(
    gemma_model: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[LlamaServer]:
    """The small Gemma with a Hermes-style chat template that has tool calls, --jinja on: its
    /props caps say it calls tools, though the model was never trained to."""
    args = ["--jinja", "--chat-template", HERMES_TEMPLATE, *CHAT_ARGS]
    spawn = spawn_settings(gemma_model, ctx_size=4096, extra_args=args)
    server = await start_spawned(tmp_path_factory.mktemp("llama-tools"), spawn)
    try:
        yield server
    finally:
        await server.stop()


def test_a_tool_template_gets_the_loop_on_a_real_llama_cpp(
    tool_template_server: LlamaServer,
    llama_embed_server: str,
    proxy_for: Callable[..., str],  # noqa: F811
    tmp_path: Path,
) -> None:
    base = proxy_for(tool_template_server.base_url, llama_embed_server)
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", timeout=600)
    store_id = store_with_handbook(client, tmp_path)
    started = time.perf_counter()
    chunks = list(
        client.chat.completions.create(
            model="gemma",
            messages=[{"role": "user", "content": QUESTION}],
            max_tokens=32,
            temperature=0,
            stream=True,
            extra_body={"enrich": {"search": "tool", "vector_store_ids": [store_id]}},
        )
    )
    print(f"\nloop on llama.cpp: {time.perf_counter() - started:.1f} s")
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finishes and finishes[-1] in ("stop", "length")
    record = searches(base)
    print(f"searches: {record}")
    assert record["mode"] == "tool"
    assert "chat_template_caps.supports_tool_calls" in str(record["reason"])
    assert isinstance(record["rounds"], int) and record["rounds"] >= 1


@pytest_asyncio.fixture(loop_scope="session")
async def tool_model_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LlamaServer]:
    """A model trained for tool calls, `--jinja` on; skips unless ENRICH_TOOL_GGUF names one."""
    if TOOL_GGUF is None:
        pytest.skip("no model trained for tools here (set ENRICH_TOOL_GGUF to a GGUF path)")
    spawn = spawn_settings(TOOL_GGUF, ctx_size=8192, threads=2, extra_args=["--jinja", *CHAT_ARGS])
    server = await start_spawned(tmp_path_factory.mktemp("llama-tool-model"), spawn)
    try:
        yield server
    finally:
        await server.stop()


def test_a_model_trained_for_tools_writes_its_own_queries(
    tool_model_server: LlamaServer,
    llama_embed_server: str,
    proxy_for: Callable[..., str],  # noqa: F811
    tmp_path: Path,
) -> None:
    base = proxy_for(tool_model_server.base_url, llama_embed_server)
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", timeout=3600)
    store_id = store_with_handbook(client, tmp_path)
    conversation: list[object] = []
    for question in [QUESTION, "And where did they wait for it?", "Thanks, that is all."]:
        conversation.append({"role": "user", "content": question})
        started = time.perf_counter()
        response = client.responses.create(
            model="tools",
            input=conversation,  # type: ignore[arg-type]
            tools=[{"type": "file_search", "vector_store_ids": [store_id]}],
            max_output_tokens=300,
            temperature=0,
        )
        queries = [i.queries for i in response.output if i.type == "file_search_call"]
        print(f"\nQ: {question}\n  searched: {queries}\nA: {response.output_text}")
        print(f"  ({time.perf_counter() - started:.0f} s)")
        conversation += [item.model_dump(exclude_none=True) for item in response.output]
        if question == QUESTION:
            assert queries, "the model did not search"
            assert "sardines" in response.output_text.lower()
