"""The Responses API with a PDF against a real llama-server, through the official openai SDK."""

from __future__ import annotations

import base64
import io
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

PAGES = [
    "The lighthouse keeper fed the cats every morning with fresh sardines from the harbour.",
    "Quantum chromodynamics describes the strong interaction between quarks and gluons.",
    "The bakery on the corner sells sourdough bread and croissants at dawn.",
]
QUESTION = "What did the lighthouse keeper feed the cats?"
ENRICH = {"strategy": "retrieval", "affinity_threshold": 0.0, "citations": "inline"}
SHORT: dict[str, Any] = {"max_output_tokens": 16, "temperature": 0}


@pytest.fixture
def proxy_for(tmp_path: Path) -> Iterator[Callable[..., str]]:
    thread = ServerThread()

    def start(upstream: str, embed: str, **upstream_settings: Any) -> str:
        overrides: dict[str, Any] = {
            "upstream": {"base_url": upstream, **upstream_settings},
            "server": {"data_dir": str(tmp_path / "data"), "status_delay_s": 0.0},
            "embeddings": {"backend": "openai", "base_url": embed + "/v1", "model": "gemma"},
        }
        return thread.serve(make_app(load_settings(None, environ={}, overrides=overrides)))

    yield start
    thread.close()


def pdf() -> bytes:
    document = pymupdf.open()
    for text in PAGES:
        document.new_page().insert_textbox(pymupdf.Rect(40, 40, 560, 800), text, fontsize=9)
    data: bytes = document.tobytes()
    document.close()
    return data


def ask(**file: str) -> list[dict[str, Any]]:
    part = {"type": "input_file", **file}
    return [{"role": "user", "content": [{"type": "input_text", "text": QUESTION}, part]}]


def sdk(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=600)


def test_responses_with_a_pdf_cite_its_passages(
    llama_server: str, llama_embed_server: str, proxy_for: Callable[..., str]
) -> None:
    client = sdk(proxy_for(llama_server, llama_embed_server))
    data = "data:application/pdf;base64," + base64.b64encode(pdf()).decode()
    response = client.responses.create(
        model="gemma",
        input=ask(filename="keeper.pdf", file_data=data),
        extra_body={"enrich": ENRICH},
        **SHORT,
    )
    assert response.status in ("completed", "incomplete")
    assert response.usage is not None and response.usage.input_tokens > 20  # the passages count
    part = response.output[0].content[0]
    notes = part.annotations
    assert notes and {note.type for note in notes} == {"file_citation"}
    assert notes[0].filename == "keeper.pdf"
    assert "\n\nSources:\n- keeper.pdf, page" in part.text
    # The annotation points at its page in the file's line of the block.
    assert part.text[: notes[0].index].rsplit("\n", 1)[1].startswith("- keeper.pdf, page")
    assert part.text[notes[0].index].isdigit()

    uploaded = client.files.create(file=("keeper.pdf", io.BytesIO(pdf())), purpose="user_data")
    with client.responses.stream(
        model="gemma", input=ask(file_id=uploaded.id), extra_body={"enrich": ENRICH}, **SHORT
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text
    assert final.output[0].content[0].annotations[0].file_id == uploaded.id
    assert final.usage is not None and final.usage.output_tokens > 0


def test_native_llama_responses_get_the_document(
    llama_server: str, llama_embed_server: str, proxy_for: Callable[..., str]
) -> None:
    # llama-server's own /v1/responses refuses input_file; through the proxy it gets the text.
    client = sdk(proxy_for(llama_server, llama_embed_server, responses="native"))
    data = "data:application/pdf;base64," + base64.b64encode(pdf()).decode()
    response = client.responses.create(
        model="gemma",
        input=ask(filename="keeper.pdf", file_data=data),
        extra_body={"enrich": ENRICH},
        **SHORT,
    )
    assert response.output_text
    notes = [
        n for item in response.output if item.type == "message" for n in item.content[0].annotations
    ]
    assert notes and notes[0].filename == "keeper.pdf"
