"""Request bodies as JSON, in and out; big ones are (de)serialised off the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web

from proxy import jsonio
from proxy.config import ServerSettings
from proxy.errors import BadRequest, PayloadTooLarge, ProxyError
from proxy.http.body_budget import HeldBody
from proxy.http.jsonsize import held_bytes, quick_bound, size_over, values_over
from proxy.http.keys import BODY_BUDGET, CALLER, HELD_BODY

T = TypeVar("T")

# Bodies (and rewritten bodies) above this size are (de)serialised in a thread: a 60 MB base64
# PDF takes long enough to stall every other request on the event loop.
OFF_LOOP_BYTES = jsonio.OFF_LOOP_BYTES
MAX_JSON_VALUES = 250_000  # the default of server.max_json_values
# A parsed body of at most this many values is measured on the loop (well under a millisecond).
WALK_ON_LOOP = 5_000


def max_body_bytes(server: ServerSettings) -> int:
    return int(server.max_body_mb * 1024 * 1024)


def body_too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        "the request body is larger than the proxy's limit (server.max_body_mb): "
        f"{limit / (1024 * 1024):g} MiB",
        code="request_too_large",
    )


@dataclass(frozen=True)
class BodyClock:
    """How long a body may take: `idle_s` without a byte (server.body_timeout_s), and
    `total_s` in all (server.body_deadline_s) from when it starts being read."""

    idle_s: float
    total_s: float
    deadline: float  # the event loop's time by which the whole body must have arrived

    @classmethod
    def start(cls, server: ServerSettings) -> BodyClock:
        now = asyncio.get_running_loop().time()
        return cls(server.body_timeout_s, server.body_deadline_s, now + server.body_deadline_s)


async def within(step: Awaitable[T], clock: BodyClock) -> T:
    """One read of a request body, or a 408 when the client sends nothing for `idle_s` or the
    body is not whole by its deadline: aiohttp has no body read timeout of its own, and a
    stalled upload, or one trickled a byte at a time, would hold its connection."""
    left = clock.deadline - asyncio.get_running_loop().time()
    late = left <= clock.idle_s
    try:
        async with asyncio.timeout(max(0.0, min(clock.idle_s, left))):  # not wait_for: see
            return await step  # DocumentParser on 3.11
    except TimeoutError:
        if late:
            raise ProxyError(
                f"the request body did not arrive within {clock.total_s:g} s"
                " (server.body_deadline_s)",
                status=408,
                code="request_timeout",
            ) from None
        raise ProxyError(
            f"the request body stopped arriving (nothing for {clock.idle_s:g} s,"
            " server.body_timeout_s)",
            status=408,
            code="request_timeout",
        ) from None


def check_received(request: web.Request, limit: int) -> None:
    """413 once more than `limit` bytes of body have arrived (chunked bodies have no length)."""
    if request.content.total_bytes > limit:
        raise body_too_large(limit)


def held_body(request: web.Request) -> HeldBody | None:
    """The request's share of its key's body budget (made on first use; None before the caller
    is known, or in an application without a budget)."""
    held = request.get(HELD_BODY)
    if held is None:
        budget, caller = request.app.get(BODY_BUDGET), request.get(CALLER)
        if budget is None or caller is None:
            return None
        held = request[HELD_BODY] = budget.hold(caller.name)
    return held


async def read_body(request: web.Request, server: ServerSettings) -> bytes:
    """The whole body, read as it streams in: at most server.max_body_mb, within the times of
    its `BodyClock`, each chunk charged to the key's body budget as it arrives."""
    limit = max_body_bytes(server)
    held = held_body(request)
    if request.content_length is not None:
        if request.content_length > limit:
            raise body_too_large(limit)
        if held is not None:
            held.expect(request.content_length)
    clock = BodyClock.start(server)
    chunks = []
    size = 0
    while chunk := await within(request.content.readany(), clock):
        size += len(chunk)
        if size > limit:
            raise body_too_large(limit)
        if held is not None:
            held.arrived(len(chunk))
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json_body(request: web.Request, server: ServerSettings) -> dict[str, Any]:
    """The body read and parsed (`read_body`, `parse_body`); once parsed, its bytes are dropped
    and the key's budget holds what the parsed body holds."""
    held = held_body(request)
    raw = await read_body(request, server)
    body = await parse_body(raw, server.max_json_values, held)
    del raw
    if held is not None:
        held.raw_dropped()
    return body


