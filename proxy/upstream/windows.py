"""Each kind of server's context window for a model, from the endpoint and field that state it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from proxy.config import Settings, UpstreamKind
from proxy.upstream.client import UpstreamClient
from proxy.upstream.facts import ContextWindow, Detection
from proxy.upstream.ollama.api import default_num_ctx, loaded_context, read_show
from proxy.upstream.ollama.default_window import DefaultWindow, depends_on_gpu

Learner = Callable[[UpstreamClient, str | None, Settings, Detection], Awaitable[ContextWindow]]

UNKNOWN = "unknown"


def refused(status: int, what: str) -> ContextWindow:
    """The upstream wants a key for `what`: unknown for now, asked again next time."""
    return ContextWindow(None, f"{UNKNOWN} (the upstream answered {status} to {what})", keep=False)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _card(listing: Any, model: str | None, key: str = "id") -> dict[str, Any] | None:
    """The model's card in a list of cards (`data`), else the first one."""
    cards = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(cards, list):
        return None
    dicts = [c for c in cards if isinstance(c, dict)]
    return next((c for c in dicts if c.get(key) == model), dicts[0] if dicts else None)


async def llamacpp(
    upstream: UpstreamClient, model: str | None, settings: Settings, found: Detection
) -> ContextWindow:
    # /props default_generation_settings.n_ctx is the per-slot context, the one that applies.
    status, props = await upstream.get_json("/props")
    generation = props.get("default_generation_settings") if isinstance(props, dict) else None
    n_ctx = _int(generation.get("n_ctx")) if isinstance(generation, dict) else None
    if status == 200 and n_ctx:
        return ContextWindow(n_ctx, "llamacpp /props n_ctx")
    return await from_listing(upstream, model, settings, found)


async def from_listing(
    upstream: UpstreamClient, model: str | None, settings: Settings, found: Detection
) -> ContextWindow:
    """`GET /v1/models`: llama.cpp's `meta.n_ctx`, vLLM's and SGLang's `max_model_len`
    (srt/entrypoints/openai/protocol.py `ModelCard`), OpenRouter's `top_provider.context_length`
    and `context_length`, other hosted APIs' `context_length` / `context_window` /
    `max_context_length`."""
    status, listing = await upstream.get_json("/v1/models")
    if status in (401, 403):
        return refused(status, "GET /v1/models")
    card = _card(listing, model) if status == 200 else None
    if card is None:
        return ContextWindow(None, UNKNOWN)
    meta = card.get("meta")
    if isinstance(meta, dict) and _int(meta.get("n_ctx")):
        return ContextWindow(meta["n_ctx"], "llamacpp /v1/models meta.n_ctx")
    if _int(card.get("max_model_len")):
        name = "sglang" if found.kind == "sglang" else "vllm"
        return ContextWindow(card["max_model_len"], f"{name} /v1/models max_model_len")
    top = card.get("top_provider")
    if isinstance(top, dict) and _int(top.get("context_length")):
        return ContextWindow(top["context_length"], "/v1/models top_provider.context_length")
    for key in ("context_length", "context_window", "max_context_length"):
        if _int(card.get(key)):
            return ContextWindow(card[key], f"/v1/models {key}")
    return ContextWindow(None, UNKNOWN)


