"""Turning a /v1/completions answer (JSON or SSE) back into the chat shape the client asked for."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.formats import ChatStreamConverter, chat_completion_from
from proxy.upstream.sse import event_data


class TextCompletionConverter:
    """Converts one response of a text-completion upstream; never lets a stop string through."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = list(stops)
        self.stream = ChatStreamConverter(self.stops)

    def convert_json(self, payload: dict[str, Any]) -> dict[str, Any]:
        return chat_completion_from(payload, stop=self.stops)

    def convert_event(self, event: bytes, payload: Any) -> list[bytes | dict[str, Any]]:
        if isinstance(payload, dict):
            return list(self.stream.feed(payload))
        data = event_data(event)
        if data is not None and data.strip() == b"[DONE]":
            return [*self.stream.finish(), event]
        return [event]  # comments and anything else go through as they came

    def convert_error(self, status: int, payload: Any) -> dict[str, Any] | None:
        return None  # the completion servers answer errors in OpenAI's shape already
