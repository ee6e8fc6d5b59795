"""A proxy in front of fake servers (an echoing chat upstream, bag-of-words embeddings), for
trying clients without a model: the answer is the prompt the model would have got.

    python scripts/fake_stack.py URL_FILE [--native]

Writes the proxy's base URL to URL_FILE once it listens, then serves until killed.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from proxy.config import load_settings  # noqa: E402
from proxy.http.app import make_app  # noqa: E402
from tests.fakes.embeddings import FakeEmbeddings  # noqa: E402
from tests.fakes.servers import ServerThread  # noqa: E402
from tests.fakes.upstream import FakeUpstream  # noqa: E402


def main() -> None:
    url_file = Path(sys.argv[1])
    servers = ServerThread()
    upstream = FakeUpstream(chat_mode="echo")
    embeddings = FakeEmbeddings()
    settings = load_settings(
        None,
        environ={},
        overrides={
            "upstream": {
                "base_url": servers.serve(upstream.app()),
                "responses": "native" if "--native" in sys.argv else "chat",
            },
            "server": {"data_dir": tempfile.mkdtemp(prefix="fake-stack-")},
            "embeddings": {
                "backend": "openai",
                "base_url": servers.serve(embeddings.app()) + "/v1",
                "model": "fake",
            },
            "retrieval": {"chunk_tokens": 40, "chunk_overlap": 0, "affinity_threshold": 0.1},
            "models": {
                "enrich-inline": {"enrich": {"citations": "inline"}, "upstream_model": "fake"}
            },
        },
    )
    url_file.write_text(servers.serve(make_app(settings)))
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
