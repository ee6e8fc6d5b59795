"""Hugging Face TGI: /info states the window, /tokenize and /chat_tokenize count."""

from __future__ import annotations

from typing import Any

from proxy.upstream.client import upstream_failure
from proxy.upstream.facts import ContextWindow
from proxy.upstream.kinds.profile import Body, Probe, ServerKind, as_dict, version_at
from proxy.upstream.remote_counters import RemoteCounter
from proxy.upstream.tokens import text_only
from proxy.upstream.windows import UNKNOWN, WindowAsk, positive_int


def tgi_info(body: Body) -> bool:
    """TGI `GET /info` (router/src/lib.rs `Info`): `model_id`, `max_total_tokens` (and
    `max_input_tokens`, `max_input_length` before 2.0), `router`, `version`."""
    info = as_dict(body)
    return "model_id" in info and "max_total_tokens" in info


async def window(asked: WindowAsk) -> ContextWindow:
    upstream = asked.upstream
    # router/src/lib.rs `Info`: max_total_tokens (prompt + answer), max_input_tokens (prompt).
    status, info = await upstream.get_json("/info")
    total = positive_int(info.get("max_total_tokens")) if isinstance(info, dict) else None
    if status == 200 and total:
        return ContextWindow(total, "tgi /info max_total_tokens")
    return ContextWindow(None, UNKNOWN, keep=status not in (401, 403))


class TgiCounter(RemoteCounter):
    """TGI: `POST /tokenize {inputs}` → a list of tokens, and `POST /chat_tokenize` (a chat
    request, templated) → `{tokenize_response: [...], templated_text}` (router/src/server.rs)."""

    kind = "tgi"
    exact = True

    async def tokens(self, text: str, special: bool) -> int:
        body = await self._post("/tokenize", {"inputs": text})
        if not isinstance(body, list):
            raise upstream_failure(200, body, "/tokenize")
        return len(body)

    async def count_messages(self, messages: list[dict[str, Any]]) -> int:
        payload = self._for_model({"messages": text_only(messages)})
        body = await self._post("/chat_tokenize", payload)
        tokens = body.get("tokenize_response") if isinstance(body, dict) else None
        if not isinstance(tokens, list):
            raise upstream_failure(200, body, "/chat_tokenize")
        return len(tokens)


PROFILE = ServerKind(
    "tgi",
    "TGI",
    truncates=False,  # 422 "`inputs` tokens + `max_new_tokens` must be"
    probes=(Probe("tgi", "GET", "/info", tgi_info, version=version_at("version")),),
    window=window,
    counter=TgiCounter,
    counter_source="POST /chat_tokenize and POST /tokenize",
)
