"""What the decision record says became of each retrieved passage."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from proxy.documents.model import Page, ParsedDocument
from proxy.guard.neutralise import Guarded, GuardReport
from proxy.pipeline.candidates import (
    citation_of,
    guarded_candidates,
    outcomes,
    search_result,
)
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.file_search import Origin
from proxy.pipeline.services import Services
from proxy.retrieval.budget import Passage, PassageSelection
from proxy.retrieval.chunking import Chunk
from proxy.retrieval.scored import Scored


def hit(text: str, score: float, page: int) -> Scored:
    chunk = Chunk("0" * 64, "a.pdf", page - 1, text, page, page)
    return Scored(chunk=chunk, dense=score, lexical=1.5 if page == 1 else None, fused=0.03)


def test_each_hit_is_kept_shortened_over_budget_or_below_threshold() -> None:
    doc = ParsedDocument("a.pdf", "0" * 64, "pdf", "PyMuPDF", (Page(1, "x"),))
    hits = [
        hit("best", 0.9, 1),
        hit("long passage", 0.8, 2),
        hit("third", 0.7, 3),
        hit("low", 0.1, 4),
    ]
    offered = [[Passage(0, rank, h.chunk.text) for rank, h in enumerate(hits[:3])]]
    selection = PassageSelection(
        passages=[Passage(0, 0, "best"), Passage(0, 1, "long")], per_source=[2], left_out=1
    )
    found = outcomes([doc], [hits], [0.2], offered, selection)
    assert [(c.page, c.outcome, c.score) for c in found] == [
        (1, "kept", 0.9),
        (2, "shortened", 0.8),
        (3, "over budget", 0.7),
        (4, "below threshold", 0.1),
    ]
    assert found[0].file == "a.pdf" and found[1].snippet == "long passage"
    # Each candidate says which passage it is and every score that placed it.
    assert (found[0].passage, found[0].dense, found[0].lexical, found[0].fused) == (
        0,
        0.9,
        1.5,
        0.03,
    )
    assert found[1].lexical is None and found[3].passage == 3


def test_a_search_result_says_where_its_passage_is_and_whose() -> None:
    meta = {
        "filename": "report.pdf",
        "page_start": 4,
        "score": 0.123456,
        "file_id": "file-abc",
        "vector_store_id": "vs_1",
    }
    assert search_result(meta, "x" * 600) == {
        "title": "report.pdf",
        "url": "report.pdf#page=4",
        "snippet": "x" * 500,
        "source": "attachment",
        "location": "page=4",
        "score": 0.1235,
        "page": 4,
        "file_id": "file-abc",
        "vector_store_id": "vs_1",
    }
    # Another kind of place (no page), from a message's own attachment (no ids).
    section = {
        "filename": "handbook.docx",
        "page_start": 1,
        "location": "section=2.3 Refunds",
        "score": 0.5,
        "file_id": "",
        "vector_store_id": None,
    }
    assert search_result(section, "short") == {
        "title": "handbook.docx",
        "url": "handbook.docx#section=2.3%20Refunds",
        "snippet": "short",
        "source": "attachment",
        "location": "section=2.3 Refunds",
        "score": 0.5,
    }
    assert citation_of({"filename": "a.pdf", "page_start": 2, "location": ""}) == "a.pdf#page=2"


def test_a_hit_at_the_threshold_is_below_it_and_scores_keep_their_precision() -> None:
    doc = ParsedDocument("a.pdf", "0" * 64, "pdf", "PyMuPDF", (Page(1, "x"),))
    chunk = Chunk("0" * 64, "a.pdf", 0, "text", 1, 1, "section=Intro")
    precise = Scored(chunk=chunk, dense=0.2, lexical=1.23456789, fused=0.0312345678, rerank=0.98765)
    dense_only = Scored(chunk=chunk, dense=0.1)
    found = outcomes([doc], [[precise, dense_only]], [0.2], [[]], PassageSelection([], [0], 0))
    assert [c.outcome for c in found] == ["below threshold", "below threshold"]
    assert (found[1].lexical, found[1].fused, found[1].rerank) == (None, None, None)
    assert (found[0].lexical, found[0].fused, found[0].rerank) == (1.2346, 0.031235, 0.9877)
    assert found[0].location == "section=Intro"


class Guard:
    """Marks each text it guards and counts one change per call, as the guard reports them."""

    def __init__(self) -> None:
        self.tokens: list[tuple[str, ...]] = []

    def guard(self, text: str, tokens: tuple[str, ...]) -> Guarded:
        self.tokens.append(tokens)
        return Guarded(f"<{text}>", GuardReport(1, {"chat_token": 1}))


def test_candidates_are_the_hits_over_the_threshold_guarded_with_where_they_are() -> None:
    exchange = Exchange("r", {"messages": [{"role": "user", "content": "q"}]})
    exchange.control_tokens = ("<|x|>",)
    guard = Guard()
    services = cast(Services, SimpleNamespace(guarded=guard))
    docs = [
        ParsedDocument(name, "0" * 64, "pdf", "PyMuPDF", (Page(1, "x"),))
        for name in ("a.pdf", "b.pdf")
    ]
    ranked = [
        [hit("one", 0.9, 1), hit("at", 0.3, 2), hit("two", 0.8, 3)],
        [hit("three", 0.5, 5)],
    ]
    origins = [Origin("file-a"), Origin("file-b", "vs_1")]
    passages, reports = guarded_candidates(exchange, services, docs, ranked, [0.3, 0.0], origins)
    assert [[(p.source, p.rank, p.text) for p in file] for file in passages] == [
        [(0, 0, "<one>"), (0, 1, "<two>")],
        [(1, 0, "<three>")],
    ]
    meta: dict[str, Any] = dict(passages[0][1].meta)
    assert meta == {
        "filename": "a.pdf",
        "page_start": 3,
        "page_end": 3,
        "location": "",
        "score": 0.8,
        "file_id": "file-a",
        "vector_store_id": None,
        # Where the passage lies in its document, for citing the page that holds its fact.
        "start": 0,
        "end": 0,
        "overview": False,
    }
    assert passages[1][0].meta["vector_store_id"] == "vs_1"
    assert reports == {
        "a.pdf": GuardReport(2, {"chat_token": 2}),
        "b.pdf": GuardReport(1, {"chat_token": 1}),
    }
    assert guard.tokens == [("<|x|>",)] * 3
