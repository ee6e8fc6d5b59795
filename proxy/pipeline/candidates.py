"""Retrieval's hits as candidates: the sources searched, the hits above their threshold as
guarded passages, what the budget made of each, and a kept passage as a search result."""

from __future__ import annotations

from typing import Any

from proxy.documents.model import ParsedDocument
from proxy.guard.neutralise import GuardReport
from proxy.pipeline.decision import Candidate
from proxy.pipeline.document_report import location_fragment
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.file_search import Origin
from proxy.pipeline.parsing import parse_refs
from proxy.pipeline.services import Services
from proxy.retrieval.budget import Passage, PassageSelection
from proxy.retrieval.scored import Scored


def citation_of(meta: dict[str, Any]) -> str:
    """`report.pdf#page=4` (the way PDF viewers open a page), `handbook.docx#section=Refunds`,
    `sheet.xlsx#sheet=Q3`, `deck.pptx#slide=4`."""
    location = meta.get("location") or f"page={meta['page_start']}"
    return f"{meta['filename']}#{location_fragment(location)}"


async def index_sources(exchange: Exchange, services: Services) -> list[ParsedDocument]:
    """New and old documents, each once (by sha256); the retriever indexes them as it searches."""
    documents = list(exchange.new_documents)
    if exchange.old_refs:
        documents += await parse_refs(exchange.old_refs, exchange, services)
    # The same document attached twice is one source.
    return list({doc.sha256: doc for doc in documents}.values())


def guarded_candidates(
    exchange: Exchange,
    services: Services,
    sources: list[ParsedDocument],
    ranked: list[list[Scored]],
    thresholds: list[float],
    origins: list[Origin],
) -> tuple[list[list[Passage]], dict[str, GuardReport]]:
    """Per source, its hits above its threshold as guarded passages, in rank order."""
    reports: dict[str, GuardReport] = {}
    by_source: list[list[Passage]] = []
    for source, (document, hits) in enumerate(zip(sources, ranked, strict=True)):
        passages = []
        threshold, origin = thresholds[source], origins[source]
        for rank, hit in enumerate(h for h in hits if above(h, threshold)):
            guarded = services.guarded.guard(hit.chunk.shown, exchange.control_tokens)
            reports[document.name] = reports.get(document.name, GuardReport()) + guarded.report
            meta = {
                "filename": document.name,
                "page_start": hit.chunk.page_start,
                "page_end": hit.chunk.page_end,
                "location": hit.chunk.location,
                "start": hit.chunk.start,
                "end": hit.chunk.end,
                "overview": hit.overview,
                "score": hit.dense,
                "file_id": origin.file_id,
                "vector_store_id": origin.vector_store_id,
            }
            passages.append(Passage(source, rank, guarded.text, meta))
        by_source.append(passages)
    return by_source, reports


def above(hit: Scored, threshold: float) -> bool:
    """Whether a hit passes the threshold: its cosine is over it, it was ranked by its words
    alone (a language the embedder does not read, whose cosines mean nothing), or it was given
    for a question about the whole document or from the place the question names (chosen by
    where it sits, not by its cosine)."""
    return not hit.by_meaning or hit.overview or hit.place or hit.dense > threshold


SNIPPET_CHARS = 300


def outcomes(
    sources: list[ParsedDocument],
    ranked: list[list[Scored]],
    thresholds: list[float],
    offered: list[list[Passage]],
    selection: PassageSelection,
) -> list[Candidate]:
    """Every hit, best first per file, with what the threshold and the budget made of it."""
    kept = {(p.source, p.rank): p for p in selection.passages}
    candidates = []
    for source, (document, hits) in enumerate(zip(sources, ranked, strict=True)):
        rank = 0
        for hit in hits:
            if not above(hit, thresholds[source]):
                outcome = "below threshold"
            else:
                passage = kept.get((source, rank))
                rank += 1
                if passage is None:
                    outcome = "over budget"
                else:
                    whole = offered[source][passage.rank].text
                    outcome = "kept" if passage.text == whole else "shortened"
            candidates.append(
                Candidate(
                    file=document.name,
                    page=hit.chunk.page_start,
                    location=hit.chunk.location,
                    score=round(hit.dense, 4),
                    outcome=outcome,
                    snippet=hit.chunk.text[:SNIPPET_CHARS],
                    passage=hit.chunk.index,
                    dense=round(hit.dense, 4),
                    lexical=None if hit.lexical is None else round(hit.lexical, 4),
                    fused=None if hit.fused is None else round(hit.fused, 6),
                    rerank=None if hit.rerank is None else round(hit.rerank, 4),
                    overview=hit.overview,
                    place=hit.place,
                )
            )
    return candidates


def search_result(meta: dict[str, Any], text: str) -> dict[str, Any]:
    result = {
        "title": meta["filename"],
        "url": citation_of(meta),
        "snippet": text[:500],
        "source": "attachment",
        "location": meta.get("location") or f"page={meta['page_start']}",
        "score": round(float(meta["score"]), 4),
    }
    if result["location"].startswith("page="):
        page = result["location"].removeprefix("page=")
        result["page"] = int(page) if page.isdigit() else meta["page_start"]
        end = meta.get("page_end", meta["page_start"])
        if end > meta["page_start"]:  # the passage runs over a page break
            result["page_start"], result["page_end"] = meta["page_start"], end
    if meta.get("file_id"):
        result["file_id"] = meta["file_id"]
    if meta.get("vector_store_id"):
        result["vector_store_id"] = meta["vector_store_id"]
    return result
