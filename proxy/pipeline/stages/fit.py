"""Stage: the prompt as sent fits the window the server really runs with, or takes a door where
it does (its kind's own `fit`), or is refused with how to fix it: never cut upstream unseen."""

from __future__ import annotations

from functools import partial
from typing import Any

from proxy.pipeline.bounds import answer_budget, answer_room, bound_of
from proxy.pipeline.decision import UpstreamRecord
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.services import Services
from proxy.upstream.abilities import Abilities
from proxy.upstream.facts import ModelFacts
from proxy.upstream.kinds import profile
from proxy.upstream.kinds.profile import Fitting, WindowTooSmall
from proxy.upstream.tokens import TokenCounter

__all__ = ["IMAGE_TOKENS", "WindowTooSmall", "fit_window", "prompt_tokens"]

# What Ollama counts an image as when it fits a conversation to the window (server/prompt.go
# imageNumTokens); text-only counts cannot see images.
IMAGE_TOKENS = 768


def _images(messages: list[dict[str, Any]]) -> int:
    return sum(
        1
        for message in messages
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if isinstance(part, dict) and part.get("type") == "image_url"
    )


async def prompt_tokens(exchange: Exchange, counter: TokenCounter, limit: int) -> int | None:
    """The prompt's tokens as it goes upstream; None when it surely fits `limit` uncounted."""
    shift = exchange.decision.context_shift
    if shift is not None:
        return shift.tokens  # context shifting counted these very messages
    prompt = exchange.body.get("prompt")
    if isinstance(prompt, str):  # rendered for a text-completion upstream
        if len(prompt.encode()) <= limit:
            return None
        return await counter.count_prompt(prompt)
    bound = await bound_of(exchange.messages)
    if bound is not None and bound <= limit:
        return None
    images = _images(exchange.messages)
    return await counter.count_messages(exchange.messages) + images * IMAGE_TOKENS


def _record(facts: ModelFacts, abilities: Abilities) -> UpstreamRecord:
    window = facts.window.fact()
    return UpstreamRecord(
        kind=facts.kind.kind,
        kind_source=facts.kind.source,
        kind_known=facts.kind.certain,
        window=window.value,
        window_exact=window.exact,
        window_source=window.source,
        tokenizer=facts.tokenizer.value,
        tokenizer_exact=facts.tokenizer.exact,
        tokenizer_source=facts.tokenizer.source,
        loaded_window=facts.window.loaded,
        instruct=abilities.instruct.value,
        instruct_source=abilities.instruct.source,
        tools=abilities.tools.value,
        tools_source=abilities.tools.source,
    )


def _taken_back(exchange: Exchange, fitting: Fitting) -> None:
    """What the kind's hooks changed of the request goes with it."""
    exchange.body = fitting.body
    exchange.upstream_path = fitting.upstream_path
    if fitting.response_converter is not None:
        exchange.response_converter = fitting.response_converter


async def fit_window(exchange: Exchange, services: Services) -> None:
    introspection = services.introspection
    facts = await introspection.facts(exchange.model)
    abilities = await services.abilities.of(exchange.model)
    record = exchange.decision.upstream = _record(facts, abilities)
    kind = facts.kind.kind
    server = profile(kind)
    exchange.error_frames = server.error_frames
    exchange.window_hint = facts.window.hint
    fitting = Fitting(
        model=exchange.model,
        body=exchange.body,
        upstream_path=exchange.upstream_path,
        fixed_route=exchange.fixed_route,
        facts=facts,
        record=record,
        settings=services.settings,
        label=server.label,
        raised_num_ctx=introspection.raised_num_ctx,
        warnings=exchange.decision.warnings,
        response_headers=exchange.response_headers,
        count=partial(prompt_tokens, exchange),
        bound=lambda: bound_of(exchange.messages),
    )
    if server.prepare is not None:
        server.prepare(fitting)
        _taken_back(exchange, fitting)
    if not server.truncates:
        return
    answer = answer_room(exchange.body, kind)
    record.answer_tokens = answer
    fitting.answer = answer
    fitting.answer_asked = answer_budget(exchange.body)
    fitting.counter = await introspection.counter(exchange.model)
    if server.fit is not None:
        fitted = await server.fit(fitting)
        _taken_back(exchange, fitting)
        if fitted:
            return
    served = facts.window.loaded or facts.window.tokens
    if served is None:
        record.note = "the window is unknown: the prompt could not be checked against it"
        exchange.decision.warnings.append(
            f"{server.label} does not say its window for this model; "
            "a prompt longer than it may be cut (set models.<name>.context_length)"
        )
        return
    tokens = await prompt_tokens(exchange, fitting.counter, served - answer)
    record.prompt_tokens = tokens
    if tokens is not None and tokens + answer > served:
        raise fitting.too_small(tokens, served)
