"""Stage: fit the conversation into the window (context shifting) and render it for the upstream."""

from __future__ import annotations

import asyncio
from typing import Any

from proxy.formats import (
    InstructFormat,
    completion_request,
    render_prompt,
    resolve_macros,
    shift_context,
)
from proxy.formats.adapter import merged_stops
from proxy.formats.shift import ContextOverflow
from proxy.pipeline.bounds import answer_room, long_conversation, surely_fits_async
from proxy.pipeline.completion_prompt import CompletionPrompt, completion_body, render_completion
from proxy.pipeline.decision import AdapterRecord, ContextShift
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.services import Services
from proxy.upstream.base_answer import BaseAnswerConverter
from proxy.upstream.text_adapter import TextCompletionConverter


async def rendered(fmt: InstructFormat, messages: list[dict[str, Any]]) -> str:
    """The prompt for `messages` (the upstream adds BOS itself), off the loop when long."""
    if long_conversation(messages):
        return await asyncio.to_thread(render_prompt, fmt, messages, include_bos=False)
    return render_prompt(fmt, messages, include_bos=False)


async def adapt(exchange: Exchange, services: Services) -> None:
    model_settings = services.settings.model_settings(exchange.model)
    try:
        if exchange.completion is not None:
            await _to_base_completion(exchange, services, exchange.completion)
        elif model_settings.adapter == "text":
            await _to_text_completion(exchange, services, model_settings.format or "chatml")
        else:
            await _shift_chat(exchange, services)
    except ContextOverflow as overflow:
        window = await services.introspection.context_window(exchange.model)
        if not window.hint:
            raise
        # Say how to make the window larger, where the server's window is the limit.
        raise ContextOverflow(
            overflow.tokens, overflow.limit, overflow.dropped, window.hint
        ) from None


async def _window_limit(exchange: Exchange, services: Services) -> int | None:
    window = await services.introspection.context_window(exchange.model)
    if window.tokens is None:
        return None
    kind = (await services.introspection.detection()).kind
    # Page images are not text: the counters see only their labels, so their tokens are
    # taken off the limit here.
    images = exchange.decision.images
    pictured = images.tokens if images is not None else 0
    return max(1, window.tokens - answer_room(exchange.body, kind) - pictured)


def _note_dropped(exchange: Exchange, dropped: int, tokens: int, limit: int) -> None:
    exchange.decision.context_shift = ContextShift(dropped, tokens, limit)
    if dropped:
        exchange.response_headers["X-Enrich-Dropped-Messages"] = str(dropped)


async def _shift_chat(exchange: Exchange, services: Services) -> None:
    messages = exchange.messages
    limit = await _window_limit(exchange, services)
    if limit is None or await surely_fits_async(messages, limit):
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
    if limit is not None and not await surely_fits_async(messages, limit):
        counter = await services.introspection.counter(exchange.model)

        async def count(candidate: list[dict[str, Any]]) -> int:
            return await counter.count_prompt(await rendered(fmt, candidate))

        result = await shift_context(messages, count, limit)
        messages = result.messages
        _note_dropped(exchange, result.dropped, result.tokens, limit)
    # Rendering happens once, here at the end.
    prompt = await rendered(fmt, messages)
    exchange.body = completion_request(exchange.body, fmt, prompt)
    exchange.upstream_path = "/v1/completions"
    exchange.decision.adapter = AdapterRecord("text", fmt.name, stops)
    exchange.response_converter = TextCompletionConverter(stops)


async def _to_base_completion(
    exchange: Exchange, services: Services, prompt: CompletionPrompt
) -> None:
    """A base model's prompt, rendered once; the oldest turns go first when it would not fit."""
    messages = exchange.messages
    limit = await _window_limit(exchange, services)
    text = render_completion(prompt, messages)
    # A token covers at least one UTF-8 byte: a prompt of fewer bytes surely fits uncounted.
    if limit is not None and len(text.encode()) > limit:
        counter = await services.introspection.counter(exchange.model)

        async def count(candidate: list[dict[str, Any]]) -> int:
            return await counter.count_prompt(render_completion(prompt, candidate))

        result = await shift_context(messages, count, limit)
        _note_dropped(exchange, result.dropped, result.tokens, limit)
        text = render_completion(prompt, result.messages)
    body, greedy = completion_body(exchange.body, text)
    stops = list(body["stop"])
    exchange.body = body
    exchange.upstream_path = "/v1/completions"
    exchange.decision.adapter = AdapterRecord("completion", "question-answer", stops)
    record = exchange.decision.prompt
    if record is not None:
        record.sampling = (
            "greedy (temperature 0: the request set none)"
            if greedy
            else f"the request's (temperature {body.get('temperature')})"
        )
    exchange.response_converter = BaseAnswerConverter(stops)
