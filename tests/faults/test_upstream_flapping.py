"""The upstream flapping under load: refused, slow, 500s, answers cut half-way, round and round,
while many clients (the real openai SDK) ask plain and streamed questions, with and without a
document. Each gets an answer or an error in OpenAI's shape (a stream ends with an error event),
none hangs; afterwards nothing is held: no request in flight, no upstream connection in use, no
task left behind, and plain requests succeed."""

from __future__ import annotations

import asyncio
import base64
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from proxy.config import load_settings
from proxy.http.keys import SERVICES
from proxy.pipeline.services import Services
from tests.fakes.embeddings import FakeEmbeddings
from tests.fakes.flapping import PHASES, SERVER_ERROR, FlappingUpstream
from tests.fakes.servers import ServerThread
from tests.fakes.upstream import ANSWER
from tests.faults.conftest import HANG_GUARD_S, wait_until

pytestmark = pytest.mark.slow

CLIENTS = 24
CYCLES = 3
PHASE_S = 0.6
WHOLE = "".join(ANSWER)
OPENAI_ERROR = {"message", "type", "param", "code"}


def document_part(n: int) -> dict[str, Any]:
    text = f"Note {n}: the ferry leaves at {n % 12 + 1} o'clock from pier {n % 5}."
    encoded = base64.b64encode(text.encode()).decode()
    return {"type": "file", "file": {"filename": f"note-{n}.txt", "file_data": encoded}}


def messages(n: int, with_document: bool) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = [{"type": "text", "text": "When does the ferry leave?"}]
    if with_document:
        content.append(document_part(n))
    return [{"role": "user", "content": content}]


def error_shape(body: object) -> str | None:
    """What is wrong with an error body the SDK received (None: an OpenAI error, or the upstream's
    own llama.cpp-shaped one relayed as it came)."""
    if not isinstance(body, dict):
        return f"not an error object: {body!r}"[:200]
    if set(body) == OPENAI_ERROR and isinstance(body["message"], str):
        return None if body["message"] != "internal proxy error" else "an internal error"
    if body == SERVER_ERROR["error"]:
        return None
    return f"not OpenAI's error shape: {body!r}"[:200]


async def one(client: openai.AsyncOpenAI, n: int, stream: bool, document: bool) -> str:
    """One request's outcome: `answer`, `<status> <code>` or `stream error <code>`; anything
    that is not one of those raises AssertionError."""
    try:
        if not stream:
            done = await client.chat.completions.create(model="m", messages=messages(n, document))
            assert done.choices[0].message.content == WHOLE, done
            return "answer"
        chunks = await client.chat.completions.create(
            model="m", messages=messages(n, document), stream=True
        )
        text, finish = "", None
        async for chunk in chunks:
            for choice in chunk.choices:
                text += choice.delta.content or ""
                finish = choice.finish_reason or finish
        assert (text, finish) == (WHOLE, "stop"), f"an incomplete stream: {text!r} {finish}"
        return "answer"
    except openai.APIStatusError as error:
        problem = error_shape(error.body)
        assert problem is None, f"{error.status_code}: {problem}"
        code = error.body.get("code") if isinstance(error.body, dict) else None
        return f"{error.status_code} {code}"
    except openai.APIConnectionError as error:  # timeouts included: the hang guard ran out
        raise AssertionError(f"{type(error).__name__}: {error!r} (stream={stream})") from error
    except openai.APIError as error:  # an error event ended the stream
        problem = error_shape(error.body)
        assert stream and problem is None, f"stream error: {problem}"
        code = error.body.get("code") if isinstance(error.body, dict) else None
        return f"stream error {code}"


async def load(base: str, until: float) -> tuple[Counter[str], list[str]]:
    outcomes: Counter[str] = Counter()
    problems: list[str] = []

    async def client_loop(number: int) -> None:
        async with openai.AsyncOpenAI(
            base_url=base + "/v1", api_key="-", max_retries=0, timeout=HANG_GUARD_S
        ) as client:
            turn = 0
            while time.monotonic() < until:
                n = number * 1000 + turn
                stream, document = (number + turn) % 2 == 0, (number + turn) % 4 < 2
                try:
                    outcomes[await one(client, n, stream, document)] += 1
                except AssertionError as error:
                    problems.append(str(error)[:300])
                turn += 1

    await asyncio.gather(*(client_loop(number) for number in range(CLIENTS)))
    return outcomes, problems