def too_many_values(limit: int) -> ProxyError:
    return PayloadTooLarge(
        f"the request body holds more than {limit} JSON values (server.max_json_values)",
        code="too_many_json_values",
    )


def _bounded_loads(raw: bytes, max_values: int) -> Any:
    if values_over(raw, max_values):
        raise too_many_values(max_values)
    try:
        return _loads(raw)
    except jsonio.OrjsonRefused:
        return jsonio.loads_stdlib(raw)


def _loads(raw: bytes) -> Any:
    """orjson (5x faster on a small chat body), or OrjsonRefused: the json module then reads it
    in a thread (see proxy.jsonio), so what is accepted and the error a client reads stay the
    json module's (NaN, UTF-16, nesting past orjson's limit, which the json module then refuses
    with a RecursionError), at a cost bounded by the body's length."""
    return jsonio.loads_orjson(raw)


def _dumps(body: dict[str, Any]) -> bytes:
    """Compact UTF-8 JSON (see proxy.jsonio.dumps). (A NaN, which only the json module reads,
    goes upstream as null.)"""
    return jsonio.dumps(body)


async def parse_body(
    raw: bytes, max_values: int = MAX_JSON_VALUES, held: HeldBody | None = None
) -> dict[str, Any]:
    """The body as a JSON object; one that may hold more than `max_values` values is refused
    before it is parsed (see proxy.http.jsonsize), big ones are parsed in a thread, and so is
    any that orjson refuses. With `held`, what the parsed body holds is charged to it."""
    if not raw:
        raise BadRequest("the request body is empty; expected a JSON object", code="invalid_json")
    values = max_values + 1  # at most; counted quickly for small bodies only
    try:
        if len(raw) > OFF_LOOP_BYTES:
            body = await asyncio.to_thread(_bounded_loads, raw, max_values)
        else:
            values = quick_bound(raw)
            if values > max_values and await asyncio.to_thread(values_over, raw, max_values):
                raise too_many_values(max_values)
            try:
                body = _loads(raw)
            except jsonio.OrjsonRefused:
                body = await asyncio.to_thread(jsonio.loads_stdlib, raw)
    except jsonio.NestedTooDeeply:
        raise BadRequest(
            "the request body is nested too deeply to read", code="invalid_json"
        ) from None
    except jsonio.NumberOutOfRange as exc:
        raise BadRequest(
            f"the request body is refused: {exc}", code="number_out_of_range"
        ) from None
    except jsonio.JsonRefused as exc:
        raise BadRequest(f"the request body is refused: {exc}", code="invalid_json") from None
    except UnicodeDecodeError as exc:
        raise BadRequest("the request body is not UTF-8 JSON", code="invalid_json") from exc
    except ValueError as exc:
        raise BadRequest(f"the request body is not valid JSON: {exc}", code="invalid_json") from exc
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object", code="invalid_json")
    if held is not None:
        size = (
            held_bytes(body)
            if values <= WALK_ON_LOOP
            else await asyncio.to_thread(held_bytes, body)
        )
        held.parsed_as(size)
    return body


async def serialise(body: dict[str, Any]) -> bytes:
    """The body as it goes upstream: written in a thread when it may be over OFF_LOOP_BYTES
    (every field counted, see proxy.http.jsonsize.size_over)."""
    try:
        if size_over(body, OFF_LOOP_BYTES):
            return await asyncio.to_thread(_dumps, body)
        return _dumps(body)
    except RecursionError:
        raise BadRequest("the request body is nested too deeply", code="invalid_json") from None
