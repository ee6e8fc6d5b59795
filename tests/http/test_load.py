"""Load and faults: concurrent streamed requests with documents, none lost nor mixed up; a
dying upstream, embedder, parse worker or disk costs one request, never the proxy.

Run with `-s` to see the figures (requests, concurrency, errors, max RSS).
"""

from __future__ import annotations

import asyncio
import base64
import errno
import json
import os
import resource
import signal
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.config import load_settings
from proxy.files.store import DiskUpload
from proxy.http.keys import SERVICES
from tests.fakes.embeddings import FakeEmbeddings
from tests.fakes.servers import ServerThread
from tests.fakes.upstream import FakeUpstream

CHAT = "/v1/chat/completions"
REQUESTS = 40
CONCURRENCY = 20
HANG_GUARD_S = 120.0


def text_part(name: str, text: str) -> dict[str, Any]:
    encoded = base64.b64encode(text.encode()).decode()
    return {
        "type": "file",
        "file": {"filename": name, "file_data": f"data:text/plain;base64,{encoded}"},
    }


def ask(part: dict[str, Any], *, stream: bool = False, **extra: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Echo it."}, part]}],
        "stream": stream,
        **extra,
    }


def streamed_text(raw: str) -> str:
    """The content deltas of an SSE answer, joined; an error event fails the request."""
    text = []
    for line in raw.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[len("data: ") :])
        assert "error" not in event, event
        for choice in event.get("choices", []):
            text.append(choice.get("delta", {}).get("content") or "")
    return "".join(text)


def plain_chat_ok(base: str) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "still there?"}]}
    response = httpx.post(base + CHAT, json=body, timeout=HANG_GUARD_S)
    assert response.status_code == 200, response.text


def document_chat_ok(base: str, marker: str) -> None:
    body = ask(text_part(f"{marker}.txt", f"After the fault: {marker}."))
    response = httpx.post(base + CHAT, json=body, timeout=HANG_GUARD_S)
    assert response.status_code == 200, response.text


def max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def cached_entries(data_dir: Path) -> list[Path]:
    return sorted((data_dir / "parsed").glob("*/*.json"))


def assert_openai_error(response: httpx.Response) -> dict[str, Any]:
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, response.text
    assert isinstance(error, dict)
    return error


# -- load -------------------------------------------------------------------------------------


async def test_concurrent_streams_are_neither_lost_nor_mixed_up(
    make_proxy: Callable[..., str], upstream: FakeUpstream, tmp_path: Path
) -> None:
    upstream.chat_mode = "echo"
    upstream.chunk_delay = 0.005  # streams interleave
    base = make_proxy()
    run = uuid.uuid4().hex[:8]
    markers = [f"MARK-{run}-{i:03d}-END" for i in range(REQUESTS)]
    gate = asyncio.Semaphore(CONCURRENCY)
    in_flight = peak = 0
    errors: list[str] = []

    async def one(client: httpx.AsyncClient, index: int) -> str:
        nonlocal in_flight, peak
        marker = markers[index]
        document = f"Document {index}.\n\nThe marker of this document is {marker}.\n"
        async with gate:
            in_flight += 1
            peak = max(peak, in_flight)
            try:
                async with client.stream(
                    "POST", CHAT, json=ask(text_part(f"doc-{index}.txt", document), stream=True)
                ) as response:
                    raw = (await response.aread()).decode()
                if response.status_code != 200:
                    errors.append(f"{index}: {response.status_code} {raw[:200]}")
                    return ""
                return streamed_text(raw)
            finally:
                in_flight -= 1

    started = time.perf_counter()
    limits = httpx.Limits(max_connections=CONCURRENCY)
    async with httpx.AsyncClient(base_url=base, timeout=HANG_GUARD_S, limits=limits) as client:
        answers = await asyncio.gather(*(one(client, i) for i in range(REQUESTS)))
    seconds = time.perf_counter() - started
    print(
        f"\nload: {REQUESTS} streamed requests with documents, concurrency {CONCURRENCY}"
        f" (peak in flight {peak}), errors {len(errors)}, {seconds:.1f} s,"
        f" max RSS of the test process {max_rss_mb():.0f} MB"
    )
    assert errors == []
    for index, answer in enumerate(answers):
        assert markers[index] in answer, f"request {index} lost its answer"
        others = [m for j, m in enumerate(markers) if j != index and m in answer]
        assert others == [], f"request {index} received the answer of {others}"
    chats = [r for r in upstream.requests if r.path == CHAT]
    assert len(chats) == REQUESTS
    data_dir = tmp_path / "data"
    assert len(cached_entries(data_dir)) == REQUESTS  # each document parsed and stored once

    # The same new document ten times at once, then old ones again: still one entry each.
    same = text_part("same.txt", f"One document sent by many clients at once. {run}")
    with ThreadPoolExecutor(max_workers=10) as pool:
        responses = list(
            pool.map(
                lambda _: httpx.post(base + CHAT, json=ask(same), timeout=HANG_GUARD_S),
                range(10),
            )
        )
    assert [r.status_code for r in responses] == [200] * 10
    for index in range(5):
        part = text_part(
            f"again-{index}.txt",
            f"Document {index}.\n\nThe marker of this document is {markers[index]}.\n",
        )
        assert httpx.post(base + CHAT, json=ask(part), timeout=HANG_GUARD_S).status_code == 200
    entries = cached_entries(data_dir)
    assert len(entries) == REQUESTS + 1
    assert not [p for p in (data_dir / "parsed").rglob(".tmp-*")]
    upstream.chat_mode = "auto"
    plain_chat_ok(base)
    print(f"load: parse cache holds {len(entries)} entries; max RSS {max_rss_mb():.0f} MB")


