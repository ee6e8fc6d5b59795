"""Ollama: /api/show and /api/ps for the window, sight and tools; /api/chat to fit."""

from __future__ import annotations

import re
from typing import Any

import structlog

from proxy.upstream.client import UpstreamClient
from proxy.upstream.facts import (
    ESTIMATE,
    Abilities,
    ContextWindow,
    Fact,
    Sight,
    both_unknown,
    unknown,
)
from proxy.upstream.image_cost import guessed
from proxy.upstream.kinds.profile import (
    Body,
    Fitting,
    Probe,
    ServerKind,
    as_dict,
    version_at,
)
from proxy.upstream.ollama.answer import NativeAnswer, OllamaChatConverter
from proxy.upstream.ollama.api import (
    default_num_ctx,
    full_name,
    honours_truncate,
    loaded_context,
    read_show,
)
from proxy.upstream.ollama.default_window import DefaultWindow, depends_on_gpu
from proxy.upstream.ollama.native import native_chat_request, without_shared_settings
from proxy.upstream.ollama.sizing import num_ctx_for
from proxy.upstream.windows import UNKNOWN, WindowAsk, refused

log = structlog.get_logger(__name__)


def ollama_version(body: Body) -> bool:
    """Ollama `GET /api/version` (server/routes.go) → `{"version": "0.12.6"}`."""
    version = as_dict(body)
    return set(version) == {"version"} and isinstance(version["version"], str)


async def window(asked: WindowAsk) -> ContextWindow:
    """The window Ollama runs the model with for a request that sets none, as its OpenAI
    endpoint's are (`loaded`), and the model's trained one (`/api/show`). Planning uses the
    trained one, capped by `upstream.ollama.max_num_ctx`, when the proxy may ask for it
    (`overflow: native`), else the loaded one.

    `/api/ps` says what the model runs with right now (`running`), but not whether a request
    that sets no num_ctx would keep it: a model loaded with a num_ctx of someone's is loaded
    again with the default for such a request (server/sched.go needsReload). So the loaded
    window is the Modelfile's num_ctx, else the server's default as the operator states it
    (`upstream.ollama.context_length`), else the server's default: learnt from 0.15.5, where it
    depends on the GPUs' memory (kept in `memory`), else the smallest it can be."""
    upstream, model, found = asked.upstream, asked.model, asked.found
    options = asked.settings.upstream.ollama
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
    if show.modelfile_num_ctx:
        loaded, loaded_source, loaded_exact = show.modelfile_num_ctx, "Modelfile num_ctx", True
    elif options.context_length:
        loaded, loaded_source = options.context_length, "upstream.ollama.context_length"
        loaded_exact = True
    else:
        learnt = None
        if depends_on_gpu(found.version):
            learnt = await asked.memory.of(DefaultWindow).learn(
                upstream, model, show.trained, running
            )
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


async def sight(upstream: UpstreamClient, model: str | None) -> Sight:
    """`POST /api/show` lists the model's `capabilities`; `vision` is among them for a
    model with a projector (server/images.go `Capabilities`). What an image costs is not said:
    estimated from the model's name."""
    if not model:
        return Sight(False, "Ollama: no model named, so none asked about", ESTIMATE, keep=False)
    status, shown = await upstream.post_json("/api/show", {"model": model})
    cost = guessed("", model)
    if status != 200 or not isinstance(shown, dict):
        return Sight(False, f"Ollama /api/show answered {status}", cost, keep=status == 404)
    capabilities = shown.get("capabilities")
    if isinstance(capabilities, list) and "vision" in capabilities:
        return Sight(True, "Ollama /api/show capabilities: vision", cost)
    return Sight(False, "Ollama /api/show capabilities without vision", cost)


OLLAMA_NO_TEMPLATE = "{{ .Prompt }}"
"""Ollama's `template.DefaultTemplate`: the prompt as it is, for a model without a template."""


_GO_TOOLS = re.compile(r"\.Tools\b")


