"""What the model's search function covers, and one call of it: the queries searched in the
attached documents and the vector stores, guarded, fitted into what is left of the passage
budget, and written back as the tool's result."""

from __future__ import annotations

import math

from proxy.guard.neutralise import GuardReport
from proxy.pipeline.candidates import (
    citation_of,
    guarded_candidates,
    index_sources,
    search_result,
)
from proxy.pipeline.decision import SearchCall
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.file_search import CallResult, FileSearch, Origin
from proxy.pipeline.guard_report import note_guard
from proxy.pipeline.prompts import USE_CITATIONS, citations_tail
from proxy.pipeline.services import Services
from proxy.retrieval.budget import Passage, PassageBudget, citation_line
from proxy.retrieval.scored import Scored
from proxy.retrieval.sentence_windows import WindowShape
from proxy.stores.chunking import reference
from proxy.stores.search import by_file

SEARCH_FUNCTION = "file_search"
"""The name of the function the model is offered: the name of OpenAI's hosted tool."""

MAX_QUERY_CHARS = 500
"""A query longer than this is cut: a search needs words, not a page of them."""

NO_ROOM = (
    "No room is left for more passages in this conversation: answer from the citations given "
    "so far."
)
LAST_TURN = (
    "No more searches can be made: answer the user now from the citations above, without "
    "calling any function."
)


def quoted(queries: list[str]) -> str:
    return "; ".join(f'"{query}"' for query in queries)


def results_header(queries: list[str]) -> str:
    return f"Results for {quoted(queries)}:"


MAX_RESTATED = 1000
"""A user query longer than this (characters) is not restated after a call's results."""


def results_tail(question: str) -> str:
    """What follows a call's passages: the citation prompt's own ending, telling the model how
    to use them, and the user's query restated (small models otherwise lose it under the
    passages: Qwen2.5-Coder-1.5B answered nothing, or searched again with the same queries)."""
    if not question.strip() or len(question) > MAX_RESTATED:
        return USE_CITATIONS
    return citations_tail(question)


def results_text(queries: list[str], passages: list[str], question: str) -> str:
    """The tool result the model reads: the passages as the citation prompt numbers them, then
    `results_tail`."""
    lines = [citation_line(number, text) for number, text in enumerate(passages, 1)]
    return "\n\n".join([results_header(queries), *lines, results_tail(question)])


def nothing_found(queries: list[str], repeated: bool) -> str:
    if repeated:
        return f"The passages found for {quoted(queries)} were all given above already."
    return f"No passage of the files matched {quoted(queries)}."


async def open_space(exchange: Exchange, services: Services, documents: bool) -> None:
    """The search function's scope: the attached documents (when they are to be retrieved,
    not given whole) and the vector stores; the passage budget of all its calls together."""
    search = exchange.model_search
    assert search is not None
    if documents:
        search.sources = await index_sources(exchange, services)
        names = {ref.name: ref.file_id for ref in [*exchange.new_refs, *exchange.old_refs]}
        search.origins = [Origin(names.get(document.name)) for document in search.sources]
    found = exchange.store_search
    search.stores = list(found.stores) if found is not None else []
    search.file_search = exchange.file_search
    if not search.armed:
        return
    counter = await services.introspection.counter(exchange.model)
    window = await services.introspection.context_window(exchange.model)
    search.budget = PassageBudget.for_window(window.tokens, counter.count_text)
    search.unit = "tokens" if window.tokens else "characters"
    search.measure = counter.count_text if window.tokens else _characters
    record = search.record
    record.scope = search.scope(exchange.control_tokens)
    record.budget_limit = search.budget.limit
    record.budget_unit = search.unit


async def _characters(text: str) -> int:
    return len(text)


def _merged(rankings: list[list[Scored]]) -> list[Scored]:
    """One document's rankings for several queries as one: rank by rank, each passage once."""
    merged: list[Scored] = []
    seen: set[int] = set()
    for rank in range(max((len(r) for r in rankings), default=0)):
        for ranking in rankings:
            if rank < len(ranking) and ranking[rank].chunk.index not in seen:
                seen.add(ranking[rank].chunk.index)
                merged.append(ranking[rank])
    return merged