async def ollama(
    upstream: UpstreamClient,
    model: str | None,
    settings: Settings,
    found: Detection,
    default_window: DefaultWindow | None = None,
) -> ContextWindow:
    """The window Ollama runs the model with for a request that sets none, as its OpenAI
    endpoint's are (`loaded`), and the model's trained one (`/api/show`). Planning uses the
    trained one, capped by `upstream.ollama.max_num_ctx`, when the proxy may ask for it
    (`overflow: native`), else the loaded one.

    `/api/ps` says what the model runs with right now (`running`), but not whether a request
    that sets no num_ctx would keep it: a model loaded with a num_ctx of someone's is loaded
    again with the default for such a request (server/sched.go needsReload). So the loaded
    window is the Modelfile's num_ctx, else the server's default as the operator states it
    (`upstream.ollama.context_length`), else the server's default: learnt from 0.15.5, where it
    depends on the GPUs' memory (`default_window`), else the smallest it can be."""
    if not model:
        return ContextWindow(None, f"{UNKNOWN} (Ollama needs a model name)", keep=False)
    status, shown = await upstream.post_json("/api/show", {"model": model})
    if status in (401, 403):
        return refused(status, "POST /api/show")
    if status != 200:
        return ContextWindow(None, f"{UNKNOWN} (Ollama /api/show answered {status})", keep=False)
    show = read_show(shown)
    status, processes = await upstream.get_json("/api/ps")
    running = loaded_context(processes, model) if status == 200 else None
    options = settings.upstream.ollama
    if show.modelfile_num_ctx:
        loaded, loaded_source, loaded_exact = show.modelfile_num_ctx, "Modelfile num_ctx", True
    elif options.context_length:
        loaded, loaded_source = options.context_length, "upstream.ollama.context_length"
        loaded_exact = True
    else:
        learnt = None
        if default_window is not None and depends_on_gpu(found.version):
            learnt = await default_window.learn(upstream, model, show.trained, running)
        if learnt is not None:
            loaded, loaded_source = learnt
            loaded_exact = True
            running = running or loaded  # loaded to learn it, if it was not
        else:
            loaded = default_num_ctx(found.version)
            loaded_source = f"the smallest default of Ollama {found.version or '?'}"
            if depends_on_gpu(found.version):
                loaded_source += (
                    " (4096, 32768 or 262144 by the GPUs' memory: not learnt, the model was "
                    "loaded already or could not be loaded)"
                )
            loaded_exact = False
    if show.trained is not None:
        loaded = min(loaded, show.trained)  # Ollama never runs a model past its trained window
    trained_text = (
        f"trained {show.trained} (/api/show model_info.{show.architecture}.context_length)"
        if show.trained
        else "trained window unknown"
    )
    now = f", running with {running} (/api/ps context_length)" if running else ""
    described = f"loaded {loaded} ({loaded_source}), {trained_text}{now}"
    hint = (
        f"Ollama runs {model} with a {loaded}-token window and would cut a longer prompt "
        "without saying so; set OLLAMA_CONTEXT_LENGTH for `ollama serve` (and "
        "upstream.ollama.context_length) or PARAMETER num_ctx in the model's Modelfile"
    )
    if options.overflow == "native":
        reachable = max(min(show.trained or loaded, options.max_num_ctx), loaded)
        return ContextWindow(
            reachable,
            f"ollama: {described}, capped at {options.max_num_ctx} (upstream.ollama.max_num_ctx)",
            exact=show.trained is not None or loaded_exact,
            loaded=loaded,
            trained=show.trained,
            running=running,
            hint=hint + f", or raise upstream.ollama.max_num_ctx ({options.max_num_ctx})",
        )
    return ContextWindow(
        loaded,
        f"ollama: {described}",
        exact=loaded_exact,
        loaded=loaded,
        trained=show.trained,
        running=running,
        hint=hint + ", or let the proxy ask for it (upstream.ollama.overflow: native)",
    )


async def lmstudio(
    upstream: UpstreamClient, model: str | None, settings: Settings, found: Detection
) -> ContextWindow:
    """LM Studio's loaded window (v1 `loaded_instances[].config.context_length`, v0
    `loaded_context_length`) and the model's maximum (`max_context_length`)."""
    status, listing = await upstream.get_json("/api/v1/models")
    if status == 200 and isinstance(listing, dict) and isinstance(listing.get("models"), list):
        cards = {"data": listing["models"]}
        card = _card(cards, model, "key")
        loaded = None
        if card is not None:
            for instance in card.get("loaded_instances") or []:
                config = instance.get("config") if isinstance(instance, dict) else None
                if isinstance(config, dict) and _int(config.get("context_length")):
                    loaded = config["context_length"]
                    break
        return _lmstudio_window(card, loaded, "/api/v1/models loaded_instances.config")
    status, listing = await upstream.get_json("/api/v0/models")
    if status in (401, 403):
        return refused(status, "GET /api/v0/models")
    card = _card(listing, model) if status == 200 else None
    loaded = _int(card.get("loaded_context_length")) if card is not None else None
    return _lmstudio_window(card, loaded, "/api/v0/models loaded_context_length")


