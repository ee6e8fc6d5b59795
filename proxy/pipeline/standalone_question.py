"""Retrieval's hook into a conversation: the texts a question is searched with, and for a
follow-up that leans on its conversation, its standalone question written by an
instruction-tuned model and searched beside them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from proxy.pipeline.exchange import Exchange
from proxy.pipeline.file_refs import last_user_index
from proxy.pipeline.services import Services
from proxy.retrieval.follow_up import (
    conversation_texts,
    history_rule,
    rewrite_gate,
    standalone_outcome,
)
from proxy.retrieval.history import SearchText, earlier_turns
from proxy.retrieval.standalone import NOT_INSTRUCT, Leaning, StandaloneQuestion
from proxy.retrieval.standalone_answer import clean_key_words, clean_rewrite, searched_question
from proxy.retrieval.standalone_prompts import key_words_messages, rewrite_messages
from proxy.retrieval.translation import Endpoint
from proxy.upstream.abilities import AbilityIntrospection
from proxy.upstream.client import UpstreamClient
from proxy.upstream.kinds import profile


async def follow_up_searches(
    exchange: Exchange, services: Services, searching: bool
) -> tuple[StandaloneQuestion | None, list[SearchText]]:
    """What the question is searched with, its conversation's texts (retrieval.history); when
    something is searched and the question is a follow-up, its standalone question too, or why
    there is none (retrieval.rewrite). The conversation before the question is read once, and
    the one call, to the model, comes after every decision that needs none."""
    settings = services.settings.retrieval
    rewriter = services.rewriter
    question = exchange.query
    last_user = last_user_index(exchange.messages)
    earlier = earlier_turns(exchange.messages, last_user)
    enabled = settings.rewrite.enabled and rewriter is not None
    every = settings.rewrite.gate == "every"
    gate = rewrite_gate(question, earlier, enabled, every) if searching else None
    standalone = None if isinstance(gate, Leaning) else gate
    if isinstance(gate, Leaning) and rewriter is not None:
        words = settings.rewrite.ask == "words"
        messages = (key_words_messages if words else rewrite_messages)(question, earlier)
        model = settings.rewrite.model or exchange.model
        side = services.rewrite_server
        server: UpstreamClient = side.client if side is not None else services.upstream
        abilities: AbilityIntrospection = side.abilities if side is not None else services.abilities
        where = server.base_url if side is not None else "upstream"
        instruct = (await abilities.of(model)).instruct
        if instruct.value is not True:
            said = "not" if instruct.value is False else "not known to be"
            standalone = StandaloneQuestion(
                NOT_INSTRUCT,
                f"{model or 'the model'} is {said} instruction-tuned ({instruct.source})",
                model=model,
                server=where,
            )
        else:
            # Ollama's own /api/chat with the window the model runs with (its OpenAI endpoint
            # would reload it with the default), and the thinking switch where a template
            # reads it. llama.cpp keeps its prompt cache: the instruction and examples every
            # call starts with are then read once (the proxy's own cache gives one
            # conversation the same answer every time).
            found_kind = await (side.kind() if side is not None else services.introspection.kind())
            kind = profile(found_kind)
            window = None
            if kind.native_side_calls and side is None:
                window = await services.introspection.running_window(model)
            endpoint: Endpoint = "chat" if window is None else "native"
            extra: dict[str, Any] = {"options": {"num_ctx": window}} if window is not None else {}
            if window is None and kind.reads_template_kwargs:
                extra["chat_template_kwargs"] = {"enable_thinking": False}
            exchange.status("Rewriting the follow-up as a standalone question...")
            found = await rewriter.rewrite(
                server,
                messages,
                model=model,
                endpoint=endpoint,
                scope=exchange.caller.name,
                extra=extra,
                clean=clean_key_words if words else clean_rewrite,
            )
            if found.text is not None:
                kept = searched_question(question, found.text, earlier, words)
                found = replace(found, text=kept.text, error=kept.error, rejected=kept.text is None)
            guarded = None
            if found.text is not None and not found.timed_out:
                said_back = services.guarded.guard(found.text, exchange.control_tokens)
                guarded = (said_back.text, said_back.report.changes)
            standalone = standalone_outcome(
                found, guarded, question, settings.rewrite, why=gate.why, model=model, server=where
            )
    rule = history_rule(settings.history)
    texts = conversation_texts(question or " ", earlier, rule, standalone, settings.rewrite.lead)
    return standalone, texts
