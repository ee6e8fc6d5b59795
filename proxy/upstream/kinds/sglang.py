"""SGLang: /get_model_info, /tokenize of a prompt, max_model_len in the model list."""

from __future__ import annotations

from proxy.upstream.kinds.profile import Body, Probe, ServerKind, as_dict, version_at
from proxy.upstream.remote_counters import RemoteCounter, int_field
from proxy.upstream.windows import from_listing


def sglang_model_info(body: Body) -> bool:
    """SGLang `GET /get_model_info` (srt/entrypoints/http_server.py): `model_path`,
    `is_generation` (and `tokenizer_path`)."""
    info = as_dict(body)
    return isinstance(info.get("model_path"), str) and "is_generation" in info


class SglangCounter(RemoteCounter):
    """SGLang's `POST /tokenize {prompt, add_special_tokens}` → `{tokens, count, max_model_len}`
    (srt/entrypoints/openai/serving_tokenize.py); it takes no messages."""

    kind = "sglang"

    async def tokens(self, text: str, special: bool) -> int:
        payload = self._for_model({"prompt": text, "add_special_tokens": special})
        return int_field(await self._post("/tokenize", payload), "count", "/tokenize")


PROFILE = ServerKind(
    "sglang",
    "SGLang",
    truncates=False,  # 400 unless --allow-auto-truncate
    probes=(
        Probe("sglang", "GET", "/get_model_info", sglang_model_info, version=version_at("version")),
    ),
    window=from_listing,  # /v1/models max_model_len
    counter=SglangCounter,
    counter_source="POST /tokenize (prompt; chat framing as ChatML)",
)
