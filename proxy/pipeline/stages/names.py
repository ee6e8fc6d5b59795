"""Stage: every attached document gets a name people recognise, the same everywhere it shows."""

from __future__ import annotations

import dataclasses
from typing import Any

from proxy.documents.model import ParsedDocument
from proxy.documents.naming import extension, given_name, numbered_name, titled_name
from proxy.errors import ProxyError
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.references import FileRef, attached_marker
from proxy.pipeline.services import Services


async def _sniffed_kind(ref: FileRef, services: Services) -> str | None:
    # The parser's detection: off the event loop, and done once for the documents stage too.
    try:
        return str(await services.parser.kind_of(ref.name, ref.data))
    except ProxyError:
        return None  # the parser refuses it with the full reason later


def provisional(ref: FileRef, position: int, kind: str | None = None) -> FileRef:
    """The ref under its given basename, or `document-N.<ext>` (`kind` the sniffed one, for a
    name without an extension) until its title is known."""
    name = given_name(ref.name)
    if name is not None:
        return ref if name == ref.name else dataclasses.replace(ref, name=name)
    return dataclasses.replace(ref, name=numbered_name(ref.name, position, kind), named=False)


def needs_sniffing(ref: FileRef) -> bool:
    """Only a document we must name, whose name has no extension, is named after its kind."""
    return given_name(ref.name) is None and not extension(ref.name)


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


async def name_references(exchange: Exchange, services: Services) -> None:
    # Old files come first in the conversation, so N stays the same from turn to turn.
    position = 0
    for refs in (exchange.old_refs, exchange.new_refs):
        for index, ref in enumerate(refs):
            position += 1
            kind = await _sniffed_kind(ref, services) if needs_sniffing(ref) else None
            named = provisional(ref, position, kind)
            if named is not ref:
                rename_marker(exchange.messages, ref, named.name, exchange.control_tokens)
                refs[index] = named


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
