"""LM Studio: its REST API (/api/v1, /api/v0) says the loaded window, sight and tools."""

from __future__ import annotations

from typing import Any

from proxy.upstream.client import UpstreamClient
from proxy.upstream.facts import (
    Abilities,
    ContextWindow,
    Fact,
    Sight,
    both_unknown,
    unknown,
)
from proxy.upstream.image_cost import guessed
from proxy.upstream.kinds.profile import Body, Probe, ServerKind, as_dict
from proxy.upstream.windows import UNKNOWN, WindowAsk, card_of, positive_int, refused


def lmstudio_v1_models(body: Body) -> bool:
    """LM Studio ≥ 0.4 `GET /api/v1/models` (lmstudio-ai/docs 1_developer/2_rest/list.md):
    `{"models": [{"key", "loaded_instances", "max_context_length", ...}]}`."""
    models = as_dict(body).get("models")
    return isinstance(models, list) and any(
        isinstance(m, dict) and "key" in m and "max_context_length" in m for m in models
    )


def lmstudio_v0_models(body: Body) -> bool:
    """LM Studio ≥ 0.3.6 `GET /api/v0/models` (1_developer/2_rest/endpoints.md): OpenAI's list
    with `state` ("loaded"/"not-loaded") and `max_context_length` on each model."""
    data = as_dict(body).get("data")
    return isinstance(data, list) and any(
        isinstance(m, dict) and "state" in m and "max_context_length" in m for m in data
    )


async def window(asked: WindowAsk) -> ContextWindow:
    """LM Studio's loaded window (v1 `loaded_instances[].config.context_length`, v0
    `loaded_context_length`) and the model's maximum (`max_context_length`)."""
    upstream, model = asked.upstream, asked.model
    status, listing = await upstream.get_json("/api/v1/models")
    if status == 200 and isinstance(listing, dict) and isinstance(listing.get("models"), list):
        cards = {"data": listing["models"]}
        card = card_of(cards, model, "key")
        loaded = None
        if card is not None:
            for instance in card.get("loaded_instances") or []:
                config = instance.get("config") if isinstance(instance, dict) else None
                if isinstance(config, dict) and positive_int(config.get("context_length")):
                    loaded = config["context_length"]
                    break
        return _lmstudio_window(card, loaded, "/api/v1/models loaded_instances.config")
    status, listing = await upstream.get_json("/api/v0/models")
    if status in (401, 403):
        return refused(status, "GET /api/v0/models")
    card = card_of(listing, model) if status == 200 else None
    loaded = positive_int(card.get("loaded_context_length")) if card is not None else None
    return _lmstudio_window(card, loaded, "/api/v0/models loaded_context_length")


def _lmstudio_window(card: dict[str, Any] | None, loaded: int | None, where: str) -> ContextWindow:
    trained = positive_int(card.get("max_context_length")) if card is not None else None
    # 0.3 (the v0 API alone) answers a longer prompt with nothing (lmstudio-bug-tracker #2339);
    # 0.4 (the v1 API) refuses it, with a 400 or an `event: error` frame (#2322).
    answers = "with nothing" if where.startswith("/api/v0") else "with an error, or nothing"
    hint = (
        f"LM Studio runs the model with a {loaded}-token window and answers a longer prompt "
        f"{answers}; load it with a larger context length (lms load --context-length)"
    )
    if loaded is not None:
        return ContextWindow(
            loaded,
            f"lmstudio: loaded {loaded} ({where}.context_length), max {trained}",
            loaded=loaded,
            trained=trained,
            hint=hint,
        )
    # Not loaded: LM Studio loads it on the first request with its own default context,
    # which no endpoint states. Asked again next time.
    return ContextWindow(
        None,
        f"{UNKNOWN} (lmstudio: not loaded yet, max {trained} from max_context_length)",
        exact=False,
        keep=False,
        trained=trained,
        hint=hint,
    )


def lmstudio_card(listing: Any, key: str, model: str | None) -> dict[str, Any] | None:
    cards = listing.get(key) if isinstance(listing, dict) else None
    if not isinstance(cards, list):
        return None
    dicts = [card for card in cards if isinstance(card, dict)]
    if not model:  # none named: the one model listed answers, if there is only one
        return dicts[0] if len(dicts) == 1 else None
    return next((card for card in dicts if model in (card.get("key"), card.get("id"))), None)


