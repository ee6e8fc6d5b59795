"""A document renamed after it was referred to: its `[attached: …]` marker and its ref follow."""

from __future__ import annotations

import dataclasses
from typing import Any

from proxy.documents.model import ParsedDocument
from proxy.documents.naming import titled_name
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.file_refs import FileRef, attached_marker


def rename_marker(
    messages: list[dict[str, Any]], ref: FileRef, name: str, tokens: tuple[str, ...] = ()
) -> None:
    """An earlier message's `[attached: old]` marker (see find_references) follows the rename."""
    if ref.new or not 0 <= ref.message_index < len(messages):
        return
    message = messages[ref.message_index]
    content = message.get("content")
    if not isinstance(content, list):
        return
    # A part with a file id and no filename was marked with the id (see find_references).
    for shown in (ref.name, ref.locator) if ref.origin == "file_id" else (ref.name,):
        old = {"type": "text", "text": attached_marker(shown, tokens)}
        if old in content:
            parts = list(content)
            parts[parts.index(old)] = {"type": "text", "text": attached_marker(name, tokens)}
            messages[ref.message_index] = {**message, "content": parts}
            return


def titled(
    refs: list[FileRef], index: int, document: ParsedDocument, exchange: Exchange
) -> ParsedDocument:
    """After parsing: a document we named `document-N` takes its own title, when it has one.

    `refs[index]` and its marker are renamed too, so every later mention agrees.
    """
    ref = refs[index]
    name = None if ref.named else titled_name(document.title, ref.name, document.kind)
    if name is None or name == ref.name:
        return document
    rename_marker(exchange.messages, ref, name, exchange.control_tokens)
    refs[index] = dataclasses.replace(ref, name=name)
    return dataclasses.replace(document, name=name)
