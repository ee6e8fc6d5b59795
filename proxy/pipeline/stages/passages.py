"""Stage: retrieval's passages — the budget, page images, focus pages, citations, the record."""

from __future__ import annotations

import asyncio
from typing import Any

from proxy.documents.model import ParsedDocument
from proxy.pipeline.answer_shape import completion_shaped
from proxy.pipeline.candidates import citation_of, outcomes, search_result
from proxy.pipeline.completion_prompt import CompletionPrompt
from proxy.pipeline.decision import RetrievalRecord
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.guard_report import note_guard
from proxy.pipeline.page_selection import select_with_pages
from proxy.pipeline.prompts import citations_prompt, no_citations_prompt
from proxy.pipeline.retrieval_state import Ranked, Searches
from proxy.pipeline.rewrite import replace_last_user_text
from proxy.pipeline.searches import searched_header, searched_record
from proxy.pipeline.services import Services
from proxy.pipeline.strategy import RETRIEVAL
from proxy.retrieval.budget import Passage, PassageBudget, PassageSelection
from proxy.retrieval.focus import focus_page, page_parts
from proxy.retrieval.function_words import detect_language


async def place_passages(exchange: Exchange, services: Services) -> None:
    """The stage: when retrieval was decided and the model was not offered its own searches."""
    if exchange.strategy != RETRIEVAL or exchange.search_offered:
        return
    searches, found = exchange.searches, exchange.ranked
    assert searches is not None and found is not None  # the `query` and `retrieve` stages
    sources, candidates = found.sources, found.candidates
    counter = await services.introspection.counter(exchange.model)
    window = await services.introspection.context_window(exchange.model)
    budget = PassageBudget.for_window(window.tokens, counter.count_text)
    unit = "tokens" if window.tokens else "characters"

    async def select(budget: PassageBudget) -> PassageSelection:
        return await budget.select(
            candidates,
            guard=lambda text: services.guarded.guard(text, exchange.control_tokens).text,
        )

    # For a model that sees, the kept passages' drawn pages as images, in the same budget.
    selection = await select_with_pages(
        exchange, services, sources, candidates, budget, unit, select
    )
    readable = await with_pages(services, sources, selection)
    focus = await asyncio.to_thread(focus_pages, readable, selection, exchange.query)
    cite(exchange, selection, focus)
    exchange.decision.retrieval = retrieval_record(searches, found, budget, unit, selection)
    # Carried words no file held were not searched: neither the record nor the header says so.
    searched = [text for text in searches.texts if text.source != "terms" or found.carried]
    if sources and len(searched) > 1:
        exchange.response_headers["X-Enrich-Searched"] = searched_header(searched)
    if searches.standalone is not None:
        exchange.response_headers["X-Enrich-Rewrite"] = searches.standalone.outcome
    note_guard(exchange, found.reports)


def retrieval_record(
    searches: Searches,
    found: Ranked,
    budget: PassageBudget,
    unit: str,
    selection: PassageSelection,
) -> RetrievalRecord:
    """What retrieval searched, found and kept, as the decision record holds it."""
    sources, ranked, shape = found.sources, found.ranked, found.window
    return RetrievalRecord(
        candidates=outcomes(sources, ranked, found.thresholds, found.candidates, selection),
        sources=[doc.name for doc in sources],
        limit=found.limit,
        affinity_threshold=found.threshold,
        embedder=found.embedder,
        scores=[[round(item.dense, 4) for item in items] for items in ranked],
        budget_limit=budget.limit,
        budget_unit=unit,
        selected_per_source=selection.per_source,
        left_out=selection.left_out,
        ranking=found.ranking,
        fill=found.fill,
        depth=found.depth,
        indexed=found.indexed,
        indexing=found.indexing,
        places=found.places,
        window={"before": shape.before, "after": shape.after} if shape else {},
        query_language=searches.translations.language,
        translations=[done.record() for done in searches.translations.done.values() if done],
        ranked_by_words=[
            doc.name
            for doc, hits in zip(sources, ranked, strict=False)
            if hits and not hits[0].by_meaning
        ],
        multilingual=[
            doc.name
            for doc, hits in zip(sources, ranked, strict=False)
            if hits and hits[0].multilingual
        ],
        overview=[
            doc.name
            for doc, hits in zip(sources, ranked, strict=False)
            if hits and hits[0].overview
        ],
        searched=searched_record(searches.texts, found.carried) if sources else [],
        store_down=found.store_down,
        rewrite=searches.standalone.record() if searches.standalone is not None else None,
    )


