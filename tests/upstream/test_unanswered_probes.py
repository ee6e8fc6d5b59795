"""An upstream that answers chat and holds the kind probes open: requests wait for one bounded
set of probes, once, and then go on as to an OpenAI-compatible server until it is time to ask
again — through the real openai SDK."""

from __future__ import annotations

import base64
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai

from tests.fakes.servers import ServerThread
from tests.fakes.silent import SilentProbes

QUICK = {"probe_timeout_s": 0.5}


def chat(text: str = "Hello there") -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}]}


def with_document() -> dict[str, Any]:
    data = base64.b64encode(b"The lighthouse keeper fed the cats every morning.").decode()
    part = {
        "type": "file",
        "file": {"filename": "a.txt", "file_data": f"data:text/plain;base64,{data}"},
    }
    text = {"type": "text", "text": "Who fed the cats?"}
    return {"model": "m", "messages": [{"role": "user", "content": [text, part]}]}


def test_requests_wait_for_one_bounded_detection_and_then_not_at_all(
    servers: ServerThread, proxy_before: Callable[..., str]
) -> None:
    # Before: each request waited for the probes again and again (30 s each), one request at
    # a time behind a lock: 248 s for one, 341-434 s for four at once.
    silent = SilentProbes()
    base = proxy_before(servers.serve(silent.app()), upstream=QUICK)
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60)
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: client.chat.completions.create(**chat()), range(4)))
    assert [a.choices[0].message.content for a in answers] == ["The answer ."] * 4
    # One probe and one window lookup, each held open until its time ran out.
    assert silent.held() == ["/props", "/v1/models"]
    for _ in range(3):
        client.chat.completions.create(**chat())
    assert silent.held() == ["/props", "/v1/models"]  # both stand: nobody asked again
    decision = httpx.post(base + "/v1/enrich/preview", json=with_document(), timeout=60).json()
    upstream = decision["decision"]["upstream"]
    assert upstream["kind"] == "other" and upstream["kind_known"] is False
    assert upstream["kind_source"] == (
        "unknown: GET /props was not answered in 0.5 s (upstream.probe_timeout_s); taken as an"
        " OpenAI-compatible server, asked again after 30 s"
    )
    assert upstream["window"] is None
    assert upstream["window_source"] == (
        "unknown (not answered in 0.1 s, upstream.probe_timeout_s; asked again after 30 s)"
    )
    assert silent.held() == ["/props", "/v1/models"]
