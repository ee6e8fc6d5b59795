"""A follow-up's searches: whether it is asked to be rewritten, what became of its standalone
question, and the texts its conversation gives, led by the rewrite or beside it (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from proxy.config import HistorySettings, RewriteSettings
from proxy.retrieval.history import (
    HistoryRule,
    SearchText,
    Turn,
    led_by_rewrite,
    search_texts,
)
from proxy.retrieval.rewriter import Rewrite
from proxy.retrieval.standalone import (
    FAILED,
    FOLLOW_UP_WORDS,
    NOT_NEEDED,
    OFF,
    REFUSED_OUTCOME,
    REJECTED,
    REWRITTEN,
    TIMED_OUT,
    UNCHANGED,
    Leaning,
    StandaloneQuestion,
    leans_on_history,
)
from proxy.retrieval.standalone_answer import REFUSED


def rewrite_gate(
    question: str, earlier: Sequence[Turn], enabled: bool, every: bool = False
) -> StandaloneQuestion | Leaning | None:
    """Before any call: None for a request that is no follow-up (no earlier user question in
    `earlier`, the turns before it: searched as before, nothing said); why no standalone
    question is asked for; else what the follow-up leans on (`every`: retrieval.rewrite.gate
    every, each follow-up is asked about, leaning or not)."""
    if not any(turn.role == "user" for turn in earlier):
        return None
    if not enabled:
        return StandaloneQuestion(OFF, "retrieval.rewrite.enabled is false")
    if len(question.split()) > FOLLOW_UP_WORDS:
        return StandaloneQuestion(NOT_NEEDED, f"over {FOLLOW_UP_WORDS} words: searched as written")
    leaning = leans_on_history(question, earlier)
    if every and not leaning.needed:
        return Leaning(True, f"a follow-up ({leaning.why}; retrieval.rewrite.gate: every)")
    if not leaning.needed:
        return StandaloneQuestion(NOT_NEEDED, leaning.why)
    return leaning


def standalone_outcome(
    found: Rewrite,
    guarded: tuple[str, int] | None,
    question: str,
    settings: RewriteSettings,
    *,
    why: str,
    model: str | None,
    server: str,
) -> StandaloneQuestion:
    """The call's answer as searched, or why there is none: `guarded` is its text as the guard
    left it (it comes from a model that read the conversation) and the changes made."""
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
    if guarded is None:
        return replace(asked, outcome=REFUSED_OUTCOME) if found.error == REFUSED else asked
    text = " ".join(guarded[0].split())
    asked = replace(asked, neutralised=guarded[1])
    if not text or text.casefold() == question.strip().casefold():
        return replace(asked, outcome=UNCHANGED, why="the model gave the question back")
    return replace(asked, outcome=REWRITTEN, why=why, text=text, weight=settings.weight)


def history_rule(settings: HistorySettings) -> HistoryRule:
    """`retrieval.history` as the history search reads it."""
    return HistoryRule(
        settings.turns,
        settings.weight,
        settings.decay,
        settings.reply,
        settings.terms,
        settings.term_count,
        lean=settings.lean,
        near=settings.near,
        reply_pointing=settings.reply_pointing,
        continuing=settings.continuing,
    )


def conversation_texts(
    question: str,
    earlier: Sequence[Turn],
    rule: HistoryRule,
    standalone: StandaloneQuestion | None,
    lead: bool,
) -> list[SearchText]:
    """What the request's documents are searched for: the question, and the question with
    its conversation's earlier questions and last answer (`earlier`, the turns before it;
    retrieval.history); with the model's standalone question, that too, beside them or leading
    them (`lead`: retrieval.rewrite.lead)."""
    rewrite = standalone.search if standalone is not None else None
    if rewrite is None:
        return search_texts(question, earlier, rule)
    if lead:
        return led_by_rewrite(question, rewrite.text, earlier, rule, rewrite.weight)
    return [*search_texts(question, earlier, rule), rewrite]
