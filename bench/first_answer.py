"""The README's first command, timed: from `python -m proxy --spawn-llama-server` to an answer.

Starts the proxy with its own local model (whatever `.[local]` installed in the Python given),
waits for /healthz, asks a question about a PDF, then asks it again; prints the time to ready,
to the first answer (parse, index, retrieve, generate) and to the second (document cached).
The figures it measured are in docs/local-upstream.md.

    python bench/first_answer.py [--python .venv/bin/python] [--pdf PDF] [--max-tokens N]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.corpus import add_corpus_option, corpus_or_exit
from proxy.upstream.spawn import free_port

QUESTION = "What is this document about?"


def post(url: str, body: dict[str, object]) -> tuple[dict[str, str], dict[str, object]]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=1800) as response:
        return dict(response.headers), json.loads(response.read())


def wait_healthy(base: str, proxy: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proxy.poll() is not None:
            raise RuntimeError(f"the proxy exited with {proxy.returncode}")
        try:
            with urllib.request.urlopen(base + "/healthz", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise RuntimeError("the proxy did not become healthy")


def main(python: str, pdf: Path, max_tokens: int) -> None:
    data = base64.b64encode(pdf.read_bytes()).decode()
    body: dict[str, object] = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": QUESTION},
                    {
                        "type": "file",
                        "file": {
                            "filename": pdf.name,
                            "file_data": "data:application/pdf;base64," + data,
                        },
                    },
                ],
            }
        ],
    }
    if max_tokens > 0:
        body["max_tokens"] = max_tokens  # else the server's own limit (upstream.spawn.n_predict)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as workdir:
        env = {**os.environ, "PROXY__SERVER__DATA_DIR": workdir}
        began = time.monotonic()
        proxy = subprocess.Popen(
            [python, "-m", "proxy", "--spawn-llama-server", "--port", str(port)],
            cwd=workdir,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_healthy(base, proxy, timeout=600)
            ready = time.monotonic()
            headers, first = post(base + "/v1/chat/completions", body)
            answered = time.monotonic()
            post(base + "/v1/chat/completions", body)
            again = time.monotonic() - answered
        finally:
            proxy.terminate()
            proxy.wait(30)
    choices = first["choices"]
    assert isinstance(choices, list)
    asked = max_tokens if max_tokens > 0 else "not set"
    print(f"{pdf.name}: {pdf.stat().st_size // 1024} KB; max_tokens {asked}; {python}")
    print(f"ready (/healthz 200):        {ready - began:6.1f} s")
    print(f"first answer after ready:    {answered - ready:6.1f} s")
    print(f"command to first answer:     {answered - began:6.1f} s")
    print(f"same question again:         {again:6.1f} s  (document parsed and indexed already)")
    print(
        f"strategy {headers.get('X-Enrich-Strategy')}, tokens {headers.get('X-Enrich-Tokens')}, "
        f"citations {first.get('citations')}"
    )
    print(f"model {first.get('model')!r}, finish {choices[0].get('finish_reason')!r}")
    print(f"answer: {choices[0]['message']['content']!r}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="the venv with '.[local]'")
    parser.add_argument(
        "--pdf", type=Path, help="a PDF (default: the corpus's pdf/tracemonkey.pdf)"
    )
    add_corpus_option(parser)
    parser.add_argument(
        "--max-tokens", type=int, default=200, help="-1: none in the request (the server's own)"
    )
    args = parser.parse_args()
    pdf = args.pdf or corpus_or_exit(args.corpus) / "pdf" / "tracemonkey.pdf"
    main(args.python, pdf, args.max_tokens)
