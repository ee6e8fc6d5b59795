"""Retrieval's hook: a follow-up that leans on its conversation, rewritten as a standalone
question by an instruction-tuned model and searched beside what the conversation gives."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from proxy.config import UpstreamKind
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.services import Services
from proxy.retrieval.history import Turn
from proxy.retrieval.rewriter import Rewrite
from proxy.retrieval.standalone import (
    FAILED,
    FOLLOW_UP_WORDS,
    NOT_INSTRUCT,
    NOT_NEEDED,
    OFF,
    REFUSED,
    REFUSED_OUTCOME,
    REJECTED,
    REWRITTEN,
    TIMED_OUT,
    UNCHANGED,
    StandaloneQuestion,
    clean_key_words,
    clean_rewrite,
    key_words_messages,
    leans_on_history,
    rewrite_messages,
    searched_question,
)
from proxy.retrieval.translation import Endpoint
from proxy.upstream.abilities import AbilityIntrospection
from proxy.upstream.client import UpstreamClient
from proxy.upstream.kinds import profile


async def standalone_question(
    exchange: Exchange, services: Services, earlier: Sequence[Turn]
) -> StandaloneQuestion | None:
    """The follow-up's standalone question, or why there is none; None for a request that is no
    follow-up (no earlier user question in `earlier`, the turns before it): it is searched as
    before, and nothing is said."""
    if not any(turn.role == "user" for turn in earlier):
        return None
    settings = services.settings.retrieval.rewrite
    rewriter = services.rewriter
    if not settings.enabled or rewriter is None:
        return StandaloneQuestion(OFF, "retrieval.rewrite.enabled is false")
    question = exchange.query
    if len(question.split()) > FOLLOW_UP_WORDS:
        return StandaloneQuestion(NOT_NEEDED, f"over {FOLLOW_UP_WORDS} words: searched as written")
    leaning = leans_on_history(question, earlier)
    if not leaning.needed:
        return StandaloneQuestion(NOT_NEEDED, leaning.why)
    model = settings.model or exchange.model
    side = services.rewrite_server
    server: UpstreamClient = side.client if side is not None else services.upstream
    abilities: AbilityIntrospection = side.abilities if side is not None else services.abilities
    where = server.base_url if side is not None else "upstream"
    instruct = (await abilities.of(model)).instruct
    if instruct.value is not True:
        said = "not" if instruct.value is False else "not known to be"
        return StandaloneQuestion(
            NOT_INSTRUCT,
            f"{model or 'the model'} is {said} instruction-tuned ({instruct.source})",
            model=model,
            server=where,
        )
    kind = await (side.kind() if side is not None else services.introspection.kind())
    endpoint, extra = await how_to_ask(services, kind, model, side is None)
    exchange.status("Rewriting the follow-up as a standalone question...")
    words = settings.ask == "words"
    found = await rewriter.rewrite(
        server,
        (key_words_messages if words else rewrite_messages)(question, earlier),
        model=model,
        endpoint=endpoint,
        scope=exchange.caller.name,
        extra=extra,
        clean=clean_key_words if words else clean_rewrite,
    )
    if found.text is not None:
        kept = searched_question(question, found.text, earlier, words, settings.check)
        found = replace(found, text=kept.text, error=kept.error, rejected=kept.text is None)
    return outcome_of(found, exchange, services, leaning.why, model, where)


def outcome_of(
    found: Rewrite,
    exchange: Exchange,
    services: Services,
    why: str,
    model: str | None,
    server: str,
) -> StandaloneQuestion:
    """The call's answer, neutralised by the guard like document text (it comes from a model
    that read the conversation), or why there is none."""
    settings = services.settings.retrieval.rewrite
    asked = StandaloneQuestion(
        FAILED,
        found.error or "no question",
        model=model,
        server=server,
        endpoint=found.endpoint,
        seconds=found.seconds,
        cached=found.cached,
    )
    if found.timed_out:
        timeout = f"no answer within {settings.timeout_s:g} s (retrieval.rewrite.timeout_s)"
        return replace(asked, outcome=TIMED_OUT, why=timeout)
    if found.rejected:
        return replace(asked, outcome=REJECTED)
    if found.text is None:
        return replace(asked, outcome=REFUSED_OUTCOME) if found.error == REFUSED else asked
    guarded = services.guarded.guard(found.text, exchange.control_tokens)
    text = " ".join(guarded.text.split())
    asked = replace(asked, neutralised=guarded.report.changes)
    if not text or text.casefold() == exchange.query.strip().casefold():
        return replace(asked, outcome=UNCHANGED, why="the model gave the question back")
    return replace(asked, outcome=REWRITTEN, why=why, text=text, weight=settings.weight)


async def how_to_ask(
    services: Services, kind: UpstreamKind, model: str | None, upstream: bool
) -> tuple[Endpoint, dict[str, Any]]:
    """The endpoint and the fields the call adds: Ollama's own /api/chat with the window the
    model runs with (its OpenAI endpoint would reload it with the default), and the thinking
    switch where a template reads it. llama.cpp keeps its prompt cache: the instruction and
    examples every call starts with are then read once (the proxy's own cache gives one
    conversation the same answer every time)."""
    server = profile(kind)
    if server.native_side_calls and upstream:
        window = await services.introspection.running_window(model)
        if window is not None:
            return "native", {"options": {"num_ctx": window}}
    extra: dict[str, Any] = {}
    if server.reads_template_kwargs:
        extra["chat_template_kwargs"] = {"enable_thinking": False}
    return "chat", extra
