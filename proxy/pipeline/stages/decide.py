"""Stage: count in the model's tokens and choose the strategy (docs/strategy.md)."""

from __future__ import annotations

import logging
import time

import structlog

from proxy import logs
from proxy.pipeline.decision import TokenBudget
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.services import Services
from proxy.pipeline.strategy import (
    Strategy,
    available_tokens,
    choose_strategy,
    measure_context,
    route,
)

log = structlog.get_logger(__name__)


async def decide(exchange: Exchange, services: Services) -> None:
    forced = exchange.options.strategy
    # A vector store's files are searched as if they were old files of the conversation.
    has_old = bool(exchange.old_refs or exchange.store_search)
    routed = route(bool(exchange.new_documents), has_old)
    record = exchange.decision
    record.new_files = [d.name for d in exchange.new_documents]
    record.old_files = [r.name for r in exchange.old_refs]
    record.requested_strategy = forced
    has_files = bool(exchange.new_documents) or has_old
    if forced != Strategy.AUTO and (has_files or forced == Strategy.NONE):
        record.strategy, record.reason = forced, "requested in enrich.strategy"
    elif routed is not None:
        record.strategy = routed
        if routed == Strategy.NONE:
            record.reason = "no files"
        elif exchange.old_refs:
            record.reason = "only files from earlier messages"
        else:
            record.reason = "vector stores to search"
    else:
        await _choose(exchange, services)
    if record.strategy != Strategy.NONE:
        exchange.response_headers["X-Enrich-Strategy"] = record.strategy
    if logs.enabled(logging.DEBUG):  # the record as JSON is built only when it is written
        log.debug("decision", request_id=exchange.request_id, **record.to_json())


async def _choose(exchange: Exchange, services: Services) -> None:
    introspection = services.introspection
    started = time.perf_counter()
    counter = await introspection.counter(exchange.model)
    window = await introspection.context_window(exchange.model)
    in_context = await counter.count_messages(exchange.messages)
    prompt_tokens = await counter.count_text(exchange.query) if exchange.query else 0
    measure = measure_context(in_context, window.tokens) if window.tokens else None
    remaining = measure.model_remaining_context_length if measure else None
    file_tokens = 0
    per_file: dict[str, int | None] = {}
    for document in exchange.new_documents:
        guarded = await services.guarded.document(document, exchange.control_tokens)
        if remaining is not None and file_tokens > remaining:
            per_file[document.name] = None  # not counted: already past what remains
            continue
        key = (counter.kind, f"{exchange.model}:{document.sha256}:{len(guarded.text)}")
        count = services.token_cache.get(key)
        if count is None:
            count = await counter.count_text(guarded.text)
            services.token_cache.put(key, count)
        per_file[document.name] = count
        file_tokens += count
    record = exchange.decision
    record.strategy = choose_strategy(file_tokens, prompt_tokens, measure)
    record.reason = "unknown context window" if measure is None else "token budget"
    exchange.timed("count", time.perf_counter() - started)
    record.budget = TokenBudget(
        counter=counter.kind,
        counts_exact=counter.exact,
        context_window=window.tokens,
        context_window_source=window.source,
        tokens_in_context=in_context,
        remaining_context=remaining,
        occupied_percent=round(measure.context_occupied_percent, 3) if measure else None,
        available_tokens=available_tokens(measure) if measure else None,
        prompt_tokens=prompt_tokens,
        file_tokens=file_tokens,
        file_tokens_per_file=per_file,
    )
    if window.tokens:
        exchange.response_headers["X-Enrich-Tokens"] = f"{in_context + file_tokens}/{window.tokens}"
