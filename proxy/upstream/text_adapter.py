"""Turning a /v1/completions answer (JSON or SSE) back into the chat shape the client asked for."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.formats import ChatStreamConverter, chat_completion_from
from proxy.upstream.sse import event_data


class TextCompletionConverter:
    """Converts one response of a text-completion upstream; never lets a stop string through.

    `trim_start`: the answer's leading whitespace is dropped (a prompt that ends `Answer:` is
    answered ` 50.`, which reads as an odd indent in a chat)."""

    def __init__(self, stops: Sequence[str], *, trim_start: bool = False) -> None:
        self.stops = list(stops)
        self.stream = ChatStreamConverter(self.stops)
        self.trim_start = trim_start
        self._begun: set[int] = set()  # choices whose text has begun

    def convert_json(self, payload: dict[str, Any]) -> dict[str, Any]:
        converted = chat_completion_from(payload, stop=self.stops)
        if self.trim_start:
            for choice in converted.get("choices") or []:
                message = choice.get("message")
                if isinstance(message, dict) and isinstance(message.get("content"), str):
                    message["content"] = message["content"].lstrip()
        return converted

    def convert_event(self, event: bytes, payload: Any) -> list[bytes | dict[str, Any]]:
        if isinstance(payload, dict):
            return [self._trimmed(chunk) for chunk in self.stream.feed(payload)]
        data = event_data(event)
        if data is not None and data.strip() == b"[DONE]":
            return [*(self._trimmed(chunk) for chunk in self.stream.finish()), event]
        return [event]  # comments and anything else go through as they came

    def _trimmed(self, chunk: dict[str, Any]) -> dict[str, Any]:
        if not self.trim_start:
            return chunk
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            index = choice.get("index", 0) if isinstance(choice, dict) else 0
            if not isinstance(delta, dict) or not isinstance(delta.get("content"), str):
                continue
            if index not in self._begun and "role" not in delta:
                delta["content"] = delta["content"].lstrip()
                if delta["content"]:
                    self._begun.add(index)
        return chunk

    def convert_error(self, status: int, payload: Any) -> dict[str, Any] | None:
        return None  # the completion servers answer errors in OpenAI's shape already
