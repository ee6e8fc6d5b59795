"""Stage: fit the conversation into the window (context shifting) and render it for the upstream."""

from __future__ import annotations

import json
from typing import Any

from proxy.formats import (
    InstructFormat,
    completion_request,
    render_prompt,
    resolve_macros,
    shift_context,
)
from proxy.formats.adapter import merged_stops
from proxy.pipeline.decision import AdapterRecord, ContextShift
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.services import Services
from proxy.upstream.text_adapter import TextCompletionConverter

# Template overhead per message no chat format exceeds (role markers, separators, BOS/EOS).
TEMPLATE_TOKENS_PER_MESSAGE = 16


def surely_fits(messages: list[dict[str, Any]], limit: int) -> bool:
    """True when the conversation cannot exceed `limit` tokens, whatever the tokenizer.

    Every token of a byte-level or byte-fallback tokenizer covers at least one UTF-8 byte, so
    bytes plus a per-message allowance bound the count: short chats skip the tokenize calls.
    """
    size = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            size += len(content.encode())
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    size += len(part["text"].encode())
                else:
                    return False  # images and other parts: count properly
        if message.get("tool_calls"):
            # Rendered into the prompt too (as JSON in most formats' conventions).
            size += len(json.dumps(message["tool_calls"], ensure_ascii=False).encode())
        size += TEMPLATE_TOKENS_PER_MESSAGE
    return size <= limit


def answer_budget(body: dict[str, Any]) -> int:
    value = body.get("max_tokens") or body.get("max_completion_tokens") or 0
    return value if isinstance(value, int) and value > 0 else 0


async def adapt(exchange: Exchange, services: Services) -> None:
    model_settings = services.settings.model_settings(exchange.model)
    if model_settings.adapter == "text":
        await _to_text_completion(exchange, services, model_settings.format or "chatml")
    else:
        await _shift_chat(exchange, services)


async def _window_limit(exchange: Exchange, services: Services) -> int | None:
    window = await services.introspection.context_window(exchange.model)
    if window.tokens is None:
        return None
    # Page images are not text: the counters see only their labels, so their tokens are
    # taken off the limit here.
    images = exchange.decision.images
    pictured = images.tokens if images is not None else 0
    return max(1, window.tokens - answer_budget(exchange.body) - pictured)


def _note_dropped(exchange: Exchange, dropped: int, tokens: int, limit: int) -> None:
    exchange.decision.context_shift = ContextShift(dropped, tokens, limit)
    if dropped:
        exchange.response_headers["X-Enrich-Dropped-Messages"] = str(dropped)


async def _shift_chat(exchange: Exchange, services: Services) -> None:
    messages = exchange.messages
    limit = await _window_limit(exchange, services)
    if limit is None or surely_fits(messages, limit):
        return
    counter = await services.introspection.counter(exchange.model)
    result = await shift_context(messages, counter.count_messages, limit)
    exchange.body["messages"] = result.messages
    _note_dropped(exchange, result.dropped, result.tokens, limit)


async def _to_text_completion(exchange: Exchange, services: Services, format_name: str) -> None:
    fmt: InstructFormat = services.formats.get(format_name)
    stops = merged_stops(fmt, exchange.body.get("stop"))
    messages = resolve_macros(exchange.messages, services.settings.formats.variables)
    limit = await _window_limit(exchange, services)
    if limit is not None and not surely_fits(messages, limit):
        counter = await services.introspection.counter(exchange.model)

        async def count(candidate: list[dict[str, Any]]) -> int:
            return await counter.count_prompt(render_prompt(fmt, candidate))

        result = await shift_context(messages, count, limit)
        messages = result.messages
        _note_dropped(exchange, result.dropped, result.tokens, limit)
    # Rendering happens once, here at the end; the upstream adds BOS itself.
    prompt = render_prompt(fmt, messages, include_bos=False)
    exchange.body = completion_request(exchange.body, fmt, prompt)
    exchange.upstream_path = "/v1/completions"
    exchange.decision.adapter = AdapterRecord("text", fmt.name, stops)
    exchange.response_converter = TextCompletionConverter(stops)
