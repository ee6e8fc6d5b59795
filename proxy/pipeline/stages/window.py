"""Stages: how the prompt fills the model's context window, measured with decide's counts."""

from __future__ import annotations

from proxy.pipeline.bounds import answer_budget
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.services import Services
from proxy.pipeline.strategy import INJECT, RETRIEVAL
from proxy.pipeline.window import after_shift, prompt_sizes, share_window


async def measure_window(exchange: Exchange, services: Services) -> None:
    """Before rendering, while the messages are still chat messages; no tokenize calls."""
    record = exchange.decision
    budget = record.budget
    if budget is not None:
        window = budget.context_window
    else:
        # Cached per model, and adapt asks for it on every request anyway: no extra call.
        window = (await services.introspection.context_window(exchange.model)).tokens
    counted_files = None
    if (
        budget is not None
        and exchange.new_documents
        and None not in budget.file_tokens_per_file.values()
    ):
        chars = 0
        for document in exchange.new_documents:
            # The text decide counted: guarded (cached per document).
            chars += len((await services.guarded.document(document, exchange.control_tokens)).text)
        counted_files = (budget.file_tokens, chars)
    injected = record.strategy in (INJECT, RETRIEVAL)
    images = record.images
    record.window = share_window(
        prompt_sizes(exchange.messages, exchange.query, injected=injected),
        context_window=window,
        conversation_tokens=budget.tokens_in_context if budget else None,
        question_tokens=budget.prompt_tokens if budget else None,
        counted_files=counted_files,
        full_content=record.strategy == INJECT,
        max_tokens=answer_budget(exchange.body) or None,
        images=(images.tokens, images.estimated) if images is not None else (0, False),
    )


async def settle_window(exchange: Exchange, services: Services) -> None:
    """After context shifting, whose count of the whole prompt is exact."""
    record = exchange.decision
    shift = record.context_shift
    if record.window is not None and shift is not None:
        record.window = after_shift(record.window, shift.tokens, shift.dropped_messages)
