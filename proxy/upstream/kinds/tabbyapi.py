"""TabbyAPI: /.well-known/serviceinfo, /v1/model for the window, /v1/token/encode."""

from __future__ import annotations

from typing import Any

from proxy.upstream.facts import ContextWindow
from proxy.upstream.kinds.profile import Body, Probe, ServerKind, as_dict
from proxy.upstream.remote_counters import RemoteCounter, int_field
from proxy.upstream.tokens import text_only
from proxy.upstream.windows import UNKNOWN, WindowAsk, positive_int, refused


def tabbyapi_serviceinfo(body: Body) -> bool:
    """TabbyAPI `GET /.well-known/serviceinfo` (endpoints/core/router.py): `software.name`."""
    software = as_dict(body).get("software")
    return isinstance(software, dict) and software.get("name") == "TabbyAPI"


async def window(asked: WindowAsk) -> ContextWindow:
    upstream = asked.upstream
    # endpoints/core/router.py `GET /v1/model` → ModelCard.parameters.max_seq_len.
    status, card = await upstream.get_json("/v1/model")
    parameters = card.get("parameters") if isinstance(card, dict) else None
    size = positive_int(parameters.get("max_seq_len")) if isinstance(parameters, dict) else None
    if status == 200 and size:
        return ContextWindow(size, "tabbyapi /v1/model parameters.max_seq_len")
    if status in (401, 403):
        return refused(status, "GET /v1/model")
    return ContextWindow(None, UNKNOWN)


# What a chat template adds after the last message to open the answer (TabbyAPI's token
# endpoint renders without it): `<|im_start|>assistant\n` and its kin are a few tokens.
GENERATION_PROMPT_TOKENS = 8


class TabbyApiCounter(RemoteCounter):
    """TabbyAPI's `POST /v1/token/encode` (endpoints/core/types/token.py): `text` a string, or
    chat messages rendered with the model's own template → `{tokens, length}`."""

    kind = "tabbyapi"
    exact = True

    async def _encode(self, text: str | list[dict[str, Any]], bos: bool) -> int:
        body = await self._post("/v1/token/encode", {"text": text, "add_bos_token": bos})
        return int_field(body, "length", "/v1/token/encode")

    async def tokens(self, text: str, special: bool) -> int:
        return await self._encode(text, special)

    async def count_messages(self, messages: list[dict[str, Any]]) -> int:
        # The template is applied without the generation prompt: a few tokens more follow.
        return await self._encode(text_only(messages), True) + GENERATION_PROMPT_TOKENS


PROFILE = ServerKind(
    "tabbyapi",
    "TabbyAPI",
    truncates=False,  # 400 context_length_exceeded
    probes=(Probe("tabbyapi", "GET", "/.well-known/serviceinfo", tabbyapi_serviceinfo),),
    window=window,
    counter=TabbyApiCounter,
    counter_source="POST /v1/token/encode (messages, template applied)",
)
