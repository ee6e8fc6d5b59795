"""KoboldCpp: /api/extra endpoints for its version, window and token count."""

from __future__ import annotations

from proxy.upstream.client import upstream_failure
from proxy.upstream.facts import ContextWindow
from proxy.upstream.kinds.profile import Body, Probe, ServerKind, as_dict, version_at
from proxy.upstream.remote_counters import RemoteCounter, int_field
from proxy.upstream.windows import UNKNOWN, WindowAsk, positive_int


def koboldcpp_version(body: Body) -> bool:
    """KoboldCpp `GET /api/extra/version` (koboldcpp.py) → `{"result": "KoboldCpp", "version"}`."""
    return as_dict(body).get("result") == "KoboldCpp"


async def window(asked: WindowAsk) -> ContextWindow:
    upstream = asked.upstream
    # koboldcpp.py: `/api/extra/true_max_context_length` → {"value": maxctx} (--contextsize).
    status, body = await upstream.get_json("/api/extra/true_max_context_length")
    value = positive_int(body.get("value")) if isinstance(body, dict) else None
    if status == 200 and value:
        return ContextWindow(
            value,
            "koboldcpp /api/extra/true_max_context_length",
            hint=f"KoboldCpp runs with a {value}-token window and would cut the front of a longer "
            "prompt without saying so; relaunch it with a larger --contextsize",
        )
    return ContextWindow(None, UNKNOWN, keep=status not in (401, 403))


class KoboldCppCounter(RemoteCounter):
    """KoboldCpp's `POST /api/extra/tokencount {prompt, special}` → `{value, ids}` (koboldcpp.py).

    It answers 0 for a text of 50,000 tokens or more (a guard in its handler), so long texts
    are counted in pieces short enough never to reach that, whatever the script."""

    kind = "koboldcpp"
    PIECE_CHARS = 16_000  # ≤ 48,000 tokens even at three tokens per character

    async def tokens(self, text: str, special: bool) -> int:
        total = 0
        for number, piece in enumerate(pieces(text, self.PIECE_CHARS)):
            body = await self._post(
                "/api/extra/tokencount", {"prompt": piece, "special": special and number == 0}
            )
            count = int_field(body, "value", "/api/extra/tokencount")
            if count < 0:
                raise upstream_failure(200, body, "/api/extra/tokencount")
            total += count
        return total


def pieces(text: str, size: int) -> list[str]:
    """`text` in pieces of at most `size` characters, each cut just before a space where there
    is one (a BPE token holds its leading space, so the pieces' counts add up)."""
    out: list[str] = []
    start = 0
    while start < len(text) or not out:
        end = start + size
        if end < len(text):
            space = text.rfind(" ", start + 1, end)
            end = space if space > start else end
        out.append(text[start:end])
        start = end
    return out


PROFILE = ServerKind(
    "koboldcpp",
    "KoboldCpp",
    # gpttype_adapter.cpp keeps the last nctx - max_length tokens ("truncate to front").
    truncates=True,
    probes=(
        Probe(
            "koboldcpp",
            "GET",
            "/api/extra/version",
            koboldcpp_version,
            version=version_at("version"),
        ),
    ),
    window=window,
    counter=KoboldCppCounter,
    counter_source="POST /api/extra/tokencount (chat framing as ChatML)",
)
