"""Stage: the vector stores a request searches (enrich.vector_store_ids, X-Enrich-Vector-Stores,
a Responses file_search tool), each one the caller's and not expired."""

from __future__ import annotations

from proxy.errors import BadRequest
from proxy.pipeline.exchange import Exchange, StoreSearch
from proxy.pipeline.parsing import learn_control_tokens
from proxy.pipeline.services import Services


async def find_stores(exchange: Exchange, services: Services) -> None:
    asked = exchange.file_search
    ids = [*exchange.options.vector_store_ids, *(asked.vector_store_ids if asked else ())]
    if not ids:
        return
    stores = services.vector_stores
    if stores is None:
        raise BadRequest("vector stores are not available on this proxy", code="unsupported")
    found = [await stores.usable(exchange.caller, store_id) for store_id in dict.fromkeys(ids)]
    exchange.store_search = StoreSearch(found)
    exchange.decision.vector_stores = [store.id for store in found]
    if not exchange.new_refs and not exchange.old_refs:  # else the documents stage did
        await learn_control_tokens(exchange, services)
