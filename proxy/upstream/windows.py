"""A model's context window where servers state it alike: the model list, or nowhere."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar, cast

from proxy.config import Settings
from proxy.upstream.client import UpstreamClient
from proxy.upstream.facts import ContextWindow, Detection

T = TypeVar("T")

UNKNOWN = "unknown"


class KindMemory:
    """What a kind learns once per upstream and keeps (Ollama's default window, say): one
    object of each type, made on first use."""

    def __init__(self) -> None:
        self._kept: dict[type[Any], Any] = {}

    def of(self, make: type[T]) -> T:
        if make not in self._kept:
            self._kept[make] = make()
        return cast(T, self._kept[make])


@dataclass(frozen=True)
class WindowAsk:
    """What a kind's window learner is asked with."""

    upstream: UpstreamClient
    model: str | None
    settings: Settings
    found: Detection  # the kind, as it was found (its version, say)
    memory: KindMemory  # kept per upstream


def refused(status: int, what: str) -> ContextWindow:
    """The upstream wants a key for `what`: unknown for now, asked again next time."""
    return ContextWindow(None, f"{UNKNOWN} (the upstream answered {status} to {what})", keep=False)


def positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def card_of(listing: Any, model: str | None, key: str = "id") -> dict[str, Any] | None:
    """The model's card in a list of cards (`data`), else the first one."""
    cards = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(cards, list):
        return None
    dicts = [c for c in cards if isinstance(c, dict)]
    return next((c for c in dicts if c.get(key) == model), dicts[0] if dicts else None)


async def from_listing(asked: WindowAsk) -> ContextWindow:
    """`GET /v1/models`: llama.cpp's `meta.n_ctx`, vLLM's and SGLang's `max_model_len`
    (srt/entrypoints/openai/protocol.py `ModelCard`), OpenRouter's `top_provider.context_length`
    and `context_length`, other hosted APIs' `context_length` / `context_window` /
    `max_context_length`."""
    upstream, model, found = asked.upstream, asked.model, asked.found
    status, listing = await upstream.get_json("/v1/models")
    if status in (401, 403):
        return refused(status, "GET /v1/models")
    card = card_of(listing, model) if status == 200 else None
    if card is None:
        return ContextWindow(None, UNKNOWN)
    meta = card.get("meta")
    if isinstance(meta, dict) and positive_int(meta.get("n_ctx")):
        return ContextWindow(meta["n_ctx"], "llamacpp /v1/models meta.n_ctx")
    if positive_int(card.get("max_model_len")):
        name = "sglang" if found.kind == "sglang" else "vllm"
        return ContextWindow(card["max_model_len"], f"{name} /v1/models max_model_len")
    top = card.get("top_provider")
    if isinstance(top, dict) and positive_int(top.get("context_length")):
        return ContextWindow(top["context_length"], "/v1/models top_provider.context_length")
    for key in ("context_length", "context_window", "max_context_length"):
        if positive_int(card.get(key)):
            return ContextWindow(card[key], f"/v1/models {key}")
    return ContextWindow(None, UNKNOWN)


async def unpublished(asked: WindowAsk) -> ContextWindow:
    """Servers with no endpoint for the window (text-generation-webui: `/v1/internal/model/
    info` has the model's name only; llama-cpp-python: none)."""
    found = asked.found
    return ContextWindow(
        None,
        f"{UNKNOWN} ({found.kind} does not publish its window: set models.<name>.context_length)",
        exact=False,
    )
