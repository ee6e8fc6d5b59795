"""Stage: parse the new documents (the parser caches by sha256, so resent ones are free)."""

from __future__ import annotations

from proxy.documents.model import ParsedDocument
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.references import FileRef
from proxy.pipeline.services import Services


async def parse_refs(
    refs: list[FileRef], exchange: Exchange, services: Services
) -> list[ParsedDocument]:
    return [await services.parser.parse(ref.name, ref.data, exchange.status) for ref in refs]


async def parse_new_documents(exchange: Exchange, services: Services) -> None:
    if not exchange.new_refs and not exchange.old_refs:
        return
    exchange.status("Deciding how to handle the document(s)...")
    exchange.new_documents = await parse_refs(exchange.new_refs, exchange, services)
    exchange.control_tokens = await services.introspection.declared_tokens()
