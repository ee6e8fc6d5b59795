"""What an upstream that holds the kind probes open costs chat requests.

Serves tests/fakes/silent.py (answers chat, holds every other request open until the client
gives up; `--models` answers GET /v1/models too) in this process, puts the proxy in front of it
with the defaults, and prints the seconds of: four chat requests at once (the first ones), one
after them, and four more at once; then the probe requests the upstream was sent. The same
again with `upstream.kind: other` configured (nothing probed), for comparison.

    python bench/unanswered_probes.py [--models]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proxy.config import load_settings
from proxy.logs import configure_logging
from tests.fakes.servers import ServerThread
from tests.fakes.silent import SilentProbes

BODY = {"model": "m", "messages": [{"role": "user", "content": "Hello there"}]}


def timed(base: str) -> float:
    started = time.monotonic()
    response = httpx.post(base + "/v1/chat/completions", json=BODY, timeout=1800)
    response.raise_for_status()
    return time.monotonic() - started


def run(models: bool, kind: str, data: Path) -> None:
    servers = ServerThread()
    try:
        fake = SilentProbes(answers_models=models)
        upstream = {"base_url": servers.serve(fake.app()), "kind": kind}
        settings = load_settings(
            None,
            environ={},
            overrides={"upstream": upstream, "server": {"data_dir": str(data / kind)}},
        )
        base = servers.serve_proxy(settings)
        with ThreadPoolExecutor(4) as pool:
            first = list(pool.map(lambda _: timed(base), range(4)))
            then = timed(base)
            again = list(pool.map(lambda _: timed(base), range(4)))
        print(
            f"upstream.kind {kind:>5}: four at once {', '.join(f'{s:.1f}' for s in first)} s;"
            f" the next {then:.1f} s; four more {', '.join(f'{s:.1f}' for s in again)} s;"
            f" probe requests sent {len(fake.held())}"
        )
    finally:
        servers.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", action="store_true", help="the upstream answers /v1/models")
    args = parser.parse_args()
    configure_logging(level="warning")
    with tempfile.TemporaryDirectory() as folder:
        for kind in ("auto", "other"):
            run(args.models, kind, Path(folder))


if __name__ == "__main__":
    main()
