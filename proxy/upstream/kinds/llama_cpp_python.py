"""llama-cpp-python's server: /extras/tokenize/count; no window said."""

from __future__ import annotations

from proxy.upstream.kinds.profile import Body, Probe, ServerKind, as_dict
from proxy.upstream.remote_counters import RemoteCounter, int_field
from proxy.upstream.windows import unpublished


def llama_cpp_python_count(body: Body) -> bool:
    """llama-cpp-python `POST /extras/tokenize/count {"input"}` (llama_cpp/server/app.py)
    → `{"count": N}` and nothing else."""
    answer = as_dict(body)
    return set(answer) == {"count"} and isinstance(answer["count"], int)


class LlamaCppPythonCounter(RemoteCounter):
    """llama-cpp-python's `POST /extras/tokenize/count {input, model}` → `{count}`
    (llama_cpp/server/app.py; special tokens parsed)."""

    kind = "llama-cpp-python"

    async def tokens(self, text: str, special: bool) -> int:
        payload = self._for_model({"input": text})
        body = await self._post("/extras/tokenize/count", payload)
        return int_field(body, "count", "/extras/tokenize/count")


PROFILE = ServerKind(
    "llama-cpp-python",
    "llama-cpp-python",
    truncates=False,  # 400
    probes=(
        Probe(
            "llama-cpp-python",
            "POST",
            "/extras/tokenize/count",
            llama_cpp_python_count,
            {"input": "x"},
        ),
    ),
    window=unpublished,
    counter=LlamaCppPythonCounter,
    counter_source="POST /extras/tokenize/count (chat framing as ChatML)",
)
