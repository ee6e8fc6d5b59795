"""Is the upstream model instruction-tuned, and does its server parse its tool calls: per kind.

`instruct`: the model was tuned to follow a chat (it has a chat template of its own); a base
(pre-trained) model only continues text. `tools`: the server turns the model's own tool-call
format into OpenAI `tool_calls` (a generic fallback the model was not trained for does not
count). Each is True, False or None (unknown), exact or inferred, with where it was learnt.

- llama.cpp `GET /props` (tools/server/server-context.cpp, the props handler):
  `chat_template` is `common_chat_templates_source(tmpls, "")`. For a GGUF without
  `tokenizer.chat_template`, `common_chat_templates_init` (common/chat.cpp) puts its
  `CHATML_TEMPLATE_SRC` there: that exact text means no template of its own (as does
  `--chat-template chatml`, which sets the same). Builds before that refactor hand `""`
  (examples/server/utils.hpp `llama_get_chat_template`). Without `--jinja`,
  `--chat-template gemma` shows the bare name `gemma`: whether the GGUF has a template is then
  not shown. `chat_template_caps` (newer builds: `common_chat_templates_get_caps`) says whether
  the template renders tool calls (`supports_tool_calls`); the caps are there with or without
  `--jinja`, and tool calls need it: `POST /apply-template` with `tools` answers
  "tools param requires --jinja flag" without it (`oaicompat_chat_params_parse`), and renders
  the prompt with it, generating nothing. `chat_template_tool_use` appears in `/props` only
  with `--jinja`. Seen here with xllamacpp 2026.10 and the bundled Gemma 3 270M.
  The proxy's own server (`upstream.spawn`) knows its GGUF: its metadata decides `instruct`.
- vLLM: `POST /tokenize` with messages applies the chat template; for a tokenizer without
  one it answers 400 "As of transformers v4.44, default chat template is no longer allowed,
  so you must provide a chat template if the tokenizer does not define one."
  (vllm/renderers/hf.py, formerly entrypoints/chat_utils.py). `tool_choice: "auto"` without
  `--enable-auto-tool-choice` and a `--tool-call-parser` is refused with '"auto" tool choice
  requires --enable-auto-tool-choice and --tool-call-parser to be set'
  (vllm/renderers/online_renderer.py `render_chat`), before any generation; newer builds
  serve that step alone at `POST /v1/chat/completions/render`
  (vllm/entrypoints/serve/render/api_router.py). Builds without it are asked once with a
  one-token chat completion (nothing cheaper says it), and the answer is kept.
- Ollama `POST /api/show`: `capabilities` lists `tools` when the model's template or
  parser takes tools (server/images.go `Capabilities`; from 0.6.4; before it, tools were taken
  exactly when the template uses `.Tools`); `template` is `{{ .Prompt }}`
  (template.DefaultTemplate) for a model without a chat template, its GGUF's chat template when
  Ollama renders that natively (0.30+, routes.go `selectedModelTemplate`); `renderer` names a
  built-in chat renderer.
- LM Studio `GET /api/v1/models` (0.4+): `capabilities.trained_for_tool_use`; `GET
  /api/v0/models`: `capabilities: ["tool_use"]`. LM Studio offers every other model a default
  tool prompt of its own, which it was not trained for. Neither list says whether a model has
  a chat template; a model trained for tool use is instruction-tuned.
- other servers: unknown, unless configured.

`models.<name>.instruct` and `models.<name>.tools` override what is learnt. Another kind of
server is one more entry in `LEARNERS`.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import structlog
from cachetools import LRUCache

from proxy.config import Settings
from proxy.errors import ProxyError
from proxy.logs import probe_failed
from proxy.upstream.client import UpstreamClient
from proxy.upstream.facts import Fact
from proxy.upstream.learnt import Learnt
from proxy.upstream.vision import RENDER_PATH, error_message, lmstudio_card

log = structlog.get_logger(__name__)

LLAMACPP_CHATML_FALLBACK = (
    "{%- for message in messages -%}\n"
    "  {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "  {{- '<|im_start|>assistant\n' -}}\n"
    "{%- endif -%}"
)
"""llama.cpp's `CHATML_TEMPLATE_SRC` (common/chat.cpp), what `/props` shows for a GGUF without a
chat template of its own."""

OLLAMA_NO_TEMPLATE = "{{ .Prompt }}"
"""Ollama's `template.DefaultTemplate`: the prompt as it is, for a model without a template."""

