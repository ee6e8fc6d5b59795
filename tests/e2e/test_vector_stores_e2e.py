"""The openai SDK's vector store and file_search examples, unchanged but for the base_url,
against the proxy in front of a real llama-server (and a real embedding server)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pymupdf
import pytest

from proxy.config import load_settings
from proxy.http.app import make_app
from tests.fakes.servers import ServerThread

pytestmark = pytest.mark.e2e

HANDBOOK = [
    "Deep research is an agent that finds, analyses and synthesises hundreds of online sources"
    " into a report at the level of a research analyst.",
    "The lighthouse keeper fed the cats every morning with fresh sardines from the harbour.",
]
RECIPES = "The bakery on the corner sells sourdough bread and croissants at dawn."


@pytest.fixture
def proxy_for(tmp_path: Path) -> Iterator[Callable[..., str]]:
    thread = ServerThread()

    def start(upstream: str, embed: str) -> str:
        overrides: dict[str, Any] = {
            "upstream": {"base_url": upstream},
            "server": {"data_dir": str(tmp_path / "data"), "status_delay_s": 0.0},
            "embeddings": {"backend": "openai", "base_url": embed + "/v1", "model": "gemma"},
            "vector_stores": {"poll_after_ms": 100},
        }
        return thread.serve(make_app(load_settings(None, environ={}, overrides=overrides)))

    yield start
    thread.close()


def write_pdf(path: Path, pages: list[str]) -> Path:
    document = pymupdf.open()
    for text in pages:
        document.new_page().insert_textbox(pymupdf.Rect(40, 40, 560, 800), text, fontsize=9)
    document.save(path)
    document.close()
    return path


def test_the_sdks_file_search_example(
    llama_server: str, llama_embed_server: str, proxy_for: Callable[..., str], tmp_path: Path
) -> None:
    handbook = write_pdf(tmp_path / "deep_research_blog.pdf", HANDBOOK)
    recipes = tmp_path / "recipes.txt"
    recipes.write_text(RECIPES)
    client = openai.OpenAI(
        base_url=proxy_for(llama_server, llama_embed_server) + "/v1",
        api_key="unused",
        timeout=600,
    )

    # The example as OpenAI's docs give it.
    vector_store = client.vector_stores.create(name="knowledge_base")
    client.vector_stores.files.upload_and_poll(
        vector_store_id=vector_store.id,
        file=open(handbook, "rb"),  # noqa: SIM115
    )
    batch = client.vector_stores.file_batches.upload_and_poll(
        vector_store_id=vector_store.id,
        files=[open(recipes, "rb")],  # noqa: SIM115
    )
    assert batch.file_counts.completed == 1
    response = client.responses.create(
        model="gpt-4o-mini",
        input="What is deep research by OpenAI?",
        tools=[{"type": "file_search", "vector_store_ids": [vector_store.id]}],
        include=["file_search_call.results"],
        max_output_tokens=32,
        temperature=0,
    )
    search, message = response.output
    assert search.type == "file_search_call" and search.queries
    assert search.results and search.results[0].filename == "deep_research_blog.pdf"
    assert message.type == "message" and response.output_text
    notes = message.content[0].annotations
    assert notes and notes[0].type == "file_citation"
    assert notes[0].filename == "deep_research_blog.pdf"
    handbook_id = search.results[0].file_id
    assert notes[0].file_id == handbook_id
    assert client.files.retrieve(handbook_id).filename == "deep_research_blog.pdf"

    hits = client.vector_stores.search(
        vector_store.id, query="What did the lighthouse keeper feed the cats?", max_num_results=2
    )
    assert any("sardines" in hit.content[0].text for hit in hits)

    with client.responses.stream(
        model="gpt-4o-mini",
        input="What is deep research by OpenAI?",
        tools=[{"type": "file_search", "vector_store_ids": [vector_store.id]}],
        max_output_tokens=16,
        temperature=0,
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds.index("response.file_search_call.completed") < kinds.index(
        "response.output_text.delta"
    )
    assert [item.type for item in final.output] == ["file_search_call", "message"]
    assert final.output[1].content[0].annotations[0].file_id == handbook_id

    # Chat Completions clients reach the same store.
    chat = client.chat.completions.create(
        model="gemma",
        messages=[{"role": "user", "content": "What is deep research?"}],
        max_tokens=16,
        extra_body={"enrich": {"vector_store_ids": [vector_store.id]}},
    )
    assert chat.choices[0].message.content
    assert (chat.model_extra or {}).get("citations", [""])[0].startswith("deep_research_blog.pdf")
