"""Pure conversions between chat requests/responses and /v1/completions (text adapter)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proxy.formats.model import InstructFormat

CHAT_ONLY = frozenset(
    {
        "messages",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "functions",
        "function_call",
        "response_format",
        "stream_options",
        "logprobs",  # chat: bool + top_logprobs; completions: an int, another shape back
        "top_logprobs",
        "max_completion_tokens",
        "modalities",
        "audio",
        "prediction",
        "store",
        "metadata",
        "reasoning_effort",
        "web_search_options",
    }
)


def _client_stops(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list):
        return [s for s in value if isinstance(s, str) and s]
    return []


def merged_stops(fmt: InstructFormat, client_stop: Any) -> list[str]:
    """Format stops then the client's, deduplicated. Not capped at OpenAI's 4: llama.cpp and
    vLLM take any number, and dropping a format stop would let turns run on."""
    return list(dict.fromkeys([*fmt.stop, *_client_stops(client_stop)]))


def completion_request(
    chat_body: Mapping[str, Any],
    fmt: InstructFormat,
    prompt: str,
    *,
    keep_special_tokens: bool = False,
) -> dict[str, Any]:
    """A /v1/completions body for `prompt`, carrying over sampling fields and unknown extras.

    `keep_special_tokens=True` adds `skip_special_tokens: false` (vLLM) when a stop string is
    a control token, which that server would otherwise strip before matching stops.
    """
    body = {k: v for k, v in chat_body.items() if k not in CHAT_ONLY}
    if "max_tokens" not in body and "max_completion_tokens" in chat_body:
        body["max_tokens"] = chat_body["max_completion_tokens"]
    if chat_body.get("stream") and "stream_options" in chat_body:
        body["stream_options"] = chat_body["stream_options"]  # keeps include_usage working
    body["prompt"] = prompt
    stops = merged_stops(fmt, chat_body.get("stop"))
    if stops:
        body["stop"] = stops
    else:
        body.pop("stop", None)
    if keep_special_tokens and fmt.special_stops:
        body.setdefault("skip_special_tokens", False)
    return body


def cut_at_stop(text: str, stops: Sequence[str]) -> tuple[str, bool]:
    """Text up to the first stop string that leaked through, and whether one did."""
    cut = min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


def chat_completion_from(
    completion: Mapping[str, Any], *, stop: Sequence[str] = ()
) -> dict[str, Any]:
    """A `text_completion` JSON as a `chat.completion`; a leaked stop string is cut off."""
    if "error" in completion:
        return dict(completion)
    out: dict[str, Any] = {k: v for k, v in completion.items() if k not in ("object", "choices")}
    out["object"] = "chat.completion"
    choices = []
    for i, choice in enumerate(completion.get("choices") or []):
        text, cut = cut_at_stop(str(choice.get("text") or ""), stop)
        choices.append(
            {
                "index": choice.get("index", i),
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": "stop" if cut else choice.get("finish_reason"),
            }
        )
    out["choices"] = choices
    return out


def _held_tail(text: str, stops: Sequence[str]) -> int:
    """Length of the longest end of `text` that could still grow into a stop string."""
    best = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), best, -1):
            if text.endswith(s[:k]):
                best = k
                break
    return best


class ChatStreamConverter:
    """Turns parsed /v1/completions SSE events into `chat.completion.chunk` dicts.

    Text that could be the start of a stop string is held back until the next event shows
    whether it is one, so a stop string split across events never reaches the client.
    """

    def __init__(self, stop: Sequence[str] = ()) -> None:
        self._stops = [s for s in stop if s]
        self._ids: dict[str, Any] = {}
        self._started = False
        self._seen: set[int] = set()
        self._buffers: dict[int, str] = {}
        self._done: set[int] = set()

    def _chunk(self, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {**self._ids, "object": "chat.completion.chunk", "choices": choices, **extra}

    def _delta(self, index: int, delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}

    def feed(self, event: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Chunks for one upstream event (an `{"error": ...}` event passes through as is)."""
        if "error" in event:
            return [dict(event)]
        out: list[dict[str, Any]] = []
        if not self._started:
            self._started = True
            self._ids = {k: event[k] for k in ("id", "created", "model") if k in event}
            if "system_fingerprint" in event:
                self._ids["system_fingerprint"] = event["system_fingerprint"]
        for i, choice in enumerate(event.get("choices") or []):
            index = int(choice.get("index", i))
            if index not in self._seen:  # each choice opens with the role, as OpenAI sends it
                self._seen.add(index)
                role = {"role": "assistant", "content": ""}
                out.append(self._chunk([self._delta(index, role, None)]))
            out.extend(self._choice(index, choice))
        if event.get("usage") is not None:
            if out and out[-1]["choices"] and out[-1]["choices"][-1]["finish_reason"]:
                out[-1]["usage"] = event["usage"]
            else:
                out.append(self._chunk([], usage=event["usage"]))
        return out

    def _choice(self, index: int, choice: Mapping[str, Any]) -> list[dict[str, Any]]:
        if index in self._done:
            return []  # already finished at a stop string the upstream did not honour
        buf = self._buffers.get(index, "") + str(choice.get("text") or "")
        finish = choice.get("finish_reason")
        text, cut = cut_at_stop(buf, self._stops)
        out: list[dict[str, Any]] = []
        if cut or finish:
            self._buffers.pop(index, None)
            self._done.add(index)
            if text:
                out.append(self._chunk([self._delta(index, {"content": text}, None)]))
            out.append(self._chunk([self._delta(index, {}, "stop" if cut else finish)]))
            return out
        hold = _held_tail(buf, self._stops)
        emit, self._buffers[index] = buf[: len(buf) - hold], buf[len(buf) - hold :]
        if emit:
            out.append(self._chunk([self._delta(index, {"content": emit}, None)]))
        return out

    def finish(self) -> list[dict[str, Any]]:
        """At `[DONE]`: flush held-back text of choices that never sent a finish_reason."""
        out = []
        for index, text in sorted(self._buffers.items()):
            if text:
                out.append(self._chunk([self._delta(index, {"content": text}, None)]))
        self._buffers.clear()
        return out
