"""Helpers for the search loop tests: a tool-calling upstream, stores to search, what was sent."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import openai
from aiohttp import web

from tests.callers import sdk
from tests.fakes.tool_calls import Calls, Reply, Say, Script, ToolModel, search, tool_results
from tests.fakes.upstream import HERMES_TEMPLATE, TOOL_TEMPLATE_CAPS, FakeUpstream
from tests.stores.support import upload_topics

CATS = "What did the keeper feed the cats?"
SEARCH_FIRST = "file_search"


def tool_capable(upstream: FakeUpstream, dialect: str = "llamacpp") -> None:
    """The fake serves a model whose tool calls its server parses: llama.cpp with a tool
    template and --jinja (caps say so), or vLLM with --enable-auto-tool-choice."""
    upstream.kind = dialect
    if dialect == "llamacpp":
        upstream.chat_template = HERMES_TEMPLATE
        upstream.template_caps = TOOL_TEMPLATE_CAPS
        upstream.jinja = True
        upstream.tool_use_template = HERMES_TEMPLATE
    else:
        upstream.auto_tools = True


def model(
    upstream: FakeUpstream, script: Script, dialect: str = "llamacpp", **kw: Any
) -> ToolModel:
    tool_capable(upstream, dialect)
    upstream.tool_model = ToolModel(script, dialect=dialect, **kw)
    return upstream.tool_model


def search_then_answer(
    *queries: str, answer: str = "They were fed sardines.", said: str = "", reasoning: str = ""
) -> Script:
    """Searches once with `queries` (after the words `said`, if any), then answers with `answer`
    (after its `reasoning`, if any)."""

    def script(body: dict[str, Any]) -> Reply:
        if not tool_results(body):
            return Calls.of(search(*queries), text=said)
        return Say(answer, reasoning=reasoning)

    return script


def store_of_topics(client: openai.OpenAI) -> tuple[str, dict[str, str]]:
    ids = upload_topics(client)
    store = client.vector_stores.create(name="topics")
    files = [
        {"file_id": fid, "attributes": {"topic": name.removesuffix(".txt")}}
        for name, fid in ids.items()
    ]
    client.vector_stores.file_batches.create_and_poll(vector_store_id=store.id, files=files)  # type: ignore[arg-type]
    return store.id, ids


def ready(base: str) -> tuple[openai.OpenAI, str, dict[str, str]]:
    client = sdk(base)
    store_id, ids = store_of_topics(client)
    return client, store_id, ids


def chat_turns(upstream: FakeUpstream) -> list[dict[str, Any]]:
    """The bodies of the chat requests the model got (the proxy's own probes left out)."""
    return [r.json for r in upstream.to("/v1/chat/completions")]


def last_decision(base: str) -> dict[str, Any]:
    data = httpx.get(base + "/v1/enrich/decisions?limit=1", timeout=30).json()["data"]
    record: dict[str, Any] = data[0]
    return record


def file_search_tool(store_id: str, **options: Any) -> list[Any]:
    return [{"type": "file_search", "vector_store_ids": [store_id], **options}]


SHARP = {"score_threshold": 0.6}  # the fake embedder's unrelated texts score below it
Proxy = Callable[..., str]


def searching_chat(store_id: str, **fields: Any) -> dict[str, Any]:
    """A chat request about the cats that asks for the search loop over one store."""
    return {
        "model": "m",
        "messages": [{"role": "user", "content": CATS}],
        "enrich": {"search": "tool", "affinity_threshold": 0.6, "vector_store_ids": [store_id]},
        **fields,
    }


def chat_with_file(question: str, part: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A Chat Completions request asking `question` about a file sent with it (`part`: a content
    part)."""
    content = [{"type": "text", "text": question}, part]
    return {"model": "m", "messages": [{"role": "user", "content": content}], **fields}


def response_with_file(question: str, part: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A Responses request asking `question` about a file sent with it (`part`: an `input_file`'s
    fields)."""
    return {
        "model": "m",
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": question},
                    {"type": "input_file", **part},
                ],
            }
        ],
        **fields,
    }


def in_turn(number: int, response: Callable[[], web.Response]) -> Callable[[int], Any]:
    """The fake model's `raw`: turn `number` answered with `response()`, the others by script."""
    return lambda turn: response() if turn == number else None


def events(*chunks: Any) -> web.Response:
    """A stream of these chunks (bytes as they are, the rest as `data:` events)."""
    body = b"".join(
        piece if isinstance(piece, bytes) else b"data: " + json.dumps(piece).encode() + b"\n\n"
        for piece in chunks
    )
    return web.Response(body=body, content_type="text/event-stream")