# A llama.cpp built-in template name (src/llama-chat.cpp), as /props shows it without --jinja.
_BUILTIN_NAME = re.compile(r"[a-z0-9][a-z0-9_.\-]{0,40}")
_GO_TOOLS = re.compile(r"\.Tools\b")
JINJA_REFUSAL = "--jinja"  # "tools param requires --jinja flag"
AUTO_TOOLS_REFUSAL = "--enable-auto-tool-choice"
NO_TEMPLATE_REFUSAL = "chat template"

PROBE_MESSAGES = [{"role": "user", "content": "ping"}]
PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "probe",
        "description": "Asked once to learn whether the server takes tools.",
        "parameters": {"type": "object", "properties": {}},
    },
}


def unknown(source: str) -> Fact[bool | None]:
    return Fact(None, False, source)


@dataclass(frozen=True)
class Abilities:
    """Whether a model is instruction-tuned and whether its server parses its tool calls.
    `keep` is False when learnt from a failure: asked again next time."""

    instruct: Fact[bool | None]
    tools: Fact[bool | None]
    keep: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"instruct": self.instruct.to_json(), "tools": self.tools.to_json()}


Learner = Callable[[UpstreamClient, str | None], Awaitable[Abilities]]


def both_unknown(source: str, keep: bool = False) -> Abilities:
    return Abilities(unknown(source), unknown(source), keep=keep)


# -- llama.cpp --------------------------------------------------------------------------------


def llamacpp_instruct(template: Any) -> Fact[bool | None]:
    """What `/props` `chat_template` says of the model having a chat template of its own."""
    if not isinstance(template, str):
        return unknown("llama.cpp /props names no chat_template")
    text = template.strip()
    if not text:
        return Fact(False, True, "llama.cpp /props chat_template is empty: the GGUF has none")
    if text == LLAMACPP_CHATML_FALLBACK:
        return Fact(
            False,
            True,
            "llama.cpp /props chat_template is its ChatML fallback: "
            "the GGUF has no chat template of its own",
        )
    if _BUILTIN_NAME.fullmatch(text):
        return unknown(
            f"llama.cpp runs its built-in template {text!r} (--chat-template): "
            "whether the model has one of its own is not shown"
        )
    return Fact(True, True, "llama.cpp /props chat_template: a chat template")


async def llamacpp_jinja(upstream: UpstreamClient) -> tuple[bool | None, str, bool]:
    """Is `--jinja` on: `/apply-template` with a tool renders with it and refuses without.
    (on, why, keep)."""
    payload = {"messages": PROBE_MESSAGES, "tools": [PROBE_TOOL]}
    status, body = await upstream.post_json("/apply-template", payload)
    if status == 200:
        return True, "--jinja on (POST /apply-template took a tool)", True
    message = error_message(body)
    if JINJA_REFUSAL in message:
        return False, f"llama.cpp runs without --jinja ({message!r})", True
    # 404: a build without /apply-template, which stays so; anything else may pass.
    return None, f"POST /apply-template answered {status}: {message}", status == 404