def ollama_instruct(shown: dict[str, Any]) -> Fact[bool | None]:
    capabilities = shown.get("capabilities")
    if isinstance(capabilities, list) and "completion" not in capabilities:
        return Fact(False, True, "Ollama /api/show capabilities without completion")
    renderer = shown.get("renderer")
    if isinstance(renderer, str) and renderer:
        return Fact(True, True, f"Ollama /api/show renderer {renderer!r}")
    template = shown.get("template")
    if not isinstance(template, str):
        return unknown("Ollama /api/show names no template")
    if template.strip() in ("", OLLAMA_NO_TEMPLATE):
        source = f"Ollama /api/show template is {OLLAMA_NO_TEMPLATE}: no chat template"
        return Fact(False, True, source)
    return Fact(True, True, "Ollama /api/show template: a chat template")


def ollama_tools(shown: dict[str, Any]) -> Fact[bool | None]:
    capabilities = shown.get("capabilities")
    if isinstance(capabilities, list):
        if "tools" in capabilities:
            return Fact(True, True, "Ollama /api/show capabilities: tools")
        return Fact(False, True, "Ollama /api/show capabilities without tools")
    template = shown.get("template")
    if isinstance(template, str):  # Ollama before 0.6.4: tools when the template uses .Tools
        if _GO_TOOLS.search(template):
            return Fact(True, True, "Ollama /api/show template uses .Tools")
        return Fact(False, True, "Ollama /api/show template does not use .Tools")
    return unknown("Ollama /api/show names neither capabilities nor template")


async def abilities(upstream: UpstreamClient, model: str | None) -> Abilities:
    """`POST /api/show`: `capabilities` lists `tools` when the model's template or
    parser takes tools (server/images.go `Capabilities`; from 0.6.4; before it, tools were taken
    exactly when the template uses `.Tools`); `template` is `{{ .Prompt }}`
    (template.DefaultTemplate) for a model without a chat template, its GGUF's chat template when
    Ollama renders that natively (0.30+, routes.go `selectedModelTemplate`); `renderer` names a
    built-in chat renderer."""
    if not model:
        return both_unknown("Ollama: no model named, so none asked about")
    status, shown = await upstream.post_json("/api/show", {"model": model})
    if status != 200 or not isinstance(shown, dict):
        return both_unknown(f"Ollama /api/show answered {status}", keep=status == 404)
    return Abilities(ollama_instruct(shown), ollama_tools(shown))


NO_WINDOW_HERE = (
    "Ollama's OpenAI endpoints take no window: the prompt is checked against the one the "
    "model is loaded with"
)


def _door(fitting: Fitting) -> bool:
    """The request may take Ollama's native /api/chat instead of its OpenAI endpoint."""
    return fitting.upstream_path == "/v1/chat/completions" and not fitting.fixed_route


def prepare(fitting: Fitting) -> None:
    """What would reload or unload the model for every caller never reaches Ollama, whichever
    route the request takes; the window asked for is bounded below (`fit`)."""
    fitting.body, shared = without_shared_settings(fitting.body)
    record = fitting.record
    record.dropped_options = shared.dropped
    record.asked_num_ctx = shared.asked_num_ctx
    if shared.asked_num_ctx is not None and not _door(fitting):
        record.dropped_options["options.num_ctx"] = NO_WINDOW_HERE