# -- faults -----------------------------------------------------------------------------------


def test_upstream_dies_mid_stream(make_proxy: Callable[..., str], upstream: FakeUpstream) -> None:
    base = make_proxy()
    upstream.chat_mode = "die"
    body = ask(text_part("die.txt", "A document for a stream that dies."), stream=True)
    # A connection that simply drops fails here (httpx raises): the stream must end properly.
    with httpx.stream("POST", base + CHAT, json=body, timeout=HANG_GUARD_S) as response:
        raw = response.read().decode()
    print(f"die: {response.status_code}, {len(raw)} bytes relayed: {raw[-300:]!r}")
    assert response.status_code == 200
    events = [event for event in raw.split("\n\n") if event.startswith("data: ")]
    # The two chunks sent before the upstream died, then an OpenAI-shaped error, then [DONE].
    assert len(events) == 4, events
    assert [json.loads(e[6:])["object"] for e in events[:2]] == ["chat.completion.chunk"] * 2
    error = json.loads(events[2][6:])["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "upstream_stream_broken"
    assert events[3] == "data: [DONE]"
    assert raw.endswith("data: [DONE]\n\n")
    upstream.chat_mode = "auto"
    document_chat_ok(base, "after-die")
    plain_chat_ok(base)


def test_embedding_server_down(
    make_proxy: Callable[..., str], upstream: FakeUpstream, embeddings: FakeEmbeddings
) -> None:
    base = make_proxy(embeddings={"timeout_s": 10})
    embeddings.fail = True
    body = ask(
        text_part("emb.txt", "Retrieval needs the embedding server. " * 20),
        enrich={"strategy": "retrieval"},
    )
    response = httpx.post(base + CHAT, json=body, timeout=HANG_GUARD_S)
    assert 500 <= response.status_code < 600, response.text
    error = assert_openai_error(response)
    print(f"embedder down: {response.status_code} {error}")
    assert not [r for r in upstream.requests if r.path == CHAT]
    embeddings.fail = False
    response = httpx.post(base + CHAT, json=body, timeout=HANG_GUARD_S)
    assert response.status_code == 200, response.text
    assert response.headers["X-Enrich-Strategy"] == "retrieval"
    plain_chat_ok(base)


def own_proxy(
    servers: ServerThread,
    upstream: FakeUpstream,
    embeddings: FakeEmbeddings,
    data_dir: Path,
    **documents: Any,
) -> tuple[str, Any]:
    """Like the make_proxy fixture, but also the app, to reach its services."""
    settings = load_settings(
        None,
        environ={},
        overrides={
            "upstream": {"base_url": upstream.base_url},  # type: ignore[attr-defined]
            "server": {"data_dir": str(data_dir), "shutdown_grace_s": 2.0},
            "embeddings": {
                "backend": "openai",
                "base_url": embeddings.base_url,  # type: ignore[attr-defined]
                "model": "fake",
            },
            "documents": documents,
        },
    )
    base = servers.serve_proxy(settings)
    return base, servers.runners[-1].app[SERVICES]


def test_a_parse_worker_killed_mid_parse(
    servers: ServerThread, upstream: FakeUpstream, embeddings: FakeEmbeddings, tmp_path: Path
) -> None:
    base, services = own_proxy(
        servers, upstream, embeddings, tmp_path / "data", parse_workers=1, parse_timeout_s=60
    )
    pool = services.parser.pool
    # Lexbor is quadratic in depth: 60 blocks nested 4,900 deep (just under the proxy's
    # refusal at 5,000) take seconds, long enough to kill the worker in the middle.
    block = "<div>" * 4_900 + "deep" + "</div>" * 4_900
    html = "<html><body>" + block * 60 + "</body></html>"
    part = {
        "type": "file",
        "file": {
            "filename": "slow.html",
            "file_data": "data:text/html;base64," + base64.b64encode(html.encode()).decode(),
        },
    }
    with ThreadPoolExecutor(max_workers=1) as executor:
        pending = executor.submit(httpx.post, base + CHAT, json=ask(part), timeout=HANG_GUARD_S)
        deadline = time.monotonic() + HANG_GUARD_S
        while pool.jobs < 1:  # the job has been handed to a (ready) worker
            assert time.monotonic() < deadline and not pending.done(), "the parse never started"
            time.sleep(0.02)
        threading.Event().wait(1.0)  # let it get into the parse
        pids = pool.pids()
        assert len(pids) == 1
        os.kill(pids[0], signal.SIGKILL)
        response = pending.result(timeout=HANG_GUARD_S)
    assert response.status_code == 400, response.text
    error = assert_openai_error(response)
    assert error["code"] == "parser_crashed" and "slow.html" in error["message"], error
    assert not [r for r in upstream.requests if r.path == CHAT]
    assert cached_entries(tmp_path / "data") == []  # nothing of the killed parse is kept
    # A fresh worker takes the next document (a PDF, so it goes to a worker too).
    pdf = (
        b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n"
        b"2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n"
        b"3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 612 792]/Contents 4 0 R"
        b"/Resources<</Font<</F1 5 0 R>>>>>>endobj\n"
        b"4 0 obj<</Length 44>>stream\nBT /F1 12 Tf 72 720 Td (after the kill) Tj ET\n"
        b"endstream endobj\n5 0 obj<</Type/Font/Subtype/Type1/BaseFont/Helvetica>>endobj\n"
        b"trailer<</Root 1 0 R>>\n%%EOF\n"
    )
    pdf_part = {
        "type": "file",
        "file": {
            "filename": "after.pdf",
            "file_data": "data:application/pdf;base64," + base64.b64encode(pdf).decode(),
        },
    }
    response = httpx.post(base + CHAT, json=ask(pdf_part), timeout=HANG_GUARD_S)
    assert response.status_code == 200, response.text
    assert "after the kill" in upstream.last_to(CHAT).body.decode()
    assert pool.pids() and pool.pids() != pids
    assert len(cached_entries(tmp_path / "data")) == 1
    plain_chat_ok(base)


def store_files(data_dir: Path) -> tuple[list[str], list[str]]:
    files = data_dir / "files"
    return (
        sorted(p.name for p in (files / "blobs").iterdir()),
        sorted(p.name for p in (files / "meta").iterdir()),
    )


def upload(base: str, content: bytes) -> httpx.Response:
    return httpx.post(
        base + "/v1/files",
        files={"file": ("big.txt", content)},
        data={"purpose": "user_data"},
        timeout=HANG_GUARD_S,
    )


def disk_full(*_: Any) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("where", ["write", "fsync", "io-error"])
def test_disk_full_for_the_files_store(
    make_proxy: Callable[..., str],
    upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    base = make_proxy()
    data_dir = tmp_path / "data"
    content = b"Stored text, line after line.\n" * 100_000  # ~3 MiB: several chunks
    written = DiskUpload.write

    def write_then_fail(self: DiskUpload, chunk: bytes) -> None:
        written(self, chunk)  # part of the file is on disk when the disk fills up
        raise OSError(errno.ENOSPC if where == "write" else errno.EIO, "simulated")

    if where == "fsync":
        monkeypatch.setattr(os, "fsync", disk_full)
    else:
        monkeypatch.setattr(DiskUpload, "write", write_then_fail)
    response = upload(base, content)
    error = assert_openai_error(response)
    print(f"disk {where}: {response.status_code} {error}")
    if where == "io-error":
        assert response.status_code == 500
        assert error["code"] == "storage_error"
    else:
        assert response.status_code == 507
        assert error["code"] == "insufficient_storage"
    assert error["type"] == "server_error"
    assert str(data_dir) not in error["message"]
    assert store_files(data_dir) == ([], [])  # no half-written blob, temp file or record
    monkeypatch.undo()
    response = upload(base, b"Stored once the disk has room again.")
    assert response.status_code == 200, response.text
    blobs, meta = store_files(data_dir)
    assert len(blobs) == 1 and len(meta) == 1
    part = {"type": "file", "file": {"file_id": response.json()["id"]}}
    response = httpx.post(base + CHAT, json=ask(part), timeout=HANG_GUARD_S)
    assert response.status_code == 200, response.text
    assert "disk has room again" in upstream.last_to(CHAT).body.decode()
    plain_chat_ok(base)
