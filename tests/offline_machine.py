"""Run inside `unshare --net --mount` as root: a machine with loopback only whose resolver never
answers, no model caches, the real `python -m proxy` in front of a fake upstream without a
tokenizer; /healthz is asked throughout while two document questions are asked. Prints what
it saw as one JSON line. Used by tests/test_offline_machine.py; also by hand:

    unshare --net --mount --fork -- .venv/bin/python tests/offline_machine.py WORK_DIR
    unshare ... -- /path/to/venv/bin/python tests/offline_machine.py WORK_DIR --installed

With `--installed` the proxy is the one `pip install` put in that Python's environment (run
from WORK_DIR, this checkout not on its path), not this checkout's.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from tests.fakes.servers import ServerThread  # noqa: E402
from tests.fakes.upstream import FakeUpstream  # noqa: E402

HEALTHZ_EVERY_S = 0.1
WATCH_AT_LEAST_S = 25.0
"""/healthz is watched this long at least: longer than glibc takes to give up on a resolver
that never answers (5 s per try, two tries, A and AAAA), the start-up fetch's first wait."""


def loopback_only() -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)


def black_hole_resolver(work: Path) -> socket.socket:
    """A DNS server on 127.0.0.1:53 that reads every query and answers none, named by a
    resolv.conf mounted over /etc/resolv.conf (this mount namespace only)."""
    hole = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    hole.bind(("127.0.0.1", 53))

    def swallow() -> None:
        while True:
            try:
                hole.recvfrom(4096)
            except OSError:
                return

    threading.Thread(target=swallow, daemon=True).start()
    conf = work / "resolv.conf"
    conf.write_text("nameserver 127.0.0.1\noptions timeout:5 attempts:2\n")
    subprocess.run(["mount", "--bind", str(conf), "/etc/resolv.conf"], check=True)
    return hole


def resolver_hangs() -> bool:
    """Whether a name lookup is still waiting after 1.5 s (it would be for 10 s or more)."""
    done = threading.Event()

    def look_up() -> None:
        with contextlib.suppress(OSError):
            socket.getaddrinfo("openaipublic.blob.core.windows.net", 443)
        done.set()

    threading.Thread(target=look_up, daemon=True).start()
    return not done.wait(1.5)


def document(name: str, text: str) -> dict[str, Any]:
    data = base64.b64encode(text.encode()).decode()
    source = {"filename": name, "file_data": f"data:text/plain;base64,{data}"}
    return {"type": "file", "file": source}


def ask(base: str, question: str, part: dict[str, Any], **body: Any) -> dict[str, Any]:
    content = [{"type": "text", "text": question}, part]
    payload = {"model": "any", "messages": [{"role": "user", "content": content}], **body}
    started = time.monotonic()
    try:
        answer = httpx.post(base + "/v1/chat/completions", json=payload, timeout=60)
    except httpx.HTTPError as error:
        return {"error": type(error).__name__, "seconds": time.monotonic() - started}
    result: dict[str, Any] = {
        "status": answer.status_code,
        "seconds": time.monotonic() - started,
        "strategy": answer.headers.get("X-Enrich-Strategy"),
    }
    body_json = answer.json()
    if answer.status_code == 200:
        result["content"] = body_json["choices"][0]["message"]["content"]
    else:
        result["code"] = body_json["error"]["code"]
        result["message"] = body_json["error"]["message"]
    return result


def main(work: Path, installed: bool = False) -> dict[str, Any]:
    loopback_only()
    hole = black_hole_resolver(work)
    seen: dict[str, Any] = {"resolver_hangs": resolver_hangs()}
    servers = ServerThread()
    upstream = FakeUpstream()
    upstream.kind = "plain"  # no tokenizer endpoint: the proxy counts with tiktoken
    upstream_url = servers.serve(upstream.app())
    home, tiktoken_cache = work / "home", work / "tiktoken-cache"
    home.mkdir()
    tiktoken_cache.mkdir()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    environment = {
        key: value
        for key, value in os.environ.items()
        if key.lower() not in {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}
    }
    environment.update(
        HOME=str(home),
        TIKTOKEN_CACHE_DIR=str(tiktoken_cache),
        PROXY__SERVER__DATA_DIR=str(work / "data"),
    )
    environment.pop("PYTHONPATH", None)
    if not installed:
        environment["PYTHONPATH"] = str(ROOT)
    # The window a server without a tokenizer endpoint does not say (as Ollama's /v1 would not);
    # passages ranked by their words while MiniLM is missing (e5 would rank them: CPU work that
    # on two busy cores competes with /healthz, which is not what is watched here).
    config = work / "config.yaml"
    config.write_text(
        'models:\n  "*":\n    context_length: 8192\nembeddings:\n  multilingual: false\n'
    )
    log = (work / "proxy.log").open("wb")
    command = [sys.executable, "-m", "proxy", "--config", str(config)]
    proxy = subprocess.Popen(
        [*command, "--upstream", upstream_url, "--port", str(port)],
        cwd=work if installed else ROOT,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=log,
        start_new_session=True,
    )
    times: list[tuple[float, float]] = []  # (seconds since the first watch, duration)
    failures: list[str] = []
    stop = threading.Event()

    def watch_healthz() -> None:
        first = time.monotonic()
        # One client: a new one per ask would time its own set-up (the CA bundle) as well.
        with httpx.Client(timeout=10) as client:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    client.get(base + "/healthz")
                    times.append((started - first, time.monotonic() - started))
                except httpx.HTTPError as error:
                    took = time.monotonic() - started
                    failures.append(f"{type(error).__name__} after {took:.1f} s")
                stop.wait(HEALTHZ_EVERY_S)

    watcher = threading.Thread(target=watch_healthz, daemon=True)
    try:
        deadline = time.monotonic() + 120
        while proxy.poll() is None and time.monotonic() < deadline:
            try:
                httpx.get(base + "/healthz", timeout=10)
                break
            except httpx.ConnectError:
                time.sleep(0.1)
        listening = time.monotonic()
        watcher.start()
        notes = "The boiler was serviced in March by Hansen Heating. " * 10
        seen["small_document"] = ask(base, "Who serviced the boiler?", document("a.txt", notes))
        rooms = " ".join(f"Window {i} of the house was painted in {1900 + i}." for i in range(400))
        book = rooms + " The boiler was serviced in March by Hansen Heating. " + rooms
        seen["retrieval"] = ask(
            base,
            "Who serviced the boiler?",
            document("house.txt", book),
            enrich={"strategy": "retrieval"},
        )
        seen["gpt_4o_name"] = ask(base, "Who?", document("b.txt", notes), model="gpt-4o-mini")
        while time.monotonic() - listening < WATCH_AT_LEAST_S:
            time.sleep(0.2)
        stop.set()
        watcher.join(15)
        seen["healthz_body"] = httpx.get(base + "/healthz", timeout=10).json()
    finally:
        stop.set()
        if proxy.poll() is None:
            os.killpg(proxy.pid, signal.SIGTERM)
            try:
                proxy.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proxy.pid, signal.SIGKILL)
                proxy.wait(10)
        log.close()
        servers.close()
        hole.close()
    seen.update(
        healthz_count=len(times),
        healthz_slowest=max((duration for _, duration in times), default=None),
        healthz_slowest_at=max(times, key=lambda t: t[1], default=(None, None))[0],
        healthz_failures=failures,
        upstream_paths=sorted({r.path for r in upstream.requests}),
        log_tail=(work / "proxy.log").read_text(errors="replace").splitlines()[-30:],
    )
    return seen


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), installed="--installed" in sys.argv[2:])))