Focus = dict[tuple[int, int], int]
"""The page each passage over a page break is cited by, by (source, rank)."""


async def with_pages(
    services: Services, sources: list[ParsedDocument], selection: PassageSelection
) -> list[ParsedDocument]:
    """The sources with their pages, for `focus_pages`: a vector store's file comes by
    reference (its passages, not its pages), so its parsed pages are read from the parse cache
    when one of its kept passages runs over a page break; a file no longer cached keeps the
    page its passage starts on."""
    readable = list(sources)
    spanning = {
        passage.source
        for passage in selection.passages
        if passage.meta.get("page_end", 0) > passage.meta["page_start"]
    }
    cache = services.parser.cache
    for source in sorted(spanning):
        document = readable[source]
        if document.pages:
            continue
        found = cache.recall(document.sha256, document.kind)
        if found is None:
            found = await asyncio.to_thread(cache.load, document.sha256, document.kind)
        if found is not None:
            readable[source] = found
    return readable


def focus_pages(sources: list[ParsedDocument], selection: PassageSelection, query: str) -> Focus:
    """For each kept passage that runs over a page break, the page holding what it was found
    for (`proxy.retrieval.focus`), rather than the page it starts on; a document's opening,
    given for a question about the whole document, is where it starts."""
    found: Focus = {}
    languages: dict[int, str] = {}
    for passage in selection.passages:
        meta = passage.meta
        location = str(meta.get("location") or "page=")
        if meta.get("page_end", 0) <= meta["page_start"] or not location.startswith("page="):
            continue
        if meta.get("overview"):
            continue  # chosen by where it sits, not by the question's words
        document = sources[passage.source]
        if passage.source not in languages:
            languages[passage.source] = detect_language([page.text for page in document.pages])
        parts = page_parts(document, int(meta["start"]), int(meta["end"]))
        page = focus_page(parts, query, languages[passage.source])
        if page is not None:
            found[(passage.source, passage.rank)] = page
    return found


def cited(passage: Passage, focus: Focus) -> dict[str, Any]:
    """A kept passage's citation fields, placed at its focus page when it has one."""
    meta = dict(passage.meta)
    page = focus.get((passage.source, passage.rank))
    if page is not None:
        meta["location"] = f"page={page}"
    return meta


def cite(exchange: Exchange, selection: PassageSelection, focus: Focus | None = None) -> None:
    """The citation prompt in place of the last user message; citations for the answer."""
    texts = [passage.text for passage in selection.passages]
    prompt = (
        citations_prompt(texts, exchange.query) if texts else no_citations_prompt(exchange.query)
    )
    exchange.body["messages"] = replace_last_user_text(exchange.messages, prompt)
    if completion_shaped(exchange):
        exchange.completion = CompletionPrompt(tuple(texts), exchange.query)
    metas = [cited(passage, focus or {}) for passage in selection.passages]
    exchange.citations = [citation_of(meta) for meta in metas]
    exchange.search_results = [
        search_result(meta, passage.text)
        for meta, passage in zip(metas, selection.passages, strict=True)
    ]
    exchange.status(f"Retrieved {len(texts)} relevant citations for user query")
    exchange.response_headers["X-Enrich-Citations"] = str(len(texts))
