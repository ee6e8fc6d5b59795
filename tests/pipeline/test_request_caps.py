"""Per-request caps on documents: how many, and how much text in all; clear 400s."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.fakes.upstream import FakeUpstream


def file_part(name: str, text: str) -> dict[str, Any]:
    data = base64.b64encode(text.encode()).decode()
    return {
        "type": "file",
        "file": {"filename": name, "file_data": f"data:text/plain;base64,{data}"},
    }


def chat(base: str, parts: list[dict[str, Any]]) -> httpx.Response:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "q"}, *parts]}],
    }
    return httpx.post(base + "/v1/chat/completions", json=body, timeout=60)


def parsed_entries(tmp_path: Path) -> list[Path]:
    parsed = tmp_path / "data" / "parsed"
    return [p for p in parsed.rglob("*") if p.is_file()] if parsed.exists() else []


def test_too_many_documents_are_refused_before_any_parsing(
    make_proxy: Callable[..., str], upstream: FakeUpstream, tmp_path: Path
) -> None:
    base = make_proxy()  # default documents.max_files_per_request: 20
    response = chat(base, [file_part(f"f{i}.txt", f"tiny {i}") for i in range(1000)])
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("too_many_files", "messages")
    assert error["message"] == (
        "the request references 1000 documents; at most 20 are accepted "
        "(documents.max_files_per_request)"
    )
    assert parsed_entries(tmp_path) == []
    assert not [r for r in upstream.requests if r.path == "/v1/chat/completions"]
    assert chat(base, [file_part(f"f{i}.txt", f"tiny {i}") for i in range(20)]).status_code == 200
    assert parsed_entries(tmp_path)  # parsing leaves cache entries: none were left above


def test_too_much_text_in_all_documents_is_refused(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(documents={"max_request_chars": 100})
    assert chat(base, [file_part("a.txt", "a" * 60)]).status_code == 200
    # Exactly at the limit is still within it.
    assert (
        chat(base, [file_part("a.txt", "a" * 60), file_part("c.txt", "c" * 40)]).status_code == 200
    )
    response = chat(base, [file_part("a.txt", "a" * 60), file_part("b.txt", "b" * 60)])
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("too_much_text_in_request", "messages")
    assert error["message"] == (
        "the request's documents hold more than 100 characters of text "
        "(documents.max_request_chars); send fewer or smaller documents"
    )
    assert len([r for r in upstream.requests if r.path == "/v1/chat/completions"]) == 2