def _capped(by_source: list[list[Passage]], limit: int, given: set[str]) -> list[list[Passage]]:
    """At most `limit` passages not given before, taken rank by rank across the sources (as the
    budget takes them), each source's in rank order."""
    kept: list[list[Passage]] = [[] for _ in by_source]
    taken = 0
    for rank in range(max((len(p) for p in by_source), default=0)):
        for source, passages in enumerate(by_source):
            if taken < limit and rank < len(passages) and passages[rank].text not in given:
                kept[source].append(passages[rank])
                taken += 1
    return kept


async def run_search(
    exchange: Exchange, services: Services, queries: list[str], turn: int
) -> CallResult:
    """One call of the search function: every query searched in the documents and the stores,
    each passage once, the best `max_num_results` not given before, within the budget left."""
    search = exchange.model_search
    assert search is not None and search.budget is not None and search.measure is not None
    asked = search.file_search or FileSearch(())
    limit = asked.max_num_results or services.settings.vector_stores.default_max_results
    retriever = await services.retriever()
    threshold = exchange.options.affinity_threshold
    if threshold is None:
        threshold = retriever.embedder.default_threshold
    sources = list(search.sources)
    ranked: list[list[Scored]] = [[] for _ in sources]
    if sources:
        settings = services.settings.retrieval
        shape = WindowShape(settings.window_before, settings.window_after)
        per_query = [
            (await retriever.search(sources, query, limit, window=shape))[0] for query in queries
        ]
        ranked = [_merged([found[index] for found in per_query]) for index in range(len(sources))]
    thresholds = [threshold] * len(sources)
    origins = list(search.origins)
    if search.stores and services.vector_stores is not None:
        store_threshold = threshold if asked.score_threshold is None else asked.score_threshold
        hits = await services.vector_stores.search_stores(
            search.stores, queries, asked.filters, limit, store_threshold
        )
        for file, scored in by_file(hits):
            sources.append(reference(file.filename, file.sha256, file.kind))
            ranked.append(scored)
            origins.append(Origin(file.id, file.store_id))
            thresholds.append(-math.inf)  # held to the threshold by the store search
            search.attributes[(file.store_id, file.id)] = dict(file.attributes)
    by_source, reports = guarded_candidates(
        exchange, services, sources, ranked, thresholds, origins
    )
    for name, report in reports.items():
        search.reports[name] = search.reports.get(name, GuardReport()) + report
    if search.reports:
        note_guard(exchange, search.reports)
    found = sum(len(passages) for passages in by_source)
    fresh = _capped(by_source, limit, search.given)
    offered = sum(len(passages) for passages in fresh)
    record = SearchCall(round=turn, queries=queries, found=found)
    if not offered:
        record.left_out = found
        return CallResult(nothing_found(queries, repeated=found > 0), [], record)
    header = await search.measure(f"{results_header(queries)}\n\n{results_tail(exchange.query)}")
    room = search.budget.limit - search.used - header
    if room < 1:
        record.left_out = found
        return CallResult(NO_ROOM, [], record)
    selection = await search.budget.with_limit(room).select(
        fresh, guard=lambda text: services.guarded.guard(text, exchange.control_tokens).text
    )
    passages = selection.passages
    if not passages:
        record.left_out = found
        return CallResult(NO_ROOM, [], record)
    search.used += header + selection.used
    search.record.budget_used = search.used
    record.given = len(passages)
    record.left_out = found - len(passages)
    results = []
    for passage in passages:
        meta = dict(passage.meta)
        # Given, as found: a passage shortened to fit is the same passage next time.
        found_as = next(p for p in fresh[passage.source] if p.rank == passage.rank)
        search.given.add(found_as.text)
        exchange.citations.append(citation_of(meta))
        exchange.search_results.append(search_result(meta, passage.text))
        key = (str(meta.get("vector_store_id") or ""), str(meta.get("file_id") or ""))
        results.append(
            {
                "file_id": meta.get("file_id"),
                "filename": meta["filename"],
                "score": round(float(meta["score"]), 4),
                "text": passage.text,
                "attributes": search.attributes.get(key, {}),
            }
        )
    texts = [p.text for p in passages]
    return CallResult(results_text(queries, texts, exchange.query), results, record)
