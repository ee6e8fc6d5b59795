"""relay_response on its own: a transform applies to every answer it is given, small ones too."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web

from proxy.upstream.relay import openai_error_body, relay_response

BODIES = {
    # Small, with a length: relayed whole when nothing transforms it.
    "/small": (b'{"answer": "small"}', "application/json"),
    # An event stream sent whole, with a Content-Length of its own.
    "/events": (b'data: {"n": 1}\n\ndata: [DONE]\n\n', "text/event-stream"),
}


async def shout(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """A transform that changes the body's length, as a decorating one does."""
    yield b"said: "
    async for chunk in chunks:
        yield chunk.upper()


async def start(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


Relay = Callable[[web.Request, aiohttp.ClientResponse], Awaitable[web.StreamResponse]]


async def through_front(path: str, relay: Relay) -> tuple[bytes, str | None]:
    """GET `path` from a front server that relays, with `relay`, an upstream serving BODIES:
    the bytes the client received and their Content-Length."""

    async def upstream_answer(request: web.Request) -> web.Response:
        body, content_type = BODIES[request.path]
        return web.Response(body=body, content_type=content_type)

    upstream_app = web.Application()
    upstream_app.router.add_get("/{tail:.*}", upstream_answer)
    upstream, upstream_url = await start(upstream_app)
    session = aiohttp.ClientSession()

    async def front(request: web.Request) -> web.StreamResponse:
        async with session.get(upstream_url + request.path) as answer:
            assert answer.content_length == len(BODIES[request.path][0])
            return await relay(request, answer)

    front_app = web.Application()
    front_app.router.add_get("/{tail:.*}", front)
    proxy, proxy_url = await start(front_app)
    try:
        async with session.get(proxy_url + path) as response:
            return await response.read(), response.headers.get("Content-Length")
    finally:
        await session.close()
        await proxy.cleanup()
        await upstream.cleanup()


@pytest.mark.parametrize("path", sorted(BODIES))
async def test_the_transform_reshapes_the_answer_and_its_length(path: str) -> None:
    async def relay(request: web.Request, answer: aiohttp.ClientResponse) -> web.StreamResponse:
        return await relay_response(request, answer, transform=shout)

    received, length = await through_front(path, relay)
    assert received == b"said: " + BODIES[path][0].upper()
    # The upstream's length is not the transformed body's: it must not be sent.
    assert length is None or int(length) == len(received)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        # A whole JSON answer into a stream the proxy started: one event, then [DONE].
        ("/small", b": started\n\ndata: " + BODIES["/small"][0] + b"\n\ndata: [DONE]\n\n"),
        # An event stream into it goes through the transform.
        ("/events", b": started\n\nsaid: " + BODIES["/events"][0].upper()),
    ],
)
async def test_an_answer_relayed_into_a_started_stream(path: str, expected: bytes) -> None:
    async def relay(request: web.Request, answer: aiohttp.ClientResponse) -> web.StreamResponse:
        started = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await started.prepare(request)
        await started.write(b": started\n\n")  # statuses went out before the upstream answered
        return await relay_response(request, answer, already=started, transform=shout)

    received, _ = await through_front(path, relay)
    assert received == expected


@pytest.mark.parametrize(
    ("payload", "status", "expected"),
    [
        # Ollama's and TGI's bare strings
        ({"error": "model 'x' not found"}, 404, ("model 'x' not found", "invalid_request_error")),
        (
            {"error": "Input validation error", "error_type": "validation"},
            422,
            ("Input validation error", "validation"),
        ),
        # SGLang's (and old vLLM's) flat error
        (
            {"object": "error", "message": "too long", "type": "BadRequestError", "code": 400},
            400,
            ("too long", "BadRequestError"),
        ),
        # FastAPI's and KoboldCpp's detail
        (
            {
                "detail": {
                    "msg": "Server is busy; please try again later.",
                    "type": "service_unavailable",
                }
            },
            503,
            ("Server is busy; please try again later.", "upstream_error"),
        ),
        ({"detail": "Not Found"}, 404, ("Not Found", "invalid_request_error")),
    ],
)
def test_other_servers_error_shapes_in_openais(
    payload: dict[str, object], status: int, expected: tuple[str, str]
) -> None:
    body = openai_error_body(status, payload)
    assert body is not None
    assert (body["error"]["message"], body["error"]["type"]) == expected


def test_openais_own_error_shape_is_left_alone() -> None:
    assert openai_error_body(400, {"error": {"message": "x", "type": "y"}}) is None
    assert openai_error_body(500, ["not", "a", "dict"]) is None
    assert openai_error_body(500, {"unrelated": True}) is None
