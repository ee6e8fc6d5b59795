"""choose_strategy: inject the whole documents or retrieve passages, from token counts (pure)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum


class Strategy(StrEnum):
    """How documents reach the model; `auto` is a request's way of letting the proxy choose."""

    AUTO = "auto"
    INJECT = "inject-full-content"
    RETRIEVAL = "retrieval"
    NONE = "none"


INJECT = Strategy.INJECT
RETRIEVAL = Strategy.RETRIEVAL
NONE = Strategy.NONE

# Of what is left, aim to use at most this share (LM Studio's targetContextUsePercent).
TARGET_CONTEXT_USE = 0.7


@dataclass(frozen=True)
class ContextMeasure:
    """How full the model's context already is (LM Studio's measureContextWindow)."""

    total_tokens_in_context: int
    model_context_length: int
    model_remaining_context_length: int
    context_occupied_percent: float


def measure_context(tokens_in_context: int, context_length: int) -> ContextMeasure:
    remaining = max(0, context_length - tokens_in_context)
    occupied = min(100.0, tokens_in_context / context_length * 100) if context_length else 100.0
    return ContextMeasure(tokens_in_context, context_length, remaining, occupied)


def available_tokens(measure: ContextMeasure) -> int:
    """floor(remaining * 0.7 * (1 - occupied% / 100))."""
    usage = TARGET_CONTEXT_USE * (1 - measure.context_occupied_percent / 100)
    return max(0, math.floor(measure.model_remaining_context_length * usage))


def choose_strategy(
    file_tokens: int, prompt_tokens: int, measure: ContextMeasure | None
) -> Strategy:
    """Retrieval when files and prompt exceed what is available; unknown window → retrieval."""
    if measure is None:
        return RETRIEVAL
    if file_tokens + prompt_tokens > available_tokens(measure):
        return RETRIEVAL
    return INJECT


def route(has_new_files: bool, has_old_files: bool) -> Strategy | None:
    """Which way a request goes before counting: None means `choose_strategy` decides."""
    if has_new_files:
        return None
    if has_old_files:
        return RETRIEVAL
    return NONE
