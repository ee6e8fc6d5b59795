"""An upstream's answers are read bounded: JSON nested past any parser's recursion is not JSON
(never a 500), and /healthz asks the upstream within upstream.health_timeout_s and reads only
its status, whatever its /health sends."""

from __future__ import annotations

import asyncio
import base64
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import pytest
from aiohttp import web

from tests.callers import sdk
from tests.fakes.servers import ServerThread
from tests.fakes.upstream import FakeUpstream

DEEP = b"[" * 200_000 + b"]" * 200_000  # valid JSON no recursive parser reads
DOCUMENT = base64.b64encode(b"The tower clock of Ashford stopped at 4:17 in 1931.").decode()


@dataclass
class NestingUpstream(FakeUpstream):
    """Answers with DEEP where `deep` says: the questions the proxy asks of it, its chats."""

    deep: frozenset[str] = frozenset()

    def nested(self) -> web.Response:
        return web.Response(body=DEEP, content_type="application/json")

    async def health(self, request: web.Request) -> web.Response:
        return self.nested() if "probes" in self.deep else await super().health(request)

    async def props(self, request: web.Request) -> web.Response:
        return self.nested() if "probes" in self.deep else await super().props(request)

    async def models(self, request: web.Request) -> web.Response:
        return self.nested() if "probes" in self.deep else await super().models(request)

    async def tokenize(self, request: web.Request) -> web.Response:
        return self.nested() if "probes" in self.deep else await super().tokenize(request)

    async def apply_template(self, request: web.Request) -> web.Response:
        if "probes" in self.deep:
            return self.nested()
        return await super().apply_template(request)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if "chat" not in self.deep:
            return await super().chat(request)
        if not body.get("stream"):
            return self.nested()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"data: " + DEEP + b"\n\ndata: [DONE]\n\n")
        return response


def with_document(stream: bool) -> dict[str, object]:
    part = {"type": "file", "file": {"filename": "clock.txt", "file_data": DOCUMENT}}
    text = {"type": "text", "text": "When did the clock stop?"}
    return {
        "model": "m",
        "stream": stream,
        "messages": [{"role": "user", "content": [text, part]}],
    }


def never_500(answer: httpx.Response) -> None:
    assert answer.status_code != 500, answer.text[:300]
    assert "internal proxy error" not in answer.text


def test_json_nested_past_recursion_in_the_upstreams_answers_is_never_a_500(
    servers: ServerThread, proxy_before: Callable[..., str]
) -> None:
    # What the proxy asks of the upstream (/health, /props, /v1/models, /tokenize).
    fake = NestingUpstream(deep=frozenset({"probes"}))
    base = proxy_before(servers.serve(fake.app()))
    assert httpx.get(base + "/healthz", timeout=30).status_code == 200  # /health answered 200
    plain = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
    never_500(httpx.post(base + "/v1/chat/completions", json=plain, timeout=60))
    never_500(httpx.get(base + "/v1/models", timeout=30))
    assert fake.to("/v1/chat/completions")  # the chat went upstream
    # The chat answers themselves, which the proxy reads to add the document's citations.
    fake = NestingUpstream(deep=frozenset({"chat"}))
    base = proxy_before(servers.serve(fake.app()))
    inline = {"X-Enrich-Citations": "inline"}  # the proxy has sources to add to the answer
    chat = base + "/v1/chat/completions"
    answer = httpx.post(chat, json=with_document(False), headers=inline, timeout=60)
    assert answer.status_code == 200 and answer.content == DEEP  # not JSON to it: as it came
    answer = httpx.post(chat, json=with_document(True), headers=inline, timeout=60)
    assert answer.status_code == 200
    assert answer.text.rstrip().endswith("data: [DONE]") and '"error"' not in answer.text
    assert len(fake.to("/v1/chat/completions")) == 2
    responses = {"model": "m", "input": "Hi"}
    never_500(httpx.post(base + "/v1/responses", json=responses, timeout=60))


@dataclass
class SilentHealth(FakeUpstream):
    """/health never answers, or answers 200 and then sends bytes without end."""

    endless: bool = False
    sent: list[int] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    async def health(self, request: web.Request) -> web.StreamResponse:
        if not self.endless:
            await asyncio.sleep(3600)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"status": "ok", "padding": "')
        chunk = b"x" * 65536
        sent = 0
        with_stop = self.stop
        while not with_stop.is_set():
            await response.write(chunk)
            sent += len(chunk)
            self.sent.append(sent)
        return response


@pytest.mark.parametrize("endless", [False, True], ids=["hangs", "sends-without-end"])
def test_healthz_asks_the_upstream_within_its_timeout_and_reads_only_the_status(
    servers: ServerThread, proxy_before: Callable[..., str], endless: bool
) -> None:
    fake = SilentHealth(endless=endless)
    base = proxy_before(servers.serve(fake.app()))  # upstream.health_timeout_s: 3 s
    try:
        answer = httpx.get(base + "/healthz", timeout=20)
    finally:
        fake.stop.set()
    if endless:
        # Its status was 200: the proxy never waited for (or kept) the body.
        assert answer.status_code == 200, answer.text
        assert answer.json()["upstream"] == 200
    else:
        assert answer.status_code == 503
        assert "upstream.health_timeout_s" in answer.json()["detail"]
    # Chat goes on as ever beside it.
    chat = sdk(base).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Hi"}]
    )
    assert chat.choices[0].message.content
