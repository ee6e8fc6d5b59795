"""llama.cpp's server (llama-server): /props, /tokenize, /apply-template."""

from __future__ import annotations

import re
from typing import Any

from proxy.upstream.asking import PROBE_MESSAGES, PROBE_TOOL, error_message
from proxy.upstream.client import UpstreamClient, upstream_failure
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
from proxy.upstream.kinds.profile import Body, Probe, ServerKind, as_dict, version_at
from proxy.upstream.tokens import text_only
from proxy.upstream.windows import WindowAsk, from_listing, positive_int


def llamacpp_props(body: Body) -> bool:
    """llama.cpp `GET /props` (tools/server/server.cpp): `default_generation_settings` with the
    slot's parameters, plus `model_path`/`build_info` in current builds. TabbyAPI answers a
    `/props` too (endpoints/core/router.py), with `default_generation_settings: {n_ctx}` only."""
    props = as_dict(body)
    settings = props.get("default_generation_settings")
    if not isinstance(settings, dict):
        return False
    return "build_info" in props or "model_path" in props or len(settings) > 1


async def window(asked: WindowAsk) -> ContextWindow:
    upstream = asked.upstream
    # /props default_generation_settings.n_ctx is the per-slot context, the one that applies.
    status, props = await upstream.get_json("/props")
    generation = props.get("default_generation_settings") if isinstance(props, dict) else None
    n_ctx = positive_int(generation.get("n_ctx")) if isinstance(generation, dict) else None
    if status == 200 and n_ctx:
        return ContextWindow(n_ctx, "llamacpp /props n_ctx")
    return await from_listing(asked)


class LlamaCppCounter:
    """llama.cpp's own tokenizer and chat template: `/tokenize` and `/apply-template`."""

    kind = "llamacpp"
    exact = True

    def __init__(self, upstream: UpstreamClient) -> None:
        self.upstream = upstream
        self.calls = 0

    async def _tokenize(self, text: str, special: bool) -> int:
        self.calls += 1
        status, body = await self.upstream.post_json(
            "/tokenize", {"content": text, "add_special": special, "parse_special": special}
        )
        if status != 200 or not isinstance(body, dict) or not isinstance(body.get("tokens"), list):
            raise upstream_failure(status, body, "/tokenize")
        return len(body["tokens"])

    async def count_text(self, text: str) -> int:
        return await self._tokenize(text, False)

    async def count_prompt(self, prompt: str) -> int:
        # A rendered prompt is read the way the server reads it: control tokens parsed.
        return await self._tokenize(prompt, True)

    async def count_messages(self, messages: list[dict[str, Any]]) -> int:
        plain = text_only(messages)
        if not any(m["role"] == "user" for m in plain):
            # Some templates refuse a conversation without a user turn (as LM Studio notes).
            plain = [*plain, {"role": "user", "content": "?"}]
        self.calls += 1
        status, body = await self.upstream.post_json("/apply-template", {"messages": plain})
        if status != 200 or not isinstance(body, dict) or not isinstance(body.get("prompt"), str):
            raise upstream_failure(status, body, "/apply-template")
        return await self.count_prompt(body["prompt"])


async def sight(upstream: UpstreamClient, model: str | None) -> Sight:
    """`GET /props` → `modalities.vision` (true when llama-server runs with `--mmproj`;
    tools/server `handle_props`). The projector is not named by any endpoint: its family is
    guessed from the chat template's image markers (an estimate, said so)."""
    status, props = await upstream.get_json("/props")
    if status != 200 or not isinstance(props, dict):
        return Sight(False, f"llama.cpp /props answered {status}", ESTIMATE, keep=status != 401)
    modalities = props.get("modalities")
    if not isinstance(modalities, dict):
        return Sight(
            False, "llama.cpp /props names no modalities (no multimodal support)", ESTIMATE
        )
    names = f"{props.get('model_alias') or ''} {props.get('model_path') or ''}"
    cost = guessed(str(props.get("chat_template") or ""), names)
    if modalities.get("vision") is True:
        return Sight(True, "llama.cpp /props modalities.vision", cost)
    return Sight(False, "llama.cpp /props modalities.vision is false (no --mmproj)", cost)


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


# A llama.cpp built-in template name (src/llama-chat.cpp), as /props shows it without --jinja.
_BUILTIN_NAME = re.compile(r"[a-z0-9][a-z0-9_.\-]{0,40}")


JINJA_REFUSAL = "--jinja"  # "tools param requires --jinja flag"


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


async def abilities(upstream: UpstreamClient, model: str | None) -> Abilities:
    """`GET /props` (tools/server/server-context.cpp, the props handler):
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
    The proxy's own server (`upstream.spawn`) knows its GGUF: its metadata decides `instruct`."""
    status, props = await upstream.get_json("/props")
    if status != 200 or not isinstance(props, dict):
        # 404: /props turned off (--no-endpoint-props), which stays so.
        return both_unknown(f"llama.cpp /props answered {status}", keep=status == 404)
    tools, keep = await llamacpp_tools(upstream, props)
    return Abilities(llamacpp_instruct(props.get("chat_template")), tools, keep=keep)


# Special tokens as chat templates spell them: <|im_start|>, <start_of_turn>, [INST], <s>.
TEMPLATE_TOKEN = re.compile(r"<\|?[A-Za-z0-9_\-/▁｜]{1,40}\|?>|\[/?[A-Z][A-Z_]{1,30}\]")


async def control_tokens(upstream: UpstreamClient) -> set[str]:
    """BOS/EOS and the special tokens spelled out in the chat template (`GET /props`)."""
    found: set[str] = set()
    status, props = await upstream.get_json("/props")
    if status == 200 and isinstance(props, dict):
        for key in ("bos_token", "eos_token"):
            if isinstance(props.get(key), str):
                found.add(props[key])
        template = props.get("chat_template")
        if isinstance(template, str):
            found.update(TEMPLATE_TOKEN.findall(template))
    return found


PROFILE = ServerKind(
    "llamacpp",
    "llama.cpp",
    truncates=False,  # 400 exceed_context_size_error
    probes=(Probe("llamacpp", "GET", "/props", llamacpp_props, version=version_at("build_info")),),
    window=window,
    counter=lambda upstream, model: LlamaCppCounter(upstream),
    counter_source="POST /apply-template then POST /tokenize",
    sight=sight,
    abilities=abilities,
    control_tokens=control_tokens,
    completions_take_any_model=True,
    reads_template_kwargs=True,
    # Its prompt cache makes two identical greedy requests differ.
    repeatable={"cache_prompt": False},
)