async def fit(fitting: Fitting) -> bool:
    """Only what surely fits the loaded window (its UTF-8 bytes alone say so, whatever the
    tokenizer) goes to Ollama's OpenAI endpoint as it came. Everything else goes to /api/chat
    with `truncate: false`, so that a count that fell short is refused by Ollama, never cut:
    with the window sized to it (`overflow: native`), or with the loaded one after the proxy's
    own check (`refuse`). Another route, or an unknown window, is left to the generic check."""
    window = fitting.facts.window
    loaded = window.loaded or window.tokens
    if loaded is None or not _door(fitting):
        return False
    record = fitting.record
    answer = fitting.answer
    name = full_name(fitting.model or "")
    raised = fitting.raised_num_ctx.get(name)
    bound = await fitting.bound()
    surely = bound is not None and bound + answer <= loaded
    asked = record.asked_num_ctx
    if surely and raised is None:
        record.note = "surely within the loaded window: sent to the OpenAI endpoint as it came"
        if asked is not None:
            record.dropped_options["options.num_ctx"] = (
                "not needed: the prompt and the answer surely fit the window the model is "
                "loaded with (and Ollama's OpenAI endpoint takes no options)"
            )
        return True
    tokens = bound if surely else await fitting.tokens(0)
    assert tokens is not None
    record.prompt_tokens = tokens
    options = fitting.settings.upstream.ollama
    if options.overflow == "refuse":
        if tokens + answer > loaded:
            raise fitting.too_small(tokens, loaded)
        ceiling = max(loaded, window.running or 0, raised or 0)
    else:
        ceiling = max(window.tokens or loaded, loaded)
    # Never below what the model runs with now or was asked for before: that would reload it.
    floor = min(max(loaded, window.running or 0, raised or 0), ceiling)
    # A caller's own window is a wish within the same bounds and steps as the proxy's sizes.
    wanted = max(tokens + answer, min(asked, ceiling) if asked is not None else 0)
    num_ctx = num_ctx_for(wanted, floor=floor, ceiling=ceiling)
    if num_ctx is None:
        raise fitting.too_small(tokens, ceiling)
    if num_ctx > loaded:
        fitting.raised_num_ctx[name] = num_ctx
    num_predict = None if fitting.answer_asked else num_ctx - tokens
    stream_options = fitting.body.get("stream_options")
    include_usage = isinstance(stream_options, dict) and bool(stream_options.get("include_usage"))

    def learnt(native: NativeAnswer) -> None:
        record.upstream_prompt_tokens = native.prompt_tokens
        if native.prompt_tokens is not None and native.prompt_tokens >= num_ctx - 1:
            # Ollama before 0.12.6 ignores truncate: false; a prompt that filled the window
            # was most likely cut to it.
            warning = f"Ollama evaluated {native.prompt_tokens} prompt tokens, its whole window"
            fitting.warnings.append(warning + ": the prompt may have been cut")
            fitting.response_headers["X-Enrich-Warnings"] = warning
            log.warning("ollama may have cut the prompt", num_ctx=num_ctx, model=name)

    fitting.body = native_chat_request(
        fitting.body,
        num_ctx=num_ctx,
        num_predict=num_predict,
        truncate_field=honours_truncate(fitting.facts.kind.version),
    )
    fitting.upstream_path = "/api/chat"
    fitting.response_converter = OllamaChatConverter(
        include_usage=include_usage, on_done=learnt, hint=window.hint
    )
    record.route = "native"
    record.num_ctx = num_ctx
    if num_ctx > loaded:
        reason = f"the prompt does not fit the {loaded}-token window Ollama runs the model with"
    elif raised is not None and surely:
        reason = "the window asked for before (a change would reload the model)"
    else:
        reason = "only Ollama's own count can tell whether it fits: it refuses, never cuts"
    record.note = f"sent to /api/chat with options.num_ctx {num_ctx}: {reason}"
    if asked is not None and asked > ceiling:
        limits = (
            f"the window the model runs with ({ceiling}, upstream.ollama.overflow: refuse)"
            if options.overflow == "refuse"
            else f"the model's trained window ({window.trained or 'unknown'}) and "
            f"upstream.ollama.max_num_ctx ({options.max_num_ctx})"
        )
        record.note += f"; the caller's options.num_ctx {asked} bounded by {limits}"
    return True


PROFILE = ServerKind(
    "ollama",
    "Ollama",
    # server/prompt.go drops old messages, llm/llama_server.go (older: runner.go) cuts the
    # prompt's tokens ("truncating input prompt"), both with a 200.
    truncates=True,
    probes=(Probe("ollama", "GET", "/api/version", ollama_version, version=version_at("version")),),
    window=window,
    sight=sight,
    abilities=abilities,
    prepare=prepare,
    fit=fit,
    native_side_calls=True,
    no_search_loop=(
        "Ollama: a prompt past the window it loaded goes to /api/chat so that it is never cut, "
        "and the proxy runs no search loop there"
    ),
)