async def llamacpp_tools(
    upstream: UpstreamClient, props: dict[str, Any]
) -> tuple[Fact[bool | None], bool]:
    caps = props.get("chat_template_caps")
    template = props.get("chat_template")
    template = template if isinstance(template, str) else ""
    if isinstance(caps, dict) and "supports_tool_calls" in caps:
        if caps["supports_tool_calls"] is not True:
            source = (
                "llama.cpp /props chat_template_caps.supports_tool_calls is false: "
                "the chat template has no tool calls"
            )
            return Fact(False, True, source), True
        template_says, exact = "llama.cpp /props chat_template_caps.supports_tool_calls", True
    elif "tool_calls" in template:
        template_says = (
            "the chat template renders tool_calls (llama.cpp without chat_template_caps)"
        )
        exact = False
    else:
        source = (
            "the chat template has no tool calls (llama.cpp without chat_template_caps): "
            "a generic tool format at best"
        )
        return Fact(False, False, source), True
    if "chat_template_tool_use" in props:  # /props has it only with --jinja on
        return Fact(True, exact, f"{template_says}, --jinja on (chat_template_tool_use)"), True
    jinja, why, keep = await llamacpp_jinja(upstream)
    if jinja is None:
        return unknown(f"{template_says}, but whether --jinja is on is unknown ({why})"), keep
    if not jinja:
        return Fact(False, True, why), True
    return Fact(True, exact, f"{template_says}, {why}"), True


async def llamacpp(upstream: UpstreamClient, model: str | None) -> Abilities:
    status, props = await upstream.get_json("/props")
    if status != 200 or not isinstance(props, dict):
        # 404: /props turned off (--no-endpoint-props), which stays so.
        return both_unknown(f"llama.cpp /props answered {status}", keep=status == 404)
    tools, keep = await llamacpp_tools(upstream, props)
    return Abilities(llamacpp_instruct(props.get("chat_template")), tools, keep=keep)


# -- vLLM --------------------------------------------------------------------------------------


async def vllm_instruct(
    upstream: UpstreamClient, base: dict[str, Any]
) -> tuple[Fact[bool | None], bool]:
    payload = {**base, "messages": PROBE_MESSAGES, "add_generation_prompt": True}
    status, body = await upstream.post_json("/tokenize", payload)
    if status == 200:
        return Fact(True, True, "vLLM applied a chat template (POST /tokenize with messages)"), True
    message = error_message(body)
    if status == 400 and NO_TEMPLATE_REFUSAL in message.lower():
        source = f"vLLM: the tokenizer has no chat template (POST /tokenize: {message!r})"
        return Fact(False, True, source), True
    return unknown(f"vLLM /tokenize answered {status}: {message}"), False


async def vllm_tools(
    upstream: UpstreamClient, base: dict[str, Any]
) -> tuple[Fact[bool | None], bool]:
    payload = {**base, "messages": PROBE_MESSAGES, "tools": [PROBE_TOOL], "tool_choice": "auto"}
    status, body = await upstream.post_json(RENDER_PATH, payload)
    where = f"POST {RENDER_PATH}"
    if status in (404, 405):  # a build before the render endpoint: one token, asked once
        status, body = await upstream.post_json(
            "/v1/chat/completions", {**payload, "max_tokens": 1}
        )
        where = "a one-token chat completion (no render endpoint in this build)"
    if status == 200:
        source = (
            f"vLLM took tool_choice auto ({where}): "
            "--enable-auto-tool-choice with a --tool-call-parser"
        )
        return Fact(True, True, source), True
    message = error_message(body)
    if AUTO_TOOLS_REFUSAL in message:
        return Fact(False, True, f"vLLM refused tool_choice auto ({where}): {message!r}"), True
    return unknown(f"vLLM answered {status} to tool_choice auto ({where}): {message}"), False


async def vllm(upstream: UpstreamClient, model: str | None) -> Abilities:
    base: dict[str, Any] = {"model": model} if model else {}
    instruct, keep_instruct = await vllm_instruct(upstream, base)
    tools, keep_tools = await vllm_tools(upstream, base)
    return Abilities(instruct, tools, keep=keep_instruct and keep_tools)


