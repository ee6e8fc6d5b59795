"""text-generation-webui (oobabooga): /v1/internal endpoints; fitted by truncation_length."""

from __future__ import annotations

from typing import Any

from proxy.upstream.client import upstream_failure
from proxy.upstream.kinds.profile import Body, Fitting, Probe, ServerKind, as_dict
from proxy.upstream.remote_counters import RemoteCounter, int_field
from proxy.upstream.tokens import text_only
from proxy.upstream.windows import unpublished


def textgen_model_info(body: Body) -> bool:
    """text-generation-webui `GET /v1/internal/model/info` (modules/api/models.py):
    `model_name`, `lora_names` (and `loader`)."""
    info = as_dict(body)
    return "model_name" in info and "lora_names" in info


class TextgenCounter(RemoteCounter):
    """text-generation-webui: `POST /v1/internal/token-count {text}` → `{length}`, and the chat
    prompt its own template makes from messages, `POST /v1/internal/chat-prompt` → `{prompt}`
    (modules/api/script.py)."""

    kind = "textgen"
    exact = True

    async def tokens(self, text: str, special: bool) -> int:
        body = await self._post("/v1/internal/token-count", {"text": text})
        return int_field(body, "length", "/v1/internal/token-count")

    async def count_messages(self, messages: list[dict[str, Any]]) -> int:
        payload = self._for_model({"messages": text_only(messages)})
        body = await self._post("/v1/internal/chat-prompt", payload)
        prompt = body.get("prompt") if isinstance(body, dict) else None
        if not isinstance(prompt, str):
            raise upstream_failure(200, body, "/v1/internal/chat-prompt")
        return await self.tokens(prompt, True)


async def fit(fitting: Fitting) -> bool:
    """text-generation-webui keeps the last `truncation_length - max_tokens` tokens of a prompt
    (modules/text_generation.py) and says nothing: the proxy sets `truncation_length` so that
    what it sends is never cut — the known window, or the prompt's own size."""
    record = fitting.record
    window = fitting.facts.window.tokens
    tokens = await fitting.tokens(0)
    record.prompt_tokens = tokens
    if tokens is None:
        return True
    if window is not None and tokens + fitting.answer > window:
        raise fitting.too_small(tokens, window)
    if "truncation_length" not in fitting.body:
        fitting.body["truncation_length"] = window or tokens + fitting.answer
        record.note = f"truncation_length {fitting.body['truncation_length']} sent"
    return True


PROFILE = ServerKind(
    "textgen",
    "text-generation-webui",
    # modules/text_generation.py encode(truncation_length=...) keeps the prompt's last tokens.
    truncates=True,
    probes=(Probe("textgen", "GET", "/v1/internal/model/info", textgen_model_info),),
    window=unpublished,
    counter=TextgenCounter,
    counter_source="POST /v1/internal/chat-prompt then POST /v1/internal/token-count",
    fit=fit,
)
