"""Stage (retrieval branch): index, search, fit the passages into the budget, cite them."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from proxy.documents.model import ParsedDocument
from proxy.documents.report import location_fragment
from proxy.guard.neutralise import GuardReport
from proxy.languages import LANGUAGE_NAMES
from proxy.pipeline.citing import sources_header
from proxy.pipeline.decision import Candidate, RetrievalRecord
from proxy.pipeline.exchange import Exchange, FileSearch
from proxy.pipeline.prompts import citations_prompt, no_citations_prompt
from proxy.pipeline.rewrite import replace_last_user_text
from proxy.pipeline.services import Services
from proxy.pipeline.stages.documents import parse_refs
from proxy.pipeline.stages.guard_report import note_guard
from proxy.pipeline.stages.pages import select_with_pages
from proxy.retrieval.budget import Passage, PassageBudget, PassageSelection
from proxy.retrieval.lexical import query_language
from proxy.retrieval.retriever import Scored
from proxy.retrieval.translation import Endpoint, Translation, translatable
from proxy.retrieval.windows import WindowShape
from proxy.stores.chunking import reference
from proxy.stores.records import FileRecord
from proxy.stores.search import by_file
from proxy.upstream.ollama.api import full_name

FILL_DEPTH = 16
"""Candidates per file offered to the budget when it may be filled: a 4,096-token window's
budget holds ~8 passages of 250 word pieces, and a larger window is better spent on the
answer than on a long tail of weaker passages (docs/retrieval.md)."""


def citation_of(meta: dict[str, Any]) -> str:
    """`report.pdf#page=4` (the way PDF viewers open a page), `handbook.docx#section=Refunds`,
    `sheet.xlsx#sheet=Q3`, `deck.pptx#slide=4`."""
    location = meta.get("location") or f"page={meta['page_start']}"
    return f"{meta['filename']}#{location_fragment(location)}"


async def retrieve(exchange: Exchange, services: Services) -> None:
    retriever = await services.retriever()
    settings = services.settings.retrieval
    exchange.status("Retrieving relevant citations for user query...")
    sources = await index_sources(exchange, services)
    threshold = exchange.options.affinity_threshold
    if threshold is None:
        threshold = retriever.embedder.default_threshold
    limit = exchange.options.retrieval_limit
    # The limit is a floor: room left in the budget takes more, unless the client set it.
    fill = "none" if exchange.options.retrieval_limit_given else settings.fill
    depth = limit if fill == "none" else max(limit, FILL_DEPTH)
    started = time.perf_counter()
    ranked: list[list[Scored]] = []
    indexed: dict[str, int] = {}
    indexing: dict[str, str] = {}
    places: dict[str, str] = {}
    translator = QuestionTranslations(exchange, services)
    shape = WindowShape(settings.window_before, settings.window_after)
    if sources:
        ranked, indexed = await retriever.search(
            sources,
            exchange.query or " ",
            depth,
            exchange.status,
            neighbours=1 if fill == "neighbours" else 0,
            window=shape,
            translate=translator.into if services.translator is not None else None,
            indexing=indexing,
            places=places,
        )
        note_readiness(exchange, indexed)
    names = {ref.name: ref.file_id for ref in [*exchange.new_refs, *exchange.old_refs]}
    origins = [Origin(names.get(document.name)) for document in sources]
    thresholds = [threshold] * len(sources)
    for record, hits in await search_stores(exchange, services, threshold):
        # Already ranked across the stores' files and held to the threshold there.
        sources.append(reference(record.filename, record.sha256, record.kind))
        ranked.append(hits)
        origins.append(Origin(record.id, record.store_id))
        thresholds.append(-math.inf)
    exchange.timed("search", time.perf_counter() - started)
    candidates, reports = guarded_candidates(
        exchange, services, sources, ranked, thresholds, origins
    )
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
    cite(exchange, selection)
    exchange.decision.retrieval = RetrievalRecord(
        candidates=outcomes(sources, ranked, thresholds, candidates, selection),
        sources=[doc.name for doc in sources],
        limit=limit,
        affinity_threshold=threshold,
        embedder=retriever.embedder.name,
        scores=[[round(item.dense, 4) for item in items] for items in ranked],
        budget_limit=budget.limit,
        budget_unit=unit,
        selected_per_source=selection.per_source,
        left_out=selection.left_out,
        ranking=retriever.ranking + ("+rerank" if retriever.reranker else ""),
        fill=fill,
        depth=depth,
        indexed=indexed,
        indexing=indexing,
        places=places,
        window={"before": shape.before, "after": shape.after} if shape else {},
        query_language=translator.language,
        translations=[found.record() for found in translator.done.values() if found],
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
    )
    note_guard(exchange, reports)


def note_readiness(exchange: Exchange, indexed: dict[str, int]) -> None:
    """How much of each document's dense index the answer was ranked with, for the client:
    `X-Enrich-Index-Ready: book.pdf=37, notes.md=100`, and a status line when a document was
    not whole (its other passages were ranked by their words only)."""
    if not indexed:
        return
    exchange.response_headers["X-Enrich-Index-Ready"] = sources_header(
        [f"{name}={percent}" for name, percent in indexed.items()]
    )
    for name, percent in indexed.items():
        if percent < 100:
            exchange.status(
                f"Answering from {name} while it is indexed: {percent}% of its passages"
                " ranked by meaning so far"
            )


class QuestionTranslations:
    """The request's question in each of its documents' languages that differs from its own:
    asked of the upstream once per language (docs/retrieval.md)."""

    def __init__(self, exchange: Exchange, services: Services) -> None:
        self.exchange = exchange
        self.services = services
        self.language = query_language(exchange.query) if exchange.query.strip() else None
        self.done: dict[str, Translation | None] = {}

    async def into(self, target: str) -> Translation | None:
        if target in self.done:
            return self.done[target]
        query = self.exchange.query
        source = query_language(query, prefer=target) if query.strip() else None
        translator = self.services.translator
        if translator is None or not translatable(source, target) or source is None:
            self.done[target] = None
            return None
        mode = self.services.settings.retrieval.translate
        kind = await self.services.introspection.kind()
        if mode == "auto":
            mode = "completions" if kind in COMPLETION_KINDS else "chat"
        # llama.cpp's prompt cache makes two identical greedy requests differ: the same
        # question must give the same translation, whatever was asked before.
        extra: dict[str, Any] = {"cache_prompt": False} if kind == "llamacpp" else {}
        endpoint: Endpoint = "completions" if mode == "completions" else "chat"
        window = await self.ollama_window() if kind == "ollama" and mode == "chat" else None
        if window is not None:
            # Ollama's OpenAI endpoint sets no window: asked there, a model the proxy runs with
            # a larger one is reloaded with the default, and again for the question itself.
            endpoint, extra = "native", {"options": {"num_ctx": window}}
        self.exchange.status(f"Translating the question into {LANGUAGE_NAMES[target]}...")
        found = await translator.translate(
            query,
            source,
            target,
            model=self.exchange.model,
            endpoint=endpoint,
            scope=self.exchange.caller.name,
            extra=extra,
        )
        self.done[target] = found
        return found

    async def ollama_window(self) -> int | None:
        """The window Ollama runs the request's model with, as far as the proxy knows: the one
        it asked for last, else the one /api/ps said (None: the default, as the OpenAI endpoint
        asks for)."""
        introspection = self.services.introspection
        raised = introspection.raised_num_ctx.get(full_name(self.exchange.model or ""))
        if raised is not None:
            return raised
        return (await introspection.context_window(self.exchange.model)).running


COMPLETION_KINDS = frozenset({"llamacpp", "vllm"})
"""Upstreams whose /v1/completions takes any model, base models included: a few-shot prompt
there translates with models that follow no instruction (the bundled Gemma 3 270M)."""


@dataclass(frozen=True)
class Origin:
    """Where a source's passages come from: a file id (uploaded, or a vector store's file) and
    the vector store, if any."""

    file_id: str | None = None
    vector_store_id: str | None = None


async def search_stores(
    exchange: Exchange, services: Services, threshold: float
) -> list[tuple[FileRecord, list[Scored]]]:
    """The request's vector stores searched for its query: the best passages across their
    files (file_search's max_num_results, filters and score_threshold), grouped by file."""
    found = exchange.store_search
    if found is None or services.vector_stores is None:
        return []
    asked = exchange.file_search or FileSearch(())
    limit = asked.max_num_results or services.settings.vector_stores.default_max_results
    if asked.score_threshold is not None:
        threshold = asked.score_threshold
    found.queries = [exchange.query or " "]
    hits = await services.vector_stores.search_stores(
        found.stores, found.queries, asked.filters, limit, threshold
    )
    found.results = [hit.found() for hit in hits]
    return by_file(hits)


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


def cite(exchange: Exchange, selection: PassageSelection) -> None:
    """The citation prompt in place of the last user message; citations for the answer."""
    texts = [passage.text for passage in selection.passages]
    prompt = (
        citations_prompt(texts, exchange.query) if texts else no_citations_prompt(exchange.query)
    )
    exchange.body["messages"] = replace_last_user_text(exchange.messages, prompt)
    exchange.citations = [citation_of(dict(p.meta)) for p in selection.passages]
    exchange.search_results = [search_result(dict(p.meta), p.text) for p in selection.passages]
    exchange.status(f"Retrieved {len(texts)} relevant citations for user query")
    exchange.response_headers["X-Enrich-Citations"] = str(len(texts))


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
        result["page"] = meta["page_start"]
    if meta.get("file_id"):
        result["file_id"] = meta["file_id"]
    if meta.get("vector_store_id"):
        result["vector_store_id"] = meta["vector_store_id"]
    return result