# -- Ollama -----------------------------------------------------------------------------------


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


async def ollama(upstream: UpstreamClient, model: str | None) -> Abilities:
    if not model:
        return both_unknown("Ollama: no model named, so none asked about")
    status, shown = await upstream.post_json("/api/show", {"model": model})
    if status != 200 or not isinstance(shown, dict):
        return both_unknown(f"Ollama /api/show answered {status}", keep=status == 404)
    return Abilities(ollama_instruct(shown), ollama_tools(shown))


# -- LM Studio --------------------------------------------------------------------------------

_LMSTUDIO_SILENT = unknown("LM Studio does not say whether the model has a chat template")


async def lmstudio(upstream: UpstreamClient, model: str | None) -> Abilities:
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


async def other(upstream: UpstreamClient, model: str | None) -> Abilities:
    return both_unknown("unknown: this kind of server does not say", keep=True)


LEARNERS: dict[str, Learner] = {
    "llamacpp": llamacpp,
    "vllm": vllm,
    "ollama": ollama,
    "lmstudio": lmstudio,
}


class AbilityIntrospection:
    """Learns each model's abilities once per `upstream.context_ttl_s`; never fails a request
    (a probe that failed gives None with its reason, and is asked again next time)."""

    def __init__(
        self,
        settings: Settings,
        upstream: UpstreamClient,
        kind: Callable[[], Awaitable[str]],
        spawned: Fact[bool | None] | None = None,
    ) -> None:
        self.settings = settings
        self.upstream = upstream
        self._kind = kind
        # What the proxy's own llama.cpp server's GGUF says (upstream.spawn): more exact than
        # /props, where the template chosen for it may stand in for a missing one.
        self.spawned = spawned
        self._abilities: Learnt[Abilities] = Learnt(
            settings.upstream.context_ttl_s, lambda found: found.keep
        )
        # The last abilities of each model, for /healthz (names are the callers' own).
        self.seen: LRUCache[str, Abilities] = LRUCache(maxsize=256)

    async def of(self, model: str | None) -> Abilities:
        """`model`'s abilities: configured, remembered, or learnt from the upstream now."""
        key = model or ""
        found, now = await self._abilities.get(key, lambda: self._learn(model))
        if now:
            self.seen[key] = found
            # Unknown for want of an answer is not learnt: asked again next time.
            (log.info if found.keep else log.debug)(
                "model abilities learnt",
                model=model,
                instruct=found.instruct.value,
                instruct_source=found.instruct.source,
                tools=found.tools.value,
                tools_source=found.tools.source,
            )
        return found

    async def _learn(self, model: str | None) -> Abilities:
        configured = self.settings.model_settings(model)
        name = f"models.{model or '*'}"
        if configured.instruct is not None and configured.tools is not None:
            learnt = both_unknown("configured", keep=True)  # nothing to ask
        else:
            try:
                kind = await self._kind()
                learnt = await LEARNERS.get(kind, other)(self.upstream, model)
            except ProxyError as error:
                probe_failed(
                    log, "could not learn the model's abilities", error.code, error.message
                )
                learnt = both_unknown(f"unknown: {error.message}")
            if self.spawned is not None and self.spawned.value is not None:
                learnt = replace(learnt, instruct=self.spawned)
        if configured.instruct is not None:
            said = f"{name}.instruct: {str(configured.instruct).lower()}"
            learnt = replace(learnt, instruct=Fact(configured.instruct, True, said))
        if configured.tools is not None:
            said = f"{name}.tools: {str(configured.tools).lower()}"
            learnt = replace(learnt, tools=Fact(configured.tools, True, said))
        return learnt

    def known(self, detailed: bool = True) -> dict[str, Any]:
        """What was learnt so far, asked of nobody (/healthz): per model name only `detailed`
        (the names are what callers sent)."""
        if not detailed:
            return {}
        return {name or "(no model named)": found.to_json() for name, found in self.seen.items()}
