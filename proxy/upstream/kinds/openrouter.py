"""OpenRouter: known by its model list; its middle-out transform is turned off."""

from __future__ import annotations

from typing import Any

from proxy.upstream.kinds.profile import Fitting, ServerKind
from proxy.upstream.windows import from_listing


def lists(cards: list[dict[str, Any]]) -> bool:
    """OpenRouter's `/v1/models` (`context_length`, `top_provider`, `pricing`, its docs' Models
    API schema)."""
    return any("top_provider" in card and "context_length" in card for card in cards)


def prepare(fitting: Fitting) -> None:
    # OpenRouter's middle-out transform cuts the middle of a prompt over the window when
    # on (opt-in, and the default for models of 8k or less in its docs): never.
    if "transforms" not in fitting.body:
        fitting.body["transforms"] = []


PROFILE = ServerKind(
    "openrouter",
    "OpenRouter",
    # Its middle-out transform cuts the middle of a prompt only when asked: the proxy sends
    # `transforms: []` so that it never does.
    truncates=False,
    lists=lists,
    window=from_listing,  # /v1/models top_provider.context_length
    prepare=prepare,
)
