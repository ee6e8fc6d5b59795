"""vLLM: /tokenize with the chat template applied, the render endpoint, max_model_len."""

from __future__ import annotations

from typing import Any

from proxy.upstream.asking import (
    PROBE_IMAGE,
    PROBE_MESSAGES,
    PROBE_TOOL,
    RENDER_PATH,
    error_message,
    image_message,
    token_ids,
)
from proxy.upstream.client import UpstreamClient, upstream_failure
from proxy.upstream.facts import Abilities, Fact, Sight, unknown
from proxy.upstream.image_cost import guessed
from proxy.upstream.kinds.profile import Body, Probe, ServerKind, as_dict
from proxy.upstream.tokens import text_only
from proxy.upstream.windows import from_listing


def vllm_tokenize(body: Body) -> bool:
    """vLLM `POST /tokenize {"prompt"}` → `{"count", "max_model_len", "tokens"}`."""
    answer = as_dict(body)
    return isinstance(answer.get("count"), int) and "tokens" in answer


class VllmCounter:
    """vLLM's `/tokenize`, with the model's chat template applied server-side for messages."""

    kind = "vllm"
    exact = True

    def __init__(self, upstream: UpstreamClient, model: str | None) -> None:
        self.upstream = upstream
        self.model = model
        self.calls = 0

    async def _count(self, payload: dict[str, Any]) -> int:
        if self.model:
            payload["model"] = self.model
        self.calls += 1
        status, body = await self.upstream.post_json("/tokenize", payload)
        if status != 200 or not isinstance(body, dict) or not isinstance(body.get("count"), int):
            raise upstream_failure(status, body, "/tokenize")
        return int(body["count"])

    async def count_text(self, text: str) -> int:
        return await self._count({"prompt": text, "add_special_tokens": False})

    async def count_messages(self, messages: list[dict[str, Any]]) -> int:
        return await self._count({"messages": text_only(messages), "add_generation_prompt": True})

    async def count_prompt(self, prompt: str) -> int:
        return await self._count({"prompt": prompt, "add_special_tokens": True})


async def sight(upstream: UpstreamClient, model: str | None) -> Sight:
    """`/v1/models` says nothing of modalities. `POST /tokenize` with an image part is
    answered for a multimodal model and refused with a 400 for a text-only one ("... is not a
    multimodal model": `MultiModalRegistry.create_processor`, reached from the chat parser's
    item tracker). Newer builds serve `POST /v1/chat/completions/render`, whose `token_ids` hold
    the image's placeholder tokens expanded by the model's own processor: the exact count.
    (`/tokenize` does not expand them: one placeholder per image.)"""
    payload: dict[str, Any] = {"messages": image_message(PROBE_IMAGE)}
    if model:
        payload["model"] = model
    status, body = await upstream.post_json("/tokenize", payload)
    cost = guessed("", model or "")
    if status in (401, 403):
        return Sight(False, f"vLLM /tokenize answered {status}", cost, keep=False)
    if status != 200:
        message = error_message(body)
        return Sight(False, f"vLLM /tokenize refused an image ({status}: {message})", cost)
    status, rendered = await upstream.post_json(RENDER_PATH, payload)
    counts = status == 200 and token_ids(rendered) is not None
    return Sight(True, "vLLM /tokenize took an image", cost, server_counts=counts)


AUTO_TOOLS_REFUSAL = "--enable-auto-tool-choice"


NO_TEMPLATE_REFUSAL = "chat template"


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


async def abilities(upstream: UpstreamClient, model: str | None) -> Abilities:
    """`POST /tokenize` with messages applies the chat template; for a tokenizer without
    one it answers 400 "As of transformers v4.44, default chat template is no longer allowed,
    so you must provide a chat template if the tokenizer does not define one."
    (vllm/renderers/hf.py, formerly entrypoints/chat_utils.py). `tool_choice: "auto"` without
    `--enable-auto-tool-choice` and a `--tool-call-parser` is refused with '"auto" tool choice
    requires --enable-auto-tool-choice and --tool-call-parser to be set'
    (vllm/renderers/online_renderer.py `render_chat`), before any generation; newer builds
    serve that step alone at `POST /v1/chat/completions/render`
    (vllm/entrypoints/serve/render/api_router.py). Builds without it are asked once with a
    one-token chat completion (nothing cheaper says it), and the answer is kept."""
    base: dict[str, Any] = {"model": model} if model else {}
    instruct, keep_instruct = await vllm_instruct(upstream, base)
    tools, keep_tools = await vllm_tools(upstream, base)
    return Abilities(instruct, tools, keep=keep_instruct and keep_tools)


PROFILE = ServerKind(
    "vllm",
    "vLLM",
    truncates=False,  # 400 "maximum context length is ..."
    probes=(
        Probe(
            "vllm",
            "POST",
            "/tokenize",
            vllm_tokenize,
            {"prompt": "probe", "add_special_tokens": False},
        ),
    ),
    window=from_listing,  # /v1/models max_model_len
    counter=VllmCounter,
    counter_source="POST /tokenize (messages, template applied)",
    sight=sight,
    abilities=abilities,
    completions_take_any_model=True,
    reads_template_kwargs=True,
)
