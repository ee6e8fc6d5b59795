"""Ollama's native chat answers as OpenAI's (pure): one JSON object, or NDJSON lines read as
events, into `chat.completion` / `chat.completion.chunk`, as Ollama's own OpenAI layer writes
them (openai/openai.go `ToChatCompletion`, `ToStreamChunks`, `FinishChunk`, `NewError`;
middleware/openai.go `ChatWriter`)."""

from __future__ import annotations

import json
import secrets
import string
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from proxy.upstream.overflow import inner_message, says_overflow
from proxy.upstream.sse import event_data

FINGERPRINT = "fp_ollama"
CALL_ID_LETTERS = string.ascii_lowercase + string.digits


def error_type(status: int) -> str:
    return {400: "invalid_request_error", 404: "not_found_error"}.get(status, "api_error")


def openai_error(status: int, payload: Any) -> dict[str, Any]:
    """Ollama's `{"error": "..."}` as OpenAI's error object (the message of llama-server's
    answer when Ollama passes that through as its error text)."""
    message = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(message, dict):
        message = message.get("message")
    if isinstance(message, str):
        message = inner_message(message)
    else:
        message = json.dumps(payload) if payload is not None else f"Ollama answered {status}"
    return {"error": {"message": message, "type": error_type(status), "param": None, "code": None}}


def _created(stamp: Any) -> int:
    if isinstance(stamp, str):
        try:
            return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())
        except ValueError:
            pass
    return int(time.time())


def call_id() -> str:
    """An id for a tool call Ollama sent without one (server/routes.go toolCallId)."""
    return "call_" + "".join(secrets.choice(CALL_ID_LETTERS) for _ in range(8))


def tool_calls(calls: Any) -> list[dict[str, Any]]:
    out = []
    for position, call in enumerate(calls if isinstance(calls, list) else []):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        index = function.get("index")
        out.append(
            {
                "index": index if isinstance(index, int) else position,
                "id": call.get("id") or call_id(),
                "type": "function",
                "function": {
                    "name": function.get("name"),
                    "arguments": json.dumps(function.get("arguments") or {}),
                },
            }
        )
    return out


def usage(answer: dict[str, Any]) -> dict[str, int]:
    prompt = answer.get("prompt_eval_count") or 0
    completion = answer.get("eval_count") or 0
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def finish_reason(reason: Any, called: bool) -> str:
    reason = reason if isinstance(reason, str) and reason else "stop"
    return "tool_calls" if reason == "stop" and called else reason


@dataclass
class NativeAnswer:
    """What came back, for the decision record: Ollama's own count of the prompt."""

    prompt_tokens: int | None = None
    done_reason: str | None = None


@dataclass
class OllamaChatConverter:
    """Converts one answer of Ollama's `/api/chat` into Chat Completions shapes.

    `include_usage` is the client's `stream_options.include_usage`; `on_done` learns Ollama's
    count of the prompt when the answer ends."""

    include_usage: bool = False
    on_done: Callable[[NativeAnswer], None] | None = None
    hint: str = ""  # how to raise the window, added to Ollama's refusal of a prompt over it
    id: str = field(default_factory=lambda: "chatcmpl-" + uuid.uuid4().hex[:24])
    _created: int | None = None
    _started: bool = False
    _called: bool = False

    def _done(self, answer: dict[str, Any]) -> None:
        if self.on_done is not None:
            count = answer.get("prompt_eval_count")
            reason = answer.get("done_reason")
            self.on_done(
                NativeAnswer(
                    count if isinstance(count, int) else None,
                    reason if isinstance(reason, str) else None,
                )
            )

    def convert_json(self, payload: dict[str, Any]) -> dict[str, Any]:
        if "error" in payload:
            return openai_error(500, payload)
        self._done(payload)
        message = payload.get("message") if isinstance(payload.get("message"), dict) else {}
        assert isinstance(message, dict)
        calls = tool_calls(message.get("tool_calls"))
        out_message: dict[str, Any] = {
            "role": message.get("role") or "assistant",
            "content": message.get("content") or "",
        }
        if calls:
            out_message["tool_calls"] = calls
        if message.get("thinking"):
            out_message["reasoning"] = message["thinking"]
        choice: dict[str, Any] = {
            "index": 0,
            "message": out_message,
            "finish_reason": finish_reason(payload.get("done_reason"), bool(calls)),
        }
        if payload.get("logprobs"):
            choice["logprobs"] = {"content": payload["logprobs"]}
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": _created(payload.get("created_at")),
            "model": payload.get("model"),
            "system_fingerprint": FINGERPRINT,
            "choices": [choice],
            "usage": usage(payload),
        }

    def convert_error(self, status: int, payload: Any) -> dict[str, Any]:
        error = openai_error(status, payload)
        message = error["error"]["message"]
        # Its refusal of a prompt over the window (truncate: false): runner.go errorInputTooLong,
        # llm/llama_server.go "longer than the context length", llama-server's own from 0.30.
        if status == 400 and says_overflow(message):
            error["error"].update(code="context_length_exceeded", param="messages")
            if self.hint:
                error["error"]["message"] = f"{message}; {self.hint}"
        return error

    def _chunk(self, payload: dict[str, Any], choices: list[dict[str, Any]]) -> dict[str, Any]:
        if self._created is None:
            self._created = _created(payload.get("created_at"))
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": payload.get("model"),
            "system_fingerprint": FINGERPRINT,
            "choices": choices,
        }

    def _deltas(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        message = payload.get("message")
        message = message if isinstance(message, dict) else {}
        content = message.get("content") or ""
        thinking = message.get("thinking") or ""
        calls = tool_calls(message.get("tool_calls"))
        logprobs = payload.get("logprobs")
        if payload.get("done") and self._started and not (content or thinking or calls or logprobs):
            return []  # the metrics-only trailer: OpenAI goes straight to the finish chunk
        role = {} if self._started else {"role": "assistant"}
        self._started = True
        self._called = self._called or bool(calls)
        deltas: list[dict[str, Any]] = []
        if thinking and (content or calls):
            deltas.append({**role, "reasoning": thinking})  # thinking first, on its own chunk
            role, thinking = {}, ""
        delta: dict[str, Any] = {**role, "content": content}
        if calls:
            delta["tool_calls"] = calls
        if thinking:
            delta["reasoning"] = thinking
        deltas.append(delta)
        out = []
        for one in deltas:
            choice: dict[str, Any] = {"index": 0, "delta": one, "finish_reason": None}
            if logprobs and one is deltas[-1]:
                choice["logprobs"] = {"content": logprobs}
            out.append(self._chunk(payload, [choice]))
        return out

    def convert_event(self, event: bytes, payload: Any) -> list[bytes | dict[str, Any]]:
        if not isinstance(payload, dict):
            data = event_data(event)
            if data is not None and data.strip() == b"[DONE]":
                return [event]
            return []  # nothing else is Ollama's to say
        if "error" in payload:
            return [openai_error(500, payload)]  # broke off mid-stream: the SDK raises it
        out: list[bytes | dict[str, Any]] = list(self._deltas(payload))
        if payload.get("done"):
            self._done(payload)
            finish = {
                "index": 0,
                "delta": {},
                "finish_reason": finish_reason(payload.get("done_reason"), self._called),
            }
            out.append(self._chunk(payload, [finish]))
            if self.include_usage:
                out.append({**self._chunk(payload, []), "usage": usage(payload)})
        return out
