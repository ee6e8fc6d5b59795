"""Stage: parse the new documents (the parser caches by sha256, so resent ones are free)."""

from __future__ import annotations

from proxy.pipeline.exchange import Exchange
from proxy.pipeline.parsing import learn_control_tokens, parse_refs
from proxy.pipeline.services import Services


async def parse_new_documents(exchange: Exchange, services: Services) -> None:
    if not exchange.new_refs and not exchange.old_refs:
        return
    exchange.status("Deciding how to handle the document(s)...")
    exchange.new_documents = await parse_refs(exchange.new_refs, exchange, services)
    await learn_control_tokens(exchange, services)
