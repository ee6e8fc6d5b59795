"""Documents seen from a client: citations name sections, sheets and slides; lossy reads warn."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pymupdf

from tests.documents import makers
from tests.fakes.upstream import FakeUpstream
from tests.pipeline.test_enrich import ask, sent_text

SMALL_CHUNKS = {"chunk_tokens": 20, "chunk_overlap": 0}


def part(name: str, data: bytes, mime: str = "application/octet-stream") -> dict[str, Any]:
    encoded = base64.b64encode(data).decode()
    return {
        "type": "file",
        "file": {"filename": name, "file_data": f"data:{mime};base64,{encoded}"},
    }


def _client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="k", max_retries=0)


def _damaged_pdf() -> bytes:
    document = pymupdf.open()
    for text in ("The warranty lasts two years.", "Claims go to the service desk."):
        document.new_page().insert_text((72, 72), text)
    data: bytes = document.tobytes()
    return data[: data.rindex(b"xref")]


def test_a_citation_names_the_section_it_came_from(make_proxy: Callable[..., str]) -> None:
    base = make_proxy(retrieval=SMALL_CHUNKS)
    answer = _client(base).chat.completions.create(
        model="m",
        messages=ask(
            [part("handbook.docx", makers.handbook_docx())],
            "How many days until refunds are paid?",
        )["messages"],
        extra_body={"enrich": {"strategy": "retrieval", "affinity_threshold": 0.1}},
    )
    extra = answer.model_extra or {}
    assert extra["citations"][0] == "handbook.docx#section=2.3%20Refunds"
    first = extra["search_results"][0]
    assert first["location"] == "section=2.3 Refunds"
    assert "page" not in first  # a Word file has no pages to point at
    assert "14 days" in first["snippet"]


def test_slides_and_pdf_pages_are_cited_as_such(make_proxy: Callable[..., str]) -> None:
    base = make_proxy(retrieval=SMALL_CHUNKS)
    body = ask(
        [part("roadmap.pptx", makers.roadmap_pptx()), part("damaged.pdf", _damaged_pdf())],
        "Who takes the warranty claims, and what is the OCR budget?",
        enrich={"strategy": "retrieval", "affinity_threshold": 0.1},
    )
    preview = httpx.post(base + "/v1/enrich/preview", json=body, timeout=60).json()
    citations = preview["citations"]
    assert "roadmap.pptx#slide=1" in citations
    assert "damaged.pdf#page=1" in citations


def test_the_full_content_prompt_names_sheets_and_sections(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy()
    _client(base).chat.completions.create(
        model="m",
        messages=ask([part("budget.xlsx", makers.budget_xlsx())], "What did coffee cost?")[
            "messages"
        ],
        extra_body={"enrich": {"strategy": "inject-full-content"}},
    )
    sent = sent_text(upstream)
    assert sent.startswith(
        "This is a Enriched Context Generation scenario.\n\n"
        "The following content was found in the files provided by the user.\n\n"
        "** budget.xlsx full content **\n\n## Sheet: Q3 (rows 2-3)\n\nTable: Q3\n"
        "| Item | Amount | Owner |\n|---|---|---|\n| Coffee | 12.5 | Ann |"
    )
    assert "## Sheet: Notes (row 1)\n\nTable: Notes\n| Approved by the board |\n|---|" in sent
    assert sent.endswith(
        "** end of budget.xlsx **\n\nBased on the content above, please provide"
        " a response to the user query.\n\nUser query: What did coffee cost?"
    )


def test_a_repaired_file_is_said_out_loud(make_proxy: Callable[..., str]) -> None:
    base = make_proxy()
    body = ask([part("damaged.pdf", _damaged_pdf(), "application/pdf")], "What is covered?")
    response = httpx.post(base + "/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    assert response.headers["X-Enrich-Warnings"] == (
        "damaged.pdf: was damaged and has been repaired; 2 of 2 pages could be read"
    )
    preview = httpx.post(base + "/v1/enrich/preview", json=body, timeout=60).json()
    [record] = preview["decision"]["documents"]
    assert record["kind"] == "pdf" and record["locations"] == ["page=1", "page=2"]
    assert record["warnings"] == [
        {
            "code": "repaired",
            "message": "was damaged and has been repaired; 2 of 2 pages could be read",
        }
    ]
    lines: list[str] = []
    with httpx.stream(
        "POST", base + "/v1/chat/completions", json={**body, "stream": True}, timeout=60
    ) as streamed:
        lines = list(streamed.iter_lines())
    assert (
        ": Warning: damaged.pdf: was damaged and has been repaired; 2 of 2 pages could be read"
        in lines
    )


def test_health_says_whether_ocr_is_on(make_proxy: Callable[..., str]) -> None:
    base = make_proxy(documents={"ocr": {"enabled": False}})
    details = httpx.get(base + "/healthz").json()["details"]
    assert details["ocr"] == "off (documents.ocr.enabled is false)"