async def sight(upstream: UpstreamClient, model: str | None) -> Sight:
    """`GET /api/v1/models` (0.4+) gives each model's `capabilities.vision`; before
    that, `GET /api/v0/models` gives `type: vlm` for a vision model (lmstudio-ai/docs
    1_developer/2_rest). Costs estimated from the model's name."""
    cost = guessed("", model or "")
    status, listing = await upstream.get_json("/api/v1/models")
    card = lmstudio_card(listing, "models", model) if status == 200 else None
    if card is not None and isinstance(card.get("capabilities"), dict):
        if card["capabilities"].get("vision") is True:
            return Sight(True, "LM Studio /api/v1/models capabilities.vision", cost)
        return Sight(False, "LM Studio /api/v1/models capabilities.vision is false", cost)
    status, listing = await upstream.get_json("/api/v0/models")
    card = lmstudio_card(listing, "data", model) if status == 200 else None
    if card is None:
        return Sight(False, f"LM Studio does not list the model ({status})", cost, keep=False)
    if card.get("type") == "vlm":
        return Sight(True, "LM Studio /api/v0/models type: vlm", cost)
    return Sight(False, f"LM Studio /api/v0/models type: {card.get('type')}", cost)


_LMSTUDIO_SILENT = unknown("LM Studio does not say whether the model has a chat template")


async def abilities(upstream: UpstreamClient, model: str | None) -> Abilities:
    """`GET /api/v1/models` (0.4+): `capabilities.trained_for_tool_use`; `GET
    /api/v0/models`: `capabilities: ["tool_use"]`. LM Studio offers every other model a default
    tool prompt of its own, which it was not trained for. Neither list says whether a model has
    a chat template; a model trained for tool use is instruction-tuned."""
    status, listing = await upstream.get_json("/api/v1/models")
    card = lmstudio_card(listing, "models", model) if status == 200 else None
    if card is not None and isinstance(card.get("capabilities"), dict):
        trained = card["capabilities"].get("trained_for_tool_use")
        if trained is True:
            return Abilities(
                Fact(True, False, "LM Studio: trained for tool use, so instruction-tuned"),
                Fact(True, True, "LM Studio /api/v1/models capabilities.trained_for_tool_use"),
            )
        if trained is False:
            source = (
                "LM Studio /api/v1/models capabilities.trained_for_tool_use is false "
                "(LM Studio's default tool prompt only)"
            )
            return Abilities(_LMSTUDIO_SILENT, Fact(False, True, source))
    status, listing = await upstream.get_json("/api/v0/models")
    card = lmstudio_card(listing, "data", model) if status == 200 else None
    if card is None:
        return both_unknown(f"LM Studio does not list the model ({status})")
    instruct = _LMSTUDIO_SILENT
    if card.get("type") == "embeddings":
        instruct = Fact(False, True, "LM Studio /api/v0/models type: embeddings")
    capabilities = card.get("capabilities")
    if not isinstance(capabilities, list):
        return Abilities(instruct, unknown("LM Studio /api/v0/models names no capabilities"))
    if "tool_use" in capabilities:
        tools: Fact[bool | None] = Fact(
            True, True, "LM Studio /api/v0/models capabilities: tool_use"
        )
        if instruct.value is None:
            instruct = Fact(True, False, "LM Studio: trained for tool use, so instruction-tuned")
        return Abilities(instruct, tools)
    return Abilities(instruct, Fact(False, True, "LM Studio /api/v0/models: no tool_use"))


PROFILE = ServerKind(
    "lmstudio",
    "LM Studio",
    # lmstudio-bug-tracker #2339: a prompt over the loaded context gives a 200 with no content
    # (0.3); 0.4 answers 400, or streamed a 200 and an `event: error` frame (#2322).
    truncates=True,
    error_frames=True,
    probes=(
        Probe("lmstudio", "GET", "/api/v1/models", lmstudio_v1_models),
        Probe("lmstudio", "GET", "/api/v0/models", lmstudio_v0_models),
    ),
    window=window,
    sight=sight,
    abilities=abilities,
)
