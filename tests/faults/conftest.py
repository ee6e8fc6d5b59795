"""Faults on real engines: a proxy served in this process in front of the fake upstream and
embedding server, the engine (Chroma, SeaweedFS, a small disk) started and broken by the test."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.config import load_settings
from proxy.http.keys import SERVICES
from proxy.pipeline.services import Services
from tests.fakes.embeddings import FakeEmbeddings
from tests.fakes.servers import ServerThread
from tests.fakes.upstream import FakeUpstream

HANG_GUARD_S = 180.0
"""Longer than any fault lasts here: a wait that reaches it is a hang, and fails the test."""


def wait_until(condition: Callable[[], bool], what: str, guard_s: float = HANG_GUARD_S) -> None:
    deadline = time.monotonic() + guard_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {guard_s:.0f} s"
        time.sleep(0.05)


@dataclass
class Bench:
    """A proxy in this process and its fakes; `services` are the proxy's own."""

    servers: ServerThread
    upstream: FakeUpstream
    embeddings: FakeEmbeddings
    data_dir: Path
    base_url: str = ""
    services: Services | None = None

    def start(self, **sections: Any) -> str:
        overrides: dict[str, Any] = {
            "upstream": {"base_url": self.upstream.base_url},  # type: ignore[attr-defined]
            "server": {"data_dir": str(self.data_dir), "shutdown_grace_s": 2.0},
            "embeddings": {
                "backend": "openai",
                "base_url": self.embeddings.base_url,  # type: ignore[attr-defined]
                "model": "fake",
            },
        }
        for key, value in sections.items():
            overrides[key] = {**overrides.get(key, {}), **value}
        settings = load_settings(None, environ={}, overrides=overrides)
        self.base_url = self.servers.serve_proxy(settings)
        self.services = self.servers.runners[-1].app[SERVICES]
        return self.base_url

    def last_decision(self) -> dict[str, Any]:
        answer = httpx.get(self.base_url + "/v1/enrich/decisions?limit=1", timeout=30)
        record: dict[str, Any] = answer.json()["data"][0]["decision"]
        return record


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Bench]:
    servers = ServerThread()
    upstream, embeddings = FakeUpstream(chat_mode="echo"), FakeEmbeddings()
    upstream.base_url = servers.serve(upstream.app())  # type: ignore[attr-defined]
    embeddings.base_url = servers.serve(embeddings.app()) + "/v1"  # type: ignore[attr-defined]
    try:
        yield Bench(servers, upstream, embeddings, tmp_path / "data")
    finally:
        servers.close()
