"""Stage: the prompt as sent fits the window the server really runs with, or takes a door where
it does (Ollama's native API), or is refused with how to fix it: never cut upstream unseen."""

from __future__ import annotations

from typing import Any

import structlog

from proxy.errors import BadRequest
from proxy.pipeline.decision import UpstreamRecord
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.services import Services
from proxy.pipeline.stages.adapt import answer_budget, answer_room, token_bound
from proxy.upstream.facts import ModelFacts
from proxy.upstream.kinds import traits
from proxy.upstream.ollama.answer import NativeAnswer, OllamaChatConverter
from proxy.upstream.ollama.api import full_name, honours_truncate
from proxy.upstream.ollama.native import native_chat_request
from proxy.upstream.ollama.sizing import num_ctx_for
from proxy.upstream.tokens import TokenCounter

log = structlog.get_logger(__name__)

# What Ollama counts an image as when it fits a conversation to the window (server/prompt.go
# imageNumTokens); text-only counts cannot see images.
IMAGE_TOKENS = 768


class WindowTooSmall(BadRequest):
    """The prompt does not fit the window the server runs the model with, and the server would
    cut it without an error (400)."""

    def __init__(self, tokens: int, answer: int, window: int, facts: ModelFacts) -> None:
        about = "" if facts.tokenizer.exact else "about "
        super().__init__(
            f"the prompt needs {about}{tokens} tokens and the answer {answer} more, but "
            f"{traits(facts.kind.kind).label} runs this model with a window of {window} tokens "
            f"and would cut the prompt without saying so; {facts.window.hint or 'make it larger'}",
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
    bound = token_bound(exchange.messages)
    if bound is not None and bound <= limit:
        return None
    images = _images(exchange.messages)
    return await counter.count_messages(exchange.messages) + images * IMAGE_TOKENS


def _record(facts: ModelFacts) -> UpstreamRecord:
    window = facts.window.fact()
    return UpstreamRecord(
        kind=facts.kind.kind,
        kind_source=facts.kind.source,
        window=window.value,
        window_exact=window.exact,
        window_source=window.source,
        tokenizer=facts.tokenizer.value,
        tokenizer_exact=facts.tokenizer.exact,
        tokenizer_source=facts.tokenizer.source,
        loaded_window=facts.window.loaded,
    )


async def fit_window(exchange: Exchange, services: Services) -> None:
    introspection = services.introspection
    facts = await introspection.facts(exchange.model)
    record = exchange.decision.upstream = _record(facts)
    kind = facts.kind.kind
    if kind == "openrouter" and "transforms" not in exchange.body:
        # OpenRouter's middle-out transform cuts the middle of a prompt over the window when
        # on (opt-in, and the default for models of 8k or less in its docs): never.
        exchange.body["transforms"] = []
    if not traits(kind).truncates:
        return
    answer = answer_room(exchange.body, kind)
    record.answer_tokens = answer
    served = facts.window.loaded or facts.window.tokens
    counter = await introspection.counter(exchange.model)
    if kind == "textgen":
        await _textgen(exchange, counter, facts, answer)
        return
    if served is None:
        record.note = "the window is unknown: the prompt could not be checked against it"
        exchange.decision.warnings.append(
            f"{traits(kind).label} does not say its window for this model; "
            "a prompt longer than it may be cut (set models.<name>.context_length)"
        )
        return
    tokens = await prompt_tokens(exchange, counter, served - answer)
    record.prompt_tokens = tokens
    fits = tokens is None or tokens + answer <= served
    if kind == "ollama" and exchange.upstream_path == "/v1/chat/completions":
        raised = introspection.raised_num_ctx.get(full_name(exchange.model or ""))
        if fits and raised is None:
            return
        if services.settings.upstream.ollama.overflow == "native":
            await _ollama_native(exchange, services, facts, tokens, answer, raised)
            return
    if not fits:
        assert tokens is not None
        raise WindowTooSmall(tokens, answer, served, facts)


async def _ollama_native(
    exchange: Exchange,
    services: Services,
    facts: ModelFacts,
    tokens: int | None,
    answer: int,
    raised: int | None,
) -> None:
    """Send the request to Ollama's /api/chat with a window sized to it."""
    record = exchange.decision.upstream
    assert record is not None
    window = facts.window
    loaded = window.loaded or 0
    if tokens is None:
        # It fits the loaded window; the window was raised before: keep it, no reload.
        tokens = token_bound(exchange.messages) or loaded
    ceiling = max(window.tokens or loaded, loaded)
    num_ctx = num_ctx_for(tokens + answer, floor=max(loaded, raised or 0), ceiling=ceiling)
    if num_ctx is None:
        raise WindowTooSmall(tokens, answer, ceiling, facts)
    model = exchange.model or ""
    services.introspection.raised_num_ctx[full_name(model)] = num_ctx
    num_predict = None if answer_budget(exchange.body) else num_ctx - tokens
    options = exchange.body.get("stream_options")
    include_usage = isinstance(options, dict) and bool(options.get("include_usage"))

    def learnt(answer: NativeAnswer) -> None:
        record.upstream_prompt_tokens = answer.prompt_tokens
        if answer.prompt_tokens is not None and answer.prompt_tokens >= num_ctx - 1:
            # Ollama before 0.12.6 ignores truncate: false; a prompt that filled the window
            # was most likely cut to it.
            warning = f"Ollama evaluated {answer.prompt_tokens} prompt tokens, its whole window"
            exchange.decision.warnings.append(warning + ": the prompt may have been cut")
            exchange.response_headers["X-Enrich-Warnings"] = warning
            log.warning("ollama may have cut the prompt", num_ctx=num_ctx, model=model)

    exchange.body = native_chat_request(
        exchange.body,
        num_ctx=num_ctx,
        num_predict=num_predict,
        truncate_field=honours_truncate(facts.kind.version),
    )
    exchange.upstream_path = "/api/chat"
    exchange.response_converter = OllamaChatConverter(include_usage=include_usage, on_done=learnt)
    record.route = "native"
    record.num_ctx = num_ctx
    record.prompt_tokens = tokens
    record.note = (
        f"sent to /api/chat with options.num_ctx {num_ctx}: the prompt does not fit the "
        f"{loaded}-token window Ollama runs the model with"
        if raised is None or tokens + answer > loaded
        else f"sent to /api/chat with options.num_ctx {num_ctx}, the window asked for before"
    )


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
