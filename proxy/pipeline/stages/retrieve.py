"""Stage: retrieval's search — documents and vector stores searched into ranked candidates."""

from __future__ import annotations

import math

from proxy.pipeline.answer_shape import completion_shaped
from proxy.pipeline.candidates import guarded_candidates
from proxy.pipeline.citing import sources_header
from proxy.pipeline.completion_prompt import BASE_PASSAGES
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.file_search import FileSearch, Origin
from proxy.pipeline.retrieval_state import Ranked
from proxy.pipeline.searches import QuestionTranslations
from proxy.pipeline.services import Services
from proxy.pipeline.strategy import RETRIEVAL
from proxy.retrieval.history import SearchText
from proxy.retrieval.scored import Scored
from proxy.retrieval.sentence_windows import WindowShape
from proxy.stores.chunking import reference
from proxy.stores.records import FileRecord
from proxy.stores.search import by_file

FILL_DEPTH = 16
"""Candidates per file offered to the budget when it may be filled: a 4,096-token window's
budget holds ~8 passages of 250 word pieces, and a larger window is better spent on the
answer than on a long tail of weaker passages (docs/retrieval.md)."""


async def retrieve_candidates(exchange: Exchange, services: Services) -> None:
    """The stage: when retrieval was decided and the model was not offered its own searches."""
    if exchange.strategy != RETRIEVAL or exchange.search_offered:
        return
    searches = exchange.searches
    assert searches is not None  # planned by the `query` stage
    retriever = await services.retriever()
    settings = services.settings.retrieval
    sources = list(searches.sources)
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
    ranked: list[list[Scored]] = []
    indexed: dict[str, int] = {}
    indexing: dict[str, str] = {}
    places: dict[str, str] = {}
    store_down: dict[str, str] = {}
    carried: dict[str, list[str]] = {}
    shape = WindowShape(settings.window_before, settings.window_after)
    translator = QuestionTranslations(exchange, services, searches.translations)
    if sources:
        ranked, indexed = await retriever.search(
            sources,
            exchange.query or " ",
            depth,
            exchange.status,
            neighbours=1 if fill == "neighbours" else 0,
            window=shape,
            translate=translator.into if services.translator is not None else None,
            also=searches.also,
            store_down=store_down,
            carried=carried,
            indexing=indexing,
            places=places,
        )
        note_readiness(exchange, indexed)
    names = {ref.name: ref.file_id for ref in [*exchange.new_refs, *exchange.old_refs]}
    origins = [Origin(names.get(document.name)) for document in sources]
    thresholds = [threshold] * len(sources)
    for record, hits in await search_stores(exchange, services, threshold, searches.also, carried):
        # Already ranked across the stores' files and held to the threshold there.
        sources.append(reference(record.filename, record.sha256, record.kind))
        ranked.append(hits)
        origins.append(Origin(record.id, record.store_id))
        thresholds.append(-math.inf)
    candidates, reports = guarded_candidates(
        exchange, services, sources, ranked, thresholds, origins
    )
    exchange.ranked = Ranked(
        sources,
        ranked,
        thresholds,
        candidates,
        reports,
        threshold=threshold,
        limit=limit,
        fill=fill,
        depth=depth,
        window=shape,
        embedder=retriever.embedder.name,
        ranking=retriever.ranking + ("+rerank" if retriever.reranker else ""),
        indexed=indexed,
        indexing=indexing,
        places=places,
        store_down=store_down,
        carried=carried,
    )


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
