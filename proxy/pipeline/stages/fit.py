"""Stage: the prompt as sent fits the window the server really runs with, or takes a door where
it does (Ollama's native API), or is refused with how to fix it: never cut upstream unseen."""

from __future__ import annotations

from typing import Any

import structlog

from proxy.errors import BadRequest
from proxy.pipeline.bounds import answer_budget, answer_room, bound_of
from proxy.pipeline.decision import UpstreamRecord
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.services import Services
from proxy.upstream.abilities import Abilities
from proxy.upstream.facts import ModelFacts
from proxy.upstream.kinds import traits
from proxy.upstream.ollama.answer import NativeAnswer, OllamaChatConverter
from proxy.upstream.ollama.api import full_name, honours_truncate
from proxy.upstream.ollama.native import native_chat_request, without_shared_settings
from proxy.upstream.ollama.sizing import num_ctx_for
from proxy.upstream.tokens import TokenCounter

log = structlog.get_logger(__name__)

NO_WINDOW_HERE = (
    "Ollama's OpenAI endpoints take no window: the prompt is checked against the one the "
    "model is loaded with"
)
# What Ollama counts an image as when it fits a conversation to the window (server/prompt.go
# imageNumTokens); text-only counts cannot see images.
IMAGE_TOKENS = 768


class WindowTooSmall(BadRequest):
    """The prompt does not fit the window the server runs the model with, and the server would
    cut it without an error (400)."""

    def __init__(self, tokens: int, answer: int, window: int, facts: ModelFacts) -> None:
        about = "" if facts.tokenizer.exact else "about "
        hint = facts.window.hint or (
            f"{traits(facts.kind.kind).label} runs this model with a window of {window} tokens "
            "and would cut a longer prompt without saying so"
        )
        super().__init__(
            f"the prompt needs {about}{tokens} tokens and the answer {answer} more, "
            f"over the window of {window}: {hint}",
            code="context_length_exceeded",
            param="messages",
        )


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


async def fit_window(exchange: Exchange, services: Services) -> None:
    introspection = services.introspection
    facts = await introspection.facts(exchange.model)
    abilities = await services.abilities.of(exchange.model)
    record = exchange.decision.upstream = _record(facts, abilities)
    kind = facts.kind.kind
    exchange.error_frames = traits(kind).error_frames
    exchange.window_hint = facts.window.hint
    door = (
        kind == "ollama"
        and exchange.upstream_path == "/v1/chat/completions"
        and not exchange.fixed_route
    )
    if kind == "ollama":
        # What would reload or unload the model for every caller never reaches Ollama, whichever
        # route the request takes; the window asked for is bounded below (`_ollama`).
        exchange.body, shared = without_shared_settings(exchange.body)
        record.dropped_options = shared.dropped
        record.asked_num_ctx = shared.asked_num_ctx
        if shared.asked_num_ctx is not None and not door:
            record.dropped_options["options.num_ctx"] = NO_WINDOW_HERE
    if kind == "openrouter" and "transforms" not in exchange.body:
        # OpenRouter's middle-out transform cuts the middle of a prompt over the window when
        # on (opt-in, and the default for models of 8k or less in its docs): never.
        exchange.body["transforms"] = []
    if not traits(kind).truncates:
        return
    answer = answer_room(exchange.body, kind)
    record.answer_tokens = answer
    counter = await introspection.counter(exchange.model)
    if kind == "textgen":
        await _textgen(exchange, counter, facts, answer)
        return
    served = facts.window.loaded or facts.window.tokens
    if served is None:
        record.note = "the window is unknown: the prompt could not be checked against it"
        exchange.decision.warnings.append(
            f"{traits(kind).label} does not say its window for this model; "
            "a prompt longer than it may be cut (set models.<name>.context_length)"
        )
        return
    if door:
        await _ollama(exchange, services, facts, counter, served, answer)
        return
    tokens = await prompt_tokens(exchange, counter, served - answer)
    record.prompt_tokens = tokens
    if tokens is not None and tokens + answer > served:
        raise WindowTooSmall(tokens, answer, served, facts)


