"""Stage: retrieval by the proxy — index, search, fit the passages into the budget, cite them."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

from proxy.documents.model import ParsedDocument
from proxy.languages import LANGUAGE_NAMES
from proxy.pipeline.answer_shape import completion_shaped, plan_shape
from proxy.pipeline.candidates import (
    citation_of,
    guarded_candidates,
    index_sources,
    outcomes,
    search_result,
)
from proxy.pipeline.citing import sources_header
from proxy.pipeline.completion_prompt import BASE_PASSAGES, CompletionPrompt
from proxy.pipeline.decision import RetrievalRecord
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.file_refs import last_user_index
from proxy.pipeline.file_search import FileSearch, Origin
from proxy.pipeline.guard_report import note_guard
from proxy.pipeline.page_selection import select_with_pages
from proxy.pipeline.prompts import citations_prompt, no_citations_prompt
from proxy.pipeline.rewrite import replace_last_user_text
from proxy.pipeline.services import Services
from proxy.pipeline.standalone_question import StandaloneQuestion, standalone_question
from proxy.pipeline.strategy import RETRIEVAL
from proxy.retrieval.budget import Passage, PassageBudget, PassageSelection
from proxy.retrieval.focus import focus_page, page_parts
from proxy.retrieval.history import (
    HistoryRule,
    SearchText,
    earlier_turns,
    led_by_rewrite,
    search_texts,
)
from proxy.retrieval.lexical import detect_language, query_language
from proxy.retrieval.retriever import Scored
from proxy.retrieval.sentence_windows import WindowShape
from proxy.retrieval.translation import Endpoint, Translation, translatable
from proxy.stores.chunking import reference
from proxy.stores.records import FileRecord
from proxy.stores.search import by_file
from proxy.upstream.ollama.api import full_name

FILL_DEPTH = 16
"""Candidates per file offered to the budget when it may be filled: a 4,096-token window's
budget holds ~8 passages of 250 word pieces, and a larger window is better spent on the
answer than on a long tail of weaker passages (docs/retrieval.md)."""


async def retrieve_passages(exchange: Exchange, services: Services) -> None:
    """The stage: when retrieval was decided and the model was not offered its own searches,
    which prompt (the chat prompts, or the completion shape for a base model), then retrieval."""
    if exchange.strategy != RETRIEVAL or exchange.search_offered:
        return
    await plan_shape(exchange, services)
    await retrieve(exchange, services)


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
    if completion_shaped(exchange) and not exchange.options.retrieval_limit_given:
        # A base model finds the answer in its best passages, and less often in more.
        limit, fill = min(limit, BASE_PASSAGES), "none"
    depth = limit if fill == "none" else max(limit, FILL_DEPTH)
    started = time.perf_counter()
    ranked: list[list[Scored]] = []
    indexed: dict[str, int] = {}
    indexing: dict[str, str] = {}
    places: dict[str, str] = {}
    translator = QuestionTranslations(exchange, services)
    shape = WindowShape(settings.window_before, settings.window_after)
    store_down: dict[str, str] = {}
    carried: dict[str, list[str]] = {}
    # A follow-up that leans on its conversation: its standalone question, written by the model.
    searching = bool(sources) or exchange.store_search is not None
    standalone = await standalone_question(exchange, services) if searching else None
    searched = conversation_texts(exchange, services, standalone)
    if sources:
        ranked, indexed = await retriever.search(
            sources,
            exchange.query or " ",
            depth,
            exchange.status,
            neighbours=1 if fill == "neighbours" else 0,
            window=shape,
            translate=translator.into if services.translator is not None else None,
            also=searched[1:],
            store_down=store_down,
            carried=carried,
            indexing=indexing,
            places=places,
        )
        note_readiness(exchange, indexed)
    names = {ref.name: ref.file_id for ref in [*exchange.new_refs, *exchange.old_refs]}
    origins = [Origin(names.get(document.name)) for document in sources]
    thresholds = [threshold] * len(sources)
    for record, hits in await search_stores(exchange, services, threshold, searched[1:], carried):
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
    readable = await with_pages(services, sources, selection)
    focus = await asyncio.to_thread(focus_pages, readable, selection, exchange.query)
    cite(exchange, selection, focus)
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
        searched=searched_record(searched, carried) if sources else [],
        store_down=store_down,
        rewrite=standalone.record() if standalone is not None else None,
    )
    # Carried words no file held were not searched: neither the record nor the header says so.
    searched = [text for text in searched if text.source != "terms" or carried]
    if sources and len(searched) > 1:
        exchange.response_headers["X-Enrich-Searched"] = searched_header(searched)
    if standalone is not None:
        exchange.response_headers["X-Enrich-Rewrite"] = standalone.outcome
    note_guard(exchange, reports)


def conversation_texts(
    exchange: Exchange, services: Services, standalone: StandaloneQuestion | None = None
) -> list[SearchText]:
    """What the request's documents are searched for: the question, and the question with
    its conversation's earlier questions and last answer (retrieval.history); with the model's
    standalone question, that too, beside them or leading them (retrieval.rewrite.lead)."""
    rule = services.settings.retrieval.history
    messages = exchange.messages
    earlier = earlier_turns(messages, last_user_index(messages))
    history = HistoryRule(
        rule.turns,
        rule.weight,
        rule.decay,
        rule.reply,
        rule.terms,
        rule.term_count,
        rule.region,
        rule.lean,
        rule.near,
        rule.terms_by_meaning,
    )
    question = exchange.query or " "
    rewrite = standalone.search if standalone is not None else None
    if rewrite is None:
        return search_texts(question, earlier, history)
    if services.settings.retrieval.rewrite.lead:
        return led_by_rewrite(question, rewrite.text, earlier, history, rewrite.weight)
    return [*search_texts(question, earlier, history), rewrite]


def searched_record(
    searched: list[SearchText], carried: dict[str, list[str]]
) -> list[dict[str, Any]]:
    """The searched texts as the decision record lists them; a `terms` text with the words
    each document searched it with (`words`, by file), left out when no file held any."""
    found = []
    for text in searched:
        entry = text.record()
        if text.source == "terms":
            if not carried:
                continue
            entry["words"] = carried
        found.append(entry)
    return found


def searched_header(searched: list[SearchText]) -> str:
    """`question 1; conversation 0.5; reply 0.25`: what was searched, by where its words came
    from and its weight (the texts are in the decision record)."""
    return "; ".join(f"{text.source} {text.weight:g}" for text in searched)


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
    asked of the upstream once per language, at most `retrieval.max_translations` calls for the
    request, in the documents' order (docs/retrieval.md)."""

    def __init__(self, exchange: Exchange, services: Services) -> None:
        self.exchange = exchange
        self.services = services
        self.language = query_language(exchange.query) if exchange.query.strip() else None
        self.done: dict[str, Translation | None] = {}
        self.calls = 0

    def _may_ask(self, target: str) -> str | None:
        """None (and the status line) when one more call fits the request's bound; else why not."""
        bound = self.services.settings.retrieval.max_translations
        if self.calls >= bound:
            return f"not asked: retrieval.max_translations ({bound}) calls made for this request"
        self.calls += 1
        self.exchange.status(f"Translating the question into {LANGUAGE_NAMES[target]}...")
        return None

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
        server = await self.services.introspection.kind()
        if mode == "auto":
            mode = "completions" if server in COMPLETION_SERVERS else "chat"
        # llama.cpp's prompt cache makes two identical greedy requests differ: the same
        # question must give the same translation, whatever was asked before.
        extra: dict[str, Any] = {"cache_prompt": False} if server == "llamacpp" else {}
        endpoint: Endpoint = "completions" if mode == "completions" else "chat"
        window = await self.ollama_window() if server == "ollama" and mode == "chat" else None
        if window is not None:
            # Ollama's OpenAI endpoint sets no window: asked there, a model the proxy runs with
            # a larger one is reloaded with the default, and again for the question itself.
            endpoint, extra = "native", {"options": {"num_ctx": window}}
        found = await translator.translate(
            query,
            source,
            target,
            model=self.exchange.model,
            endpoint=endpoint,
            scope=self.exchange.caller.name,
            extra=extra,
            may_ask=lambda: self._may_ask(target),
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


COMPLETION_SERVERS = frozenset({"llamacpp", "vllm"})
"""Upstreams whose /v1/completions takes any model, base models included: a few-shot prompt
there translates with models that follow no instruction (the bundled Gemma 3 270M)."""


async def search_stores(
    exchange: Exchange,
    services: Services,
    threshold: float,
    also: list[SearchText],
    carried: dict[str, list[str]] | None = None,
) -> list[tuple[FileRecord, list[Scored]]]:
    """The request's vector stores searched for its query, with its conversation (`also`) as
    attached files are: the best passages across their files (file_search's max_num_results,
    filters and score_threshold), grouped by file; the words carried into each file's search
    are written into `carried`, by file name."""
    found = exchange.store_search
    if found is None or services.vector_stores is None:
        return []
    asked = exchange.file_search or FileSearch(())
    limit = asked.max_num_results or services.settings.vector_stores.default_max_results
    if asked.score_threshold is not None:
        threshold = asked.score_threshold
    found.queries = [exchange.query or " "]
    hits = await services.vector_stores.search_stores(
        found.stores, found.queries, asked.filters, limit, threshold, also, carried
    )
    found.results = [hit.found() for hit in hits]
    return by_file(hits)


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
