"""OpenAI's vector stores API on the proxy: stores, their files, file batches, search."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from proxy.errors import ProxyError
from proxy.http.body import held_body, parse_body, read_body
from proxy.http.keys import CALLER, ROUTE, SERVICES
from proxy.pipeline.exchange import Caller
from proxy.stores.service import VectorStores

Handler = Callable[[web.Request], Awaitable[web.Response]]


def _stores(request: web.Request) -> VectorStores:
    request[ROUTE] = "vector_stores"
    stores = request.app[SERVICES].vector_stores
    if stores is None:
        raise ProxyError("vector stores are not available here", status=404, code="not_found")
    return stores


async def _body(request: web.Request) -> Any:
    """The JSON body; none at all (the SDK's cancel) reads as an empty object."""
    server = request.app[SERVICES].settings.server
    held = held_body(request)
    raw = await read_body(request, server)
    if not raw.strip():
        return {}
    body = await parse_body(raw, server.max_json_values, held)
    del raw
    if held is not None:
        held.raw_dropped()
    return body


def _reply(request: web.Request, payload: dict[str, Any]) -> web.Response:
    # How often the SDK's *_and_poll helpers ask again while files are being indexed.
    poll = request.app[SERVICES].settings.vector_stores.poll_after_ms
    return web.json_response(payload, headers={"openai-poll-after-ms": str(poll)})


def _route(
    call: Callable[[VectorStores, Caller, web.Request], Awaitable[dict[str, Any]]],
) -> Handler:
    async def handler(request: web.Request) -> web.Response:
        stores = _stores(request)
        return _reply(request, await call(stores, request[CALLER], request))

    return handler


async def _create(stores: VectorStores, caller: Caller, request: web.Request) -> dict[str, Any]:
    return await stores.create(caller, await _body(request))


async def _list(stores: VectorStores, caller: Caller, request: web.Request) -> dict[str, Any]:
    return await stores.list_stores(caller, request.query)


async def _retrieve(stores: VectorStores, caller: Caller, request: web.Request) -> dict[str, Any]:
    return await stores.retrieve(caller, request.match_info["store_id"])


async def _modify(stores: VectorStores, caller: Caller, request: web.Request) -> dict[str, Any]:
    return await stores.modify(caller, request.match_info["store_id"], await _body(request))


async def _delete(stores: VectorStores, caller: Caller, request: web.Request) -> dict[str, Any]:
    return await stores.delete(caller, request.match_info["store_id"])


async def _search(stores: VectorStores, caller: Caller, request: web.Request) -> dict[str, Any]:
    return await stores.search(caller, request.match_info["store_id"], await _body(request))


async def _attach(stores: VectorStores, caller: Caller, request: web.Request) -> dict[str, Any]:
    return await stores.files.attach(caller, request.match_info["store_id"], await _body(request))


async def _files(stores: VectorStores, caller: Caller, request: web.Request) -> dict[str, Any]:
    return await stores.files.page(caller, request.match_info["store_id"], request.query)


async def _file(stores: VectorStores, caller: Caller, request: web.Request) -> dict[str, Any]:
    return await stores.files.get(
        caller, request.match_info["store_id"], request.match_info["file_id"]
    )


async def _update_file(
    stores: VectorStores, caller: Caller, request: web.Request
) -> dict[str, Any]:
    store_id, file_id = (request.match_info["store_id"], request.match_info["file_id"])
    return await stores.files.update(caller, store_id, file_id, await _body(request))


async def _detach(stores: VectorStores, caller: Caller, request: web.Request) -> dict[str, Any]:
    return await stores.files.detach(
        caller, request.match_info["store_id"], request.match_info["file_id"]
    )


async def _content(stores: VectorStores, caller: Caller, request: web.Request) -> dict[str, Any]:
    return await stores.files.content(
        caller, request.match_info["store_id"], request.match_info["file_id"]
    )


async def _create_batch(
    stores: VectorStores, caller: Caller, request: web.Request
) -> dict[str, Any]:
    return await stores.batches.create(caller, request.match_info["store_id"], await _body(request))


async def _batch(stores: VectorStores, caller: Caller, request: web.Request) -> dict[str, Any]:
    return await stores.batches.get(
        caller, request.match_info["store_id"], request.match_info["batch_id"]
    )


async def _cancel_batch(
    stores: VectorStores, caller: Caller, request: web.Request
) -> dict[str, Any]:
    return await stores.batches.cancel(
        caller, request.match_info["store_id"], request.match_info["batch_id"]
    )


async def _batch_files(
    stores: VectorStores, caller: Caller, request: web.Request
) -> dict[str, Any]:
    store_id, batch_id = (request.match_info["store_id"], request.match_info["batch_id"])
    return await stores.batches.files(caller, store_id, batch_id, request.query)


def add_routes(app: web.Application) -> None:
    store = "/v1/vector_stores/{store_id}"
    routes = [
        ("POST", "/v1/vector_stores", _create),
        ("GET", "/v1/vector_stores", _list),
        ("GET", store, _retrieve),
        ("POST", store, _modify),
        ("DELETE", store, _delete),
        ("POST", f"{store}/search", _search),
        ("POST", f"{store}/files", _attach),
        ("GET", f"{store}/files", _files),
        ("GET", f"{store}/files/{{file_id}}", _file),
        ("POST", f"{store}/files/{{file_id}}", _update_file),
        ("DELETE", f"{store}/files/{{file_id}}", _detach),
        ("GET", f"{store}/files/{{file_id}}/content", _content),
        ("POST", f"{store}/file_batches", _create_batch),
        ("GET", f"{store}/file_batches/{{batch_id}}", _batch),
        ("POST", f"{store}/file_batches/{{batch_id}}/cancel", _cancel_batch),
        ("GET", f"{store}/file_batches/{{batch_id}}/files", _batch_files),
    ]
    for method, path, call in routes:
        app.router.add_route(method, path, _route(call))