async def _ollama(
    exchange: Exchange,
    services: Services,
    facts: ModelFacts,
    counter: TokenCounter,
    loaded: int,
    answer: int,
) -> None:
    """Only what surely fits the loaded window (its UTF-8 bytes alone say so, whatever the
    tokenizer) goes to Ollama's OpenAI endpoint as it came. Everything else goes to /api/chat
    with `truncate: false`, so that a count that fell short is refused by Ollama, never cut:
    with the window sized to it (`overflow: native`), or with the loaded one after the proxy's
    own check (`refuse`)."""
    record = exchange.decision.upstream
    assert record is not None
    name = full_name(exchange.model or "")
    raised = services.introspection.raised_num_ctx.get(name)
    bound = await bound_of(exchange.messages)
    surely = bound is not None and bound + answer <= loaded
    asked = record.asked_num_ctx
    if surely and raised is None:
        record.note = "surely within the loaded window: sent to the OpenAI endpoint as it came"
        if asked is not None:
            record.dropped_options["options.num_ctx"] = (
                "not needed: the prompt and the answer surely fit the window the model is "
                "loaded with (and Ollama's OpenAI endpoint takes no options)"
            )
        return
    tokens = bound if surely else await prompt_tokens(exchange, counter, 0)
    assert tokens is not None
    record.prompt_tokens = tokens
    window = facts.window
    if services.settings.upstream.ollama.overflow == "refuse":
        if tokens + answer > loaded:
            raise WindowTooSmall(tokens, answer, loaded, facts)
        ceiling = max(loaded, window.running or 0, raised or 0)
    else:
        ceiling = max(window.tokens or loaded, loaded)
    # Never below what the model runs with now or was asked for before: that would reload it.
    floor = min(max(loaded, window.running or 0, raised or 0), ceiling)
    # A caller's own window is a wish within the same bounds and steps as the proxy's sizes.
    wanted = max(tokens + answer, min(asked, ceiling) if asked is not None else 0)
    num_ctx = num_ctx_for(wanted, floor=floor, ceiling=ceiling)
    if num_ctx is None:
        raise WindowTooSmall(tokens, answer, ceiling, facts)
    if num_ctx > loaded:
        services.introspection.raised_num_ctx[name] = num_ctx
    num_predict = None if answer_budget(exchange.body) else num_ctx - tokens
    options = exchange.body.get("stream_options")
    include_usage = isinstance(options, dict) and bool(options.get("include_usage"))

    def learnt(native: NativeAnswer) -> None:
        record.upstream_prompt_tokens = native.prompt_tokens
        if native.prompt_tokens is not None and native.prompt_tokens >= num_ctx - 1:
            # Ollama before 0.12.6 ignores truncate: false; a prompt that filled the window
            # was most likely cut to it.
            warning = f"Ollama evaluated {native.prompt_tokens} prompt tokens, its whole window"
            exchange.decision.warnings.append(warning + ": the prompt may have been cut")
            exchange.response_headers["X-Enrich-Warnings"] = warning
            log.warning("ollama may have cut the prompt", num_ctx=num_ctx, model=name)

    exchange.body = native_chat_request(
        exchange.body,
        num_ctx=num_ctx,
        num_predict=num_predict,
        truncate_field=honours_truncate(facts.kind.version),
    )
    exchange.upstream_path = "/api/chat"
    exchange.response_converter = OllamaChatConverter(
        include_usage=include_usage, on_done=learnt, hint=window.hint
    )
    record.route = "native"
    record.num_ctx = num_ctx
    if num_ctx > loaded:
        reason = f"the prompt does not fit the {loaded}-token window Ollama runs the model with"
    elif raised is not None and surely:
        reason = "the window asked for before (a change would reload the model)"
    else:
        reason = "only Ollama's own count can tell whether it fits: it refuses, never cuts"
    record.note = f"sent to /api/chat with options.num_ctx {num_ctx}: {reason}"
    if asked is not None and asked > ceiling:
        limits = (
            f"the window the model runs with ({ceiling}, upstream.ollama.overflow: refuse)"
            if services.settings.upstream.ollama.overflow == "refuse"
            else f"the model's trained window ({window.trained or 'unknown'}) and "
            f"upstream.ollama.max_num_ctx ({services.settings.upstream.ollama.max_num_ctx})"
        )
        record.note += f"; the caller's options.num_ctx {asked} bounded by {limits}"


async def _textgen(
    exchange: Exchange, counter: TokenCounter, facts: ModelFacts, answer: int
) -> None:
    """text-generation-webui keeps the last `truncation_length - max_tokens` tokens of a prompt
    (modules/text_generation.py) and says nothing: the proxy sets `truncation_length` so that
    what it sends is never cut — the known window, or the prompt's own size."""
    record = exchange.decision.upstream
    assert record is not None
    window = facts.window.tokens
    tokens = await prompt_tokens(exchange, counter, 0)
    record.prompt_tokens = tokens
    if tokens is None:
        return
    if window is not None and tokens + answer > window:
        raise WindowTooSmall(tokens, answer, window, facts)
    if "truncation_length" not in exchange.body:
        exchange.body["truncation_length"] = window or tokens + answer
        record.note = f"truncation_length {exchange.body['truncation_length']} sent"
