"""What the decision record says became of each retrieved passage."""

from __future__ import annotations

from proxy.documents.model import Page, ParsedDocument
from proxy.pipeline.stages.retrieve import citation_of, outcomes, search_result
from proxy.retrieval.budget import Passage, PassageSelection
from proxy.retrieval.chunking import Chunk
from proxy.retrieval.retriever import Scored


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
