"""Stage: every attached document gets a name people recognise, the same everywhere it shows."""

from __future__ import annotations

import dataclasses

from proxy.documents.naming import extension, given_name, numbered_name
from proxy.errors import ProxyError
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.file_refs import FileRef
from proxy.pipeline.renaming import rename_marker
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
