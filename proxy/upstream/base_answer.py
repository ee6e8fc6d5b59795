"""A base model's answer as a chat answer: from its first word to the end of its first sentence."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from proxy.upstream.text_adapter import TextCompletionConverter

# A sentence ends at . ! ? (closed perhaps by a quote or bracket) where the next one starts: a
# capital, a digit or an opening quote after the space ("e.g. the" and "2.5 GHz" go on).
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'”’)\]]*(?=\s+[\"'“‘(\[]?[A-Z0-9])")
# What could still turn out to end a sentence: its mark, closing quotes, spaces, nothing after.
_OPEN_END = re.compile(r"[.!?][\"'”’)\]]*\s*$")


def first_sentence(text: str) -> str:
    """`text` without leading whitespace, cut after its first sentence."""
    text = text.lstrip()
    end = _SENTENCE_END.search(text)
    return text[: end.end()] if end else text


class BaseAnswerConverter(TextCompletionConverter):
    """A completion-shaped prompt's answer, streamed or not: the model's line, from its first
    word (a prompt ending `Answer:` is answered ` 50.`) to the end of its first sentence. A
    pre-trained model, having answered, goes on copying the passage it answered from (`The
    default weight is 50. The default weight is used for globs that ...`)."""

    def __init__(self, stops: Sequence[str]) -> None:
        super().__init__(stops)
        self._text: dict[int, str] = {}  # per choice: what was received
        self._sent: dict[int, int] = {}  # how much of it went to the client
        self._ended: set[int] = set()  # choices whose first sentence is out

    def convert_json(self, payload: dict[str, Any]) -> dict[str, Any]:
        converted = super().convert_json(payload)
        for choice in converted.get("choices") or []:
            message = choice.get("message")
            if isinstance(message, dict) and isinstance(message.get("content"), str):
                content = message["content"]
                message["content"] = first_sentence(content)
                if message["content"] != content.strip():
                    choice["finish_reason"] = "stop"
        return converted

    def convert_event(self, event: bytes, payload: Any) -> list[bytes | dict[str, Any]]:
        out: list[bytes | dict[str, Any]] = []
        for item in super().convert_event(event, payload):
            if isinstance(item, dict):
                out.extend(self._chunk(item))
            else:
                out.append(item)
        return out

    def _chunk(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        choices = chunk.get("choices")
        if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
            return [chunk]  # usage alone, or an error event
        choice = choices[0]
        index = int(choice.get("index", 0))
        if index in self._ended:
            return []  # the answer is out; the rest is the model running on
        delta = choice.get("delta") or {}
        if "role" in delta:
            return [chunk]
        text = self._text.get(index, "") + str(delta.get("content") or "")
        self._text[index] = text
        answer = first_sentence(text)
        leading = len(text) - len(text.lstrip())
        ended = len(answer) < len(text) - leading
        finish = choice.get("finish_reason")
        if ended or finish:
            upto = leading + len(answer)
        else:
            # Hold back what may still end the sentence; the start's spaces never go out.
            held = _OPEN_END.search(answer)
            upto = leading + (held.start() if held else len(answer))
        sent = self._sent.get(index, leading)
        new = text[max(sent, leading) : upto]
        self._sent[index] = max(sent, upto)
        out = []
        if new:
            out.append(
                {**chunk, "choices": [{**choice, "delta": {"content": new}, "finish_reason": None}]}
            )
        if ended or finish:
            self._ended.add(index)
            out.append(
                {
                    **chunk,
                    "choices": [
                        {**choice, "delta": {}, "finish_reason": "stop" if ended else finish}
                    ],
                }
            )
        return out
