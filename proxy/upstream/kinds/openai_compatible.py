"""A hosted OpenAI-compatible API whose model list states its models' windows."""

from __future__ import annotations

from typing import Any

from proxy.upstream.kinds.profile import ServerKind
from proxy.upstream.windows import from_listing

# Context windows in OpenAI-style model lists of hosted APIs, by field.
LISTING_WINDOW_FIELDS = ("context_length", "context_window", "max_context_length", "max_model_len")


def lists(cards: list[dict[str, Any]]) -> bool:
    return any(isinstance(card.get(key), int) for card in cards for key in LISTING_WINDOW_FIELDS)


PROFILE = ServerKind(
    "openai-compatible",
    "an OpenAI-compatible API",
    truncates=False,
    lists=lists,
    window=from_listing,
)
