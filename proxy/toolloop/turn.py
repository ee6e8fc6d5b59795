"""One model turn read from its Chat Completions chunks (or its one JSON answer): the text and
thinking as they come, the tool calls put together from their streamed pieces (pure).

llama.cpp streams a call as a first delta `{index, id, type, function: {name, arguments: ""}}`
and then `{index, function: {arguments: "<piece>"}}` (common/chat.cpp
`common_chat_msg_diff_to_json_oaicompat`), and may send a longer name again while it parses;
vLLM's tool parsers send `{index, type, id, function: {name}}` first and the arguments after,
the last piece sometimes in the chunk that says `finish_reason: "tool_calls"`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Call:
    """A tool call as the model made it."""

    index: int
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass(frozen=True)
class Shown:
    """Text and thinking of a chunk, for the client as they arrive."""

    content: str = ""
    reasoning: str = ""


@dataclass
class Turn:
    """What the model said in one turn."""

    content: str = ""
    reasoning: str = ""
    calls: dict[int, Call] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    id: str | None = None
    model: str | None = None
    created: int | None = None

    def _meta(self, chunk: dict[str, Any]) -> None:
        if self.id is None and isinstance(chunk.get("id"), str):
            self.id = chunk["id"]
        if self.model is None and isinstance(chunk.get("model"), str):
            self.model = chunk["model"]
        created = chunk.get("created")
        if self.created is None and isinstance(created, int) and not isinstance(created, bool):
            self.created = created
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]

    def _call(self, piece: dict[str, Any], position: int) -> None:
        index = piece.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            index = position
        call = self.calls.setdefault(index, Call(index))
        if isinstance(piece.get("id"), str) and piece["id"]:
            call.id = piece["id"]
        function = piece.get("function")
        if not isinstance(function, dict):
            return
        name = function.get("name")
        if isinstance(name, str) and name:
            # A name sent again, grown as the server parsed more of it, replaces the first.
            call.name = name if name.startswith(call.name) else call.name + name
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            call.arguments += arguments
        elif isinstance(arguments, dict):  # a server that sends them parsed
            call.arguments += json.dumps(arguments, ensure_ascii=False)

    def feed(self, chunk: dict[str, Any]) -> Shown:
        """Take one `chat.completion.chunk`; what of it the client may see at once."""
        self._meta(chunk)
        content = reasoning = ""
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # one answer: the first choice
            delta = choice.get("delta")
            delta = delta if isinstance(delta, dict) else {}
            if isinstance(delta.get("content"), str):
                content += delta["content"]
            thinking = delta.get("reasoning_content", delta.get("reasoning"))
            if isinstance(thinking, str):
                reasoning += thinking
            for position, piece in enumerate(delta.get("tool_calls") or []):
                if isinstance(piece, dict):
                    self._call(piece, position)
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
        self.content += content
        self.reasoning += reasoning
        return Shown(content, reasoning)

    def ordered_calls(self) -> list[Call]:
        return [self.calls[index] for index in sorted(self.calls)]

    def written_tokens(self) -> int:
        """The tokens the model wrote: the server's count, else about four characters each."""
        usage = self.usage or {}
        count = usage.get("completion_tokens")
        if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
            return count
        written = len(self.content) + len(self.reasoning)
        written += sum(len(call.name) + len(call.arguments) for call in self.calls.values())
        return written // 4


def completion_chunk(payload: dict[str, Any]) -> dict[str, Any]:
    """A whole `chat.completion` (a server that ignored `stream`) as one chunk to feed."""
    chunk = {key: value for key, value in payload.items() if key != "choices"}
    choices = []
    for choice in payload.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        message = choice.get("message")
        delta = dict(message) if isinstance(message, dict) else {}
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            delta["tool_calls"] = [
                {**call, "index": index} if isinstance(call, dict) else call
                for index, call in enumerate(calls)
            ]
        rest = {key: value for key, value in choice.items() if key != "message"}
        choices.append({**rest, "delta": delta})
    chunk["choices"] = choices
    return chunk
