"""`upstream.responses: native`: the Responses API of an upstream that speaks it, enriched, and
every response and conversation id it gives out owned by the key that created it.

An id is reachable only by its owner (or an admin key): another key's id, and an id the proxy
never saw created, get the same 404 and never reach the upstream, which holds them all under
the proxy's own credential. That goes for `GET`/`DELETE /v1/responses/{id}`, its
`input_items` and `cancel`, `/v1/conversations/{id}` and its items, and the
`previous_response_id` and `conversation` a request names.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

from proxy import jsonio
from proxy.errors import BadRequest, ProxyError, bad_upstream
from proxy.http.body import (
    held_body,
    parse_body,
    read_body,
    read_json_body,
    serialise,
)
from proxy.http.chained_turns import ChainedTurn
from proxy.http.chat import forward_exchange, prepare_or_fail
from proxy.http.decorate import Transform
from proxy.http.keys import CALLER, REQUEST_ID, ROUTE, SERVICES
from proxy.http.passthrough import relay_to_upstream
from proxy.http.recording import recorded
from proxy.http.responses import cited, off_loop_if_long
from proxy.pipeline.exchange import Caller
from proxy.pipeline.services import Services
from proxy.responses.answer import Cited, Ids
from proxy.responses.events import failure_events, sse
from proxy.responses.items import translate_input
from proxy.responses.native import NativeStream, cite_response, patch_input
from proxy.responses.owners import Kind, Owners, not_found
from proxy.responses.replay import events_from_response
from proxy.responses.request import take_file_search
from proxy.upstream.headers import client_response_headers
from proxy.upstream.relay import is_event_stream, relay_response
from proxy.upstream.sse import event_json, sse_events

# POST /v1/responses/{these}: no id, a request body that may name ids.
BODY_ROUTES = frozenset({"input_tokens", "compact"})


def _owners(services: Services) -> Owners:
    assert services.owners is not None  # made by build_services in native mode
    return services.owners


def responses_need_chat() -> ProxyError:
    """The native Responses API was asked of a model configured for text completions."""
    return ProxyError(
        "upstream.responses is native, but this model is set to a text adapter; set "
        "upstream.responses: proxy, or models.<name>.adapter: chat",
        status=500,
        type="server_error",
        code="responses_need_chat",
    )


async def check_owned(
    services: Services, caller: Caller, kind: Kind, ident: str, param: str
) -> None:
    """404, exactly as for an unknown id, unless `caller` created `ident` (or is an admin)."""
    owners = _owners(services)
    if not await asyncio.to_thread(owners.may_use, kind, ident, caller.name, caller.admin):
        raise not_found(kind, ident, param)


async def check_references(services: Services, caller: Caller, body: dict[str, Any]) -> None:
    """The ids a Responses request builds on: `previous_response_id`, `conversation`."""
    previous = body.get("previous_response_id")
    if previous is not None:
        if not isinstance(previous, str):
            raise BadRequest("previous_response_id: must be a string", param="previous_response_id")
        await check_owned(services, caller, "response", previous, "previous_response_id")
    conversation = body.get("conversation")
    if conversation is not None:
        ident = conversation.get("id") if isinstance(conversation, dict) else conversation
        if not isinstance(ident, str):
            raise BadRequest(
                "conversation: must be an id, or an object with one", param="conversation"
            )
        await check_owned(services, caller, "conversation", ident, "conversation")


class Watched:
    """The upstream's events on their way to the client: the response's id is recorded for its
    owner before the client can read it, and a stream cut short ends the way the Responses API
    ends a failed one (`error`, `response.failed`) after the last event that went out."""

    def __init__(
        self,
        record: Callable[[str], Awaitable[None]],
        answered: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
    ) -> None:
        self.record = record
        self.answered = answered
        self.response: dict[str, Any] | None = None
        self.sequence = -1
        self.recorded = False

    async def finish(self, event: dict[str, Any]) -> None:
        """An answer the upstream finished, as it wrote it (before the sources were added):
        kept for the turns chained to it before the client can chain one."""
        response = event.get("response")
        ended = event.get("type") in ("response.completed", "response.incomplete")
        if ended and isinstance(response, dict) and self.answered is not None:
            await self.answered(response)

    async def see(self, event: dict[str, Any]) -> None:
        number = event.get("sequence_number")
        if isinstance(number, int):
            self.sequence = max(self.sequence, number)
        response = event.get("response")
        if isinstance(response, dict) and isinstance(response.get("id"), str):
            self.response = response
            if not self.recorded:
                self.recorded = True
                await self.record(response["id"])

    def ending(self, error: ProxyError) -> bytes:
        events: list[dict[str, Any]] = []
        number = self.sequence + 1
        response = self.response
        if response is None:  # no event of it went out: opened, then failed
            response = {"id": Ids.new().response, "object": "response", "output": []}
            opened = {**response, "status": "in_progress"}
            events.append(
                {"type": "response.created", "sequence_number": number, "response": opened}
            )
            number += 1
        events += failure_events(number, response, error.message, error.code)
        self.sequence = number + 1
        return b"".join(sse(event) for event in events)


def native_events(stream: NativeStream | None, preface: bytes, watch: Watched) -> Transform:
    """The upstream's events, with the sources added when there are any (else byte for byte)."""

    async def transform(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        if preface:
            yield preface
        async for raw in sse_events(chunks):
            payload = event_json(raw)
            if not isinstance(payload, dict) or "type" not in payload:
                yield raw
                continue
            events = [payload] if stream is None else stream.feed(payload)
            for number, event in enumerate(events, 1):
                await watch.see(event)
                if number == len(events):  # the chain is kept before the last event goes out
                    await watch.finish(payload)
                yield raw if stream is None else sse(event)

    return transform


async def _json_of(raw: bytes) -> Any:
    try:
        return await jsonio.loads_soon(raw)
    except ValueError:
        return None


@recorded
async def create_native_response(request: web.Request) -> web.StreamResponse:
    """POST /v1/responses: the pipeline enriches `input`, the answer is the upstream's."""
    request[ROUTE] = "responses"
    services = request.app[SERVICES]
    caller = request[CALLER]
    server = services.settings.server
    body = await read_json_body(request, server)
    if "input" not in body:
        raise BadRequest("input: is required", param="input", code="missing_required_parameter")
    await check_references(services, caller, body)
    messages, origins = await off_loop_if_long(
        body["input"], translate_input, body["input"], server.max_messages
    )
    chain = ChainedTurn(services, _owners(services), caller, body)
    await chain.read(messages)
    watch = Watched(chain.created, chain.answered)
    # The earlier turns the upstream keeps, as the proxy saw them: searched with, not sent.
    chat: dict[str, Any] = {
        "messages": [*chain.history, *messages],
        "stream": body.get("stream") is True,
    }
    if isinstance(body.get("model"), str):
        chat["model"] = body["model"]
    if "enrich" in body:
        chat["enrich"] = body.pop("enrich")
    file_search, include_results = take_file_search(body)
    exchange, status, started = await prepare_or_fail(
        request, services, chat, file_search, watch.ending, fixed_route=True
    )
    if exchange is None:
        assert started is not None
        return started
    if exchange.upstream_path != "/v1/chat/completions":
        raise responses_need_chat()
    items = body["input"]
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    before = len(chain.history) + len(messages)
    body["input"] = patch_input(items, chain.origins(origins), before, exchange.messages)
    chain.note(exchange)
    if "model" in exchange.body:
        body["model"] = exchange.body["model"]  # an alias resolved to the real name
    exchange.body = body
    exchange.upstream_path = "/v1/responses"
    sources = cited(exchange, Ids.new(), include_results)
    citing = bool(sources.search_results or sources.file_search)

    async def answer(response: aiohttp.ClientResponse) -> web.StreamResponse:
        extra = {**exchange.response_headers, "X-Request-ID": exchange.request_id}
        if response.status >= 400:
            return await relay_response(
                request, response, extra_headers=extra, already=started, ending=watch.ending
            )
        if is_event_stream(response):
            transform = native_events(
                NativeStream(sources) if citing else None, status.pending(), watch
            )
            return await relay_response(
                request,
                response,
                extra_headers=extra,
                already=started,
                transform=transform,
                ending=watch.ending,
            )
        raw = await response.read()
        result = await _json_of(raw)
        if isinstance(result, dict):
            await watch.see({"response": result})
            if response.status < 300 and result.get("status") in ("completed", "incomplete"):
                await watch.finish({"type": f"response.{result['status']}", "response": result})
        if started is not None:  # a stream the statuses began: the answer goes into it
            return await _answer_as_events(started, result, sources if citing else None, watch)
        headers = client_response_headers(response.headers)
        headers.update(extra)
        if citing and isinstance(result, dict):
            headers["Content-Type"] = "application/json"
            raw = await serialise(cite_response(result, sources))
        return web.Response(status=response.status, body=raw, headers=headers)

    return await forward_exchange(request, services, exchange, answer, started, watch.ending)


async def _answer_as_events(
    started: web.StreamResponse, result: Any, sources: Cited | None, watch: Watched
) -> web.StreamResponse:
    """A whole response (the upstream ignored `stream`) as the events of one."""
    if not isinstance(result, dict):
        error = bad_upstream("answer")
        await started.write(watch.ending(error))
    else:
        for event in events_from_response(cite_response(result, sources) if sources else result):
            await started.write(sse(event))
    await started.write_eof()
    return started


async def stored_native_response(request: web.Request) -> web.StreamResponse:
    """`/v1/responses/{id}` (GET, DELETE), `.../input_items`, `.../cancel`: the owner's only;
    `POST /v1/responses/input_tokens` and `/compact`: the ids their body names, checked."""
    request[ROUTE] = "responses"
    services = request.app[SERVICES]
    caller = request[CALLER]
    ident, _, rest = request.match_info["tail"].partition("/")
    if ident in BODY_ROUTES and not rest and request.method == "POST":
        server = services.settings.server
        raw = await read_body(request, server)
        body = await parse_body(raw, server.max_json_values, held_body(request))
        await check_references(services, caller, body)
        return await relay_to_upstream(request, raw)
    return await _owned_route(request, services, caller, "response", ident, rest)


async def native_conversations(request: web.Request) -> web.StreamResponse:
    """`POST /v1/conversations` (the new id is the caller's), `/v1/conversations/{id}` and its
    items (the owner's only)."""
    request[ROUTE] = "responses"
    services = request.app[SERVICES]
    caller = request[CALLER]
    tail = request.match_info.get("tail", "")
    if not tail:
        if request.method != "POST":
            raise web.HTTPMethodNotAllowed(request.method, ["POST"])
        return await _create_recorded(request, services, caller)
    ident, _, rest = tail.partition("/")
    return await _owned_route(request, services, caller, "conversation", ident, rest)


async def _owned_route(
    request: web.Request, services: Services, caller: Caller, kind: Kind, ident: str, rest: str
) -> web.StreamResponse:
    await check_owned(services, caller, kind, ident, f"{kind}_id")
    response = await relay_to_upstream(request)
    if request.method == "DELETE" and not rest and 200 <= response.status < 300:
        await asyncio.to_thread(_owners(services).forget, kind, ident)
    return response


async def _create_recorded(
    request: web.Request, services: Services, caller: Caller
) -> web.StreamResponse:
    owners = _owners(services)

    async def answer(response: aiohttp.ClientResponse) -> web.StreamResponse:
        raw = await response.read()
        found = await _json_of(raw) if response.status < 300 else None
        if isinstance(found, dict) and isinstance(found.get("id"), str):
            await asyncio.to_thread(owners.record, "conversation", found["id"], caller.name)
        headers = client_response_headers(response.headers)
        headers["X-Request-ID"] = request[REQUEST_ID]
        return web.Response(
            status=response.status, reason=response.reason, body=raw, headers=headers
        )

    return await relay_to_upstream(request, answer=answer)