def _lmstudio_window(card: dict[str, Any] | None, loaded: int | None, where: str) -> ContextWindow:
    trained = _int(card.get("max_context_length")) if card is not None else None
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


async def koboldcpp(
    upstream: UpstreamClient, model: str | None, settings: Settings, found: Detection
) -> ContextWindow:
    # koboldcpp.py: `/api/extra/true_max_context_length` → {"value": maxctx} (--contextsize).
    status, body = await upstream.get_json("/api/extra/true_max_context_length")
    value = _int(body.get("value")) if isinstance(body, dict) else None
    if status == 200 and value:
        return ContextWindow(
            value,
            "koboldcpp /api/extra/true_max_context_length",
            hint=f"KoboldCpp runs with a {value}-token window and would cut the front of a longer "
            "prompt without saying so; relaunch it with a larger --contextsize",
        )
    return ContextWindow(None, UNKNOWN, keep=status not in (401, 403))


async def tabbyapi(
    upstream: UpstreamClient, model: str | None, settings: Settings, found: Detection
) -> ContextWindow:
    # endpoints/core/router.py `GET /v1/model` → ModelCard.parameters.max_seq_len.
    status, card = await upstream.get_json("/v1/model")
    parameters = card.get("parameters") if isinstance(card, dict) else None
    size = _int(parameters.get("max_seq_len")) if isinstance(parameters, dict) else None
    if status == 200 and size:
        return ContextWindow(size, "tabbyapi /v1/model parameters.max_seq_len")
    if status in (401, 403):
        return refused(status, "GET /v1/model")
    return ContextWindow(None, UNKNOWN)


async def tgi(
    upstream: UpstreamClient, model: str | None, settings: Settings, found: Detection
) -> ContextWindow:
    # router/src/lib.rs `Info`: max_total_tokens (prompt + answer), max_input_tokens (prompt).
    status, info = await upstream.get_json("/info")
    total = _int(info.get("max_total_tokens")) if isinstance(info, dict) else None
    if status == 200 and total:
        return ContextWindow(total, "tgi /info max_total_tokens")
    return ContextWindow(None, UNKNOWN, keep=status not in (401, 403))


async def unpublished(
    upstream: UpstreamClient, model: str | None, settings: Settings, found: Detection
) -> ContextWindow:
    """Servers with no endpoint for the window (text-generation-webui: `/v1/internal/model/
    info` has the model's name only; llama-cpp-python: none)."""
    return ContextWindow(
        None,
        f"{UNKNOWN} ({found.kind} does not publish its window: set models.<name>.context_length)",
        exact=False,
    )


LEARNERS: dict[UpstreamKind, Learner] = {
    "llamacpp": llamacpp,
    "vllm": from_listing,
    "sglang": from_listing,
    "ollama": ollama,
    "lmstudio": lmstudio,
    "tgi": tgi,
    "koboldcpp": koboldcpp,
    "tabbyapi": tabbyapi,
    "textgen": unpublished,
    "llama-cpp-python": unpublished,
    "openrouter": from_listing,
    "openai-compatible": from_listing,
    "other": from_listing,
}


async def learn_window(
    upstream: UpstreamClient,
    model: str | None,
    settings: Settings,
    found: Detection,
    ollama_default: DefaultWindow | None = None,
) -> ContextWindow:
    """`model`'s window as the server of kind `found` states it; `ollama_default` is what was
    learnt of an Ollama's default window so far (one per upstream)."""
    if found.kind == "ollama":
        return await ollama(upstream, model, settings, found, ollama_default)
    return await LEARNERS[found.kind](upstream, model, settings, found)
