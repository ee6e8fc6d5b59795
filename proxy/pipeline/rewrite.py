"""Replacing the text of the last user message, keeping its images (pure)."""

from __future__ import annotations

from typing import Any

from proxy.pipeline.file_refs import last_user_index


def replace_last_user_text(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """The messages with the last user message's text parts replaced by `text`; images stay."""
    index = last_user_index(messages)
    if index is None:
        return messages
    message = dict(messages[index])
    content = message.get("content")
    if isinstance(content, list):
        others = [
            part for part in content if not (isinstance(part, dict) and part.get("type") == "text")
        ]
        message["content"] = [{"type": "text", "text": text}, *others]
    else:
        message["content"] = text
    return [*messages[:index], message, *messages[index + 1 :]]
