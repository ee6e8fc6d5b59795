"""Retrieval through the proxy: the budget filled past the limit, indexing statuses, reranking."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.retrieval import retriever as retriever_module
from tests.fakes.reranker import FakeReranker
from tests.fakes.servers import ServerThread
from tests.fakes.upstream import FakeUpstream
from tests.pipeline.test_enrich import ask, preview, text_part

# Twelve one-sentence passages that all mention the harbour, one of them the answer.
PAGES = [f"Note {n}: the harbour had {n} boats moored at dawn." for n in range(1, 13)]
PAGES[8] = "Note 9: the harbour master rang the bell at noon to call the ferry."
SMALL = {"chunk_tokens": 16, "chunk_overlap": 0, "affinity_threshold": 0.0}


def body(query: str, stream: bool = False, **enrich: Any) -> dict[str, Any]:
    return ask(
        [text_part("notes.txt", "\n\n".join(PAGES))],
        query,
        stream=stream,
        enrich={"strategy": "retrieval", **enrich},
    )


def test_room_in_the_budget_takes_more_passages_than_the_limit(
    make_proxy: Callable[..., str],
) -> None:
    base = make_proxy(retrieval=SMALL)
    record = preview(base, body("when did the harbour master ring the bell"))["decision"]
    retrieval = record["retrieval"]
    assert retrieval["limit"] == 3 and retrieval["fill"] == "passages"
    assert sum(retrieval["selected_per_source"]) > 3
    assert retrieval["candidates"][0]["snippet"].startswith("Note 9")
    first = retrieval["candidates"][0]
    assert first["passage"] is not None and first["dense"] == first["score"]
    assert first["lexical"] > 0 and first["fused"] > 0 and first["rerank"] is None
    assert retrieval["ranking"] == "hybrid" and retrieval["indexed"] == {"notes.txt": 100}


def test_an_explicit_limit_is_honoured_exactly_and_fill_none_keeps_the_limit(
    make_proxy: Callable[..., str], tmp_path: Path
) -> None:
    other = tmp_path / "other"  # a second proxy, its own store
    base = make_proxy(retrieval=SMALL)
    explicit = preview(base, body("harbour bell", retrieval_limit=2))["decision"]["retrieval"]
    assert explicit["selected_per_source"] == [2] and explicit["fill"] == "none"
    fixed = make_proxy(retrieval={**SMALL, "fill": "none"}, server={"data_dir": str(other)})
    retrieval = preview(fixed, body("harbour bell"))["decision"]["retrieval"]
    assert retrieval["selected_per_source"] == [3]


def test_a_small_window_fills_only_what_fits(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    upstream.n_ctx = 200  # the fake counts a token per word: a 100-word budget
    base = make_proxy(retrieval=SMALL)
    retrieval = preview(base, body("harbour bell"))["decision"]["retrieval"]
    assert 1 <= sum(retrieval["selected_per_source"]) < 12
    assert retrieval["left_out"] > 0


def test_indexing_statuses_stream_before_the_answer(make_proxy: Callable[..., str]) -> None:
    base = make_proxy(retrieval=SMALL)
    with httpx.stream(
        "POST", base + "/v1/chat/completions", json=body("harbour bell", stream=True), timeout=60
    ) as response:
        raw = b"".join(response.iter_raw()).decode()
    comments = [line[2:] for line in raw.split("\n") if line.startswith(": ")]
    indexing = [c for c in comments if c.startswith("Indexing file notes.txt... (")]
    assert indexing[0] == "Indexing file notes.txt... (0%)"
    assert indexing[-1] == "Indexing file notes.txt... (100%)"
    assert comments.index(indexing[-1]) < next(
        i for i, c in enumerate(comments) if c.startswith("Retrieved ")
    )
    # The document is indexed now: the next question says nothing about indexing.
    with httpx.stream(
        "POST", base + "/v1/chat/completions", json=body("ferry", stream=True), timeout=60
    ) as response:
        again = b"".join(response.iter_raw()).decode()
    assert "Indexing file" not in again and "data: [DONE]" in again


async def test_a_slow_index_reports_progress_every_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retriever_module, "STATUS_EVERY_S", 0.01)
    lines: list[str] = []
    async with retriever_module._ticking(lines.append, lambda: f"tick {len(lines)}"):
        while len(lines) < 4:  # the block outlasts several ticks
            await asyncio.sleep(0.005)
    assert lines[:4] == ["tick 0", "tick 1", "tick 2", "tick 3"] and len(lines) >= 5


@pytest.fixture
def reranker(servers: ServerThread) -> FakeReranker:
    fake = FakeReranker(scorer="reverse")
    fake.base_url = servers.serve(fake.app()) + "/v1"  # type: ignore[attr-defined]
    return fake


def test_a_configured_reranker_orders_the_candidates(
    make_proxy: Callable[..., str], reranker: FakeReranker, tmp_path: Path
) -> None:
    plain = make_proxy(retrieval=SMALL)
    before = preview(plain, body("harbour bell"))["decision"]["retrieval"]["candidates"]
    rerank = {"base_url": reranker.base_url, "model": "bge-reranker", "top_n": 5}  # type: ignore[attr-defined]
    reranked = make_proxy(
        retrieval={**SMALL, "rerank": rerank}, server={"data_dir": str(tmp_path / "other")}
    )
    record = preview(reranked, body("harbour bell"))["decision"]["retrieval"]
    after = record["candidates"]
    # "reverse" scores the last of the 5 it is sent highest: the first five, reversed.
    assert [c["snippet"] for c in after[:5]] == [c["snippet"] for c in before[:5]][::-1]
    assert after[0]["rerank"] == 4.0 and record["ranking"] == "hybrid+rerank"
    sent = reranker.requests[-1]
    assert sent["model"] == "bge-reranker" and sent["query"] == "harbour bell"
    assert len(sent["documents"]) == 5


@pytest.mark.parametrize("scorer", ["fail", "bad"])
def test_a_failing_reranker_is_a_502_naming_it(
    make_proxy: Callable[..., str], reranker: FakeReranker, upstream: FakeUpstream, scorer: str
) -> None:
    reranker.scorer = scorer
    rerank = {"base_url": reranker.base_url}  # type: ignore[attr-defined]
    base = make_proxy(retrieval={**SMALL, "rerank": rerank})
    response = httpx.post(base + "/v1/chat/completions", json=body("harbour"), timeout=60)
    assert response.status_code == 502
    error = response.json()["error"]
    assert "rerank server" in error["message"] and error["code"] == "rerank_failed"
    assert not [r for r in upstream.requests if r.path == "/v1/chat/completions"]
