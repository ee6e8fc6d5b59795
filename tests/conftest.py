"""Shared fixtures: the shared corpus and a temporary data directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

# Offline machines: tiktoken reads cl100k_base from here (put there by
# ../shared/models/install-offline-caches.sh, or downloaded on first use elsewhere).
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(Path.home() / ".cache" / "tiktoken"))

# CI runs the same examples every time (a gate must not turn red by chance); developers' runs
# keep exploring new ones.
hypothesis_settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    hypothesis_settings.load_profile("ci")

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpus"


@pytest.fixture
def corpus_dir() -> Path:
    """The shared corpus of real documents; tests using it skip when it is absent."""
    if not (CORPUS / "MANIFEST.tsv").exists():
        pytest.skip("../shared/corpus is absent")
    return CORPUS


# -- running the proxy in front of a fake upstream ---------------------------------------------
from collections.abc import Callable, Iterator  # noqa: E402
from typing import Any  # noqa: E402

from proxy.app import make_app  # noqa: E402
from proxy.config import load_settings  # noqa: E402
from tests.fakes.embeddings import FakeEmbeddings  # noqa: E402
from tests.fakes.servers import ServerThread  # noqa: E402
from tests.fakes.upstream import FakeUpstream  # noqa: E402


@pytest.fixture
def servers() -> Iterator[ServerThread]:
    thread = ServerThread()
    yield thread
    thread.close()


@pytest.fixture
def upstream(servers: ServerThread) -> FakeUpstream:
    fake = FakeUpstream()
    fake.base_url = servers.serve(fake.app())  # type: ignore[attr-defined]
    return fake


@pytest.fixture
def embeddings(servers: ServerThread) -> FakeEmbeddings:
    fake = FakeEmbeddings()
    fake.base_url = servers.serve(fake.app()) + "/v1"  # type: ignore[attr-defined]
    return fake


@pytest.fixture
def make_proxy(
    servers: ServerThread, upstream: FakeUpstream, embeddings: FakeEmbeddings, tmp_path: Path
) -> Callable[..., str]:
    """Start a proxy in front of the fake upstream; keyword sections override settings."""

    def start(**sections: Any) -> str:
        overrides: dict[str, Any] = {
            "upstream": {"base_url": upstream.base_url},  # type: ignore[attr-defined]
            "server": {"data_dir": str(tmp_path / "data"), "status_delay_s": 0.0},
            # A fake embedding server keeps these tests fast; tests/retrieval runs the real model.
            "embeddings": {"backend": "openai", "base_url": embeddings.base_url, "model": "fake"},  # type: ignore[attr-defined]
        }
        for key, value in sections.items():
            overrides[key] = {**overrides.get(key, {}), **value}
        settings = load_settings(None, environ={}, overrides=overrides)
        return servers.serve(make_app(settings))

    return start