@pytest.fixture
def threads() -> Iterator[tuple[ServerThread, ServerThread]]:
    """The fakes' event loop, and the proxy's own (its tasks are counted alone)."""
    fakes, proxy = ServerThread(), ServerThread()
    try:
        yield fakes, proxy
    finally:
        proxy.close()
        fakes.close()


async def tasks_now() -> list[str]:
    current = asyncio.current_task()
    return sorted(
        getattr(task.get_coro(), "__qualname__", "?")
        for task in asyncio.all_tasks()
        if task is not current
    )


def test_upstream_flapping_under_load(
    threads: tuple[ServerThread, ServerThread], tmp_path: Path
) -> None:
    fakes, proxy = threads
    upstream = FlappingUpstream(phase_s=PHASE_S)
    embeddings = FakeEmbeddings()
    url = fakes.call(upstream.start())
    fakes.runners.append(upstream._runner)  # type: ignore[arg-type]  # cleaned up with them
    settings = load_settings(
        None,
        environ={},
        overrides={
            "upstream": {"base_url": url, "read_timeout_s": 1.0, "connect_timeout_s": 1.0},
            "server": {
                "data_dir": str(tmp_path / "data"),
                "shutdown_grace_s": 2.0,
                "max_connections_per_client": 0,  # every client comes from 127.0.0.1
            },
            "embeddings": {
                "backend": "openai",
                "base_url": fakes.serve(embeddings.app()) + "/v1",
                "model": "fake",
            },
        },
    )
    base = proxy.serve_proxy(settings)
    services: Services = proxy.runners[-1].app[SERVICES]
    before = proxy.call(tasks_now())
    # Down first: the proxy's first look at the upstream's kind and window meets the outage.
    fakes.call(upstream.hold("refused"))
    assert asyncio.run(_once(base, 0, False, True)) == "502 upstream_unreachable"

    fakes.call(_flap(upstream))
    until = time.monotonic() + CYCLES * len(PHASES) * PHASE_S
    outcomes, problems = asyncio.run(load(base, until))
    fakes.call(upstream.steady())
    print(f"\nflapping upstream, {CLIENTS} clients: {dict(outcomes)}; served: {upstream.served}")
    assert problems == []
    assert set(PHASES) - {"refused"} <= set(upstream.served)  # every phase met requests
    # Each kind of failure reached some client in its shape (one kind a phase at least).
    assert outcomes["answer"] > 0
    assert outcomes["502 upstream_unreachable"] > 0  # refused
    assert outcomes["504 upstream_timeout"] > 0  # slow: silent before a plain answer
    assert outcomes["stream error upstream_timeout"] > 0  # slow: a stream stalled half-way
    assert outcomes["500 500"] + outcomes["stream error None"] > 0  # the upstream's 500s
    assert outcomes["stream error upstream_stream_broken"] > 0  # cut

    # Nothing is left holding anything.
    connector = services.upstream.session.connector
    assert connector is not None
    wait_until(lambda: not connector._acquired, "upstream connections released")  # type: ignore[attr-defined]
    scrape = httpx.get(base + "/metrics", timeout=30).text
    assert "proxy_requests_in_flight 1.0" in scrape  # the scrape itself

    def left_behind() -> Counter[str]:
        # Connections from clients that hung up end their handler task soon after.
        return Counter(proxy.call(tasks_now())) - Counter(before)

    wait_until(lambda: not left_behind(), f"tasks left behind: {left_behind()}")
    for n, (stream, document) in enumerate([(False, False), (True, False), (False, True)]):
        assert asyncio.run(_once(base, n, stream, document)) == "answer"
    # What the proxy learnt of the upstream is not stuck on a probe that met the outage.
    decision = httpx.get(base + "/v1/enrich/decisions?limit=1", timeout=30).json()
    learnt = decision["data"][0]["decision"]["upstream"]
    assert (learnt["kind"], learnt["window"], learnt["window_exact"]) == ("llamacpp", 4096, True)
    assert learnt["tokenizer_exact"] is True


async def _flap(upstream: FlappingUpstream) -> None:
    upstream.flap()


async def _once(base: str, n: int, stream: bool, document: bool) -> str:
    async with openai.AsyncOpenAI(base_url=base + "/v1", api_key="-", max_retries=0) as client:
        return await one(client, n, stream, document)
