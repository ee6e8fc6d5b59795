"""The first ten minutes: mistakes a new user makes get one line that says what to do."""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import openai
import pytest
from aiohttp import web

from proxy.config import ConfigError, load_settings
from proxy.serve import browser_address, startup_notes
from proxy.suggest import closest_name, did_you_mean
from proxy.upstream.spawn import free_port
from tests.fakes.servers import ServerThread
from tests.fakes.upstream import FakeUpstream

ROOT = Path(__file__).resolve().parent.parent


def wait_for(condition: Callable[[], bool], seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


# -- unknown names: the closest valid one ------------------------------------------------------


def test_the_closest_name_is_proposed_and_unrelated_names_are_not() -> None:
    known = ["strategy", "retrieval_limit", "affinity_threshold", "citations", "vector_store_ids"]
    assert closest_name("citation", known) == "citations"
    assert closest_name("Retrieval-Limit", known) == "retrieval_limit"
    assert closest_name("vector_stores", known) == "vector_store_ids"
    assert closest_name("colour", known) is None
    assert did_you_mean("citation", known) == "; did you mean `citations`?"
    assert did_you_mean("colour", known) == ""


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        (
            {"retrieval": {"citation": "inline"}},
            "config key retrieval.citation: unknown key; did you mean `citations`?",
        ),
        ({"upstrem": {}}, "config key upstrem: unknown key; did you mean `upstream`?"),
        (
            {"models": {"my-model": {"enrich": {"citation": "inline"}}}},
            "config key models.my-model.enrich.citation: unknown key; did you mean `citations`?",
        ),
        (
            {"server": {"api_keys": [{"name": "a", "key": "k" * 20, "admn": True}]}},
            "config key server.api_keys.0.admn: unknown key; did you mean `admin`?",
        ),
        (
            {"upstream": {"spawn": {"n_predit": 10}}},
            "config key upstream.spawn.n_predit: unknown key; did you mean `n_predict`?",
        ),
        ({"server": {"colour": "red"}}, "config key server.colour: unknown key"),
    ],
)
def test_an_unknown_config_key_names_the_closest_valid_one(
    overrides: dict[str, object], line: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(None, environ={}, overrides=overrides)
    assert str(raised.value) == line


def test_an_unknown_enrich_key_or_header_names_the_closest_valid_one(
    make_proxy: Callable[..., str],
) -> None:
    client = openai.OpenAI(base_url=make_proxy() + "/v1", api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model="m", messages=messages, extra_body={"enrich": {"citation": "inline"}}
        )
    error = raised.value.body
    assert isinstance(error, dict)
    assert error["message"] == "enrich.citation: unknown option; did you mean `citations`?"
    assert error["param"] == "enrich.citation"
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model="m", messages=messages, extra_body={"enrich": {"colour": "red"}}
        )
    error = raised.value.body
    assert isinstance(error, dict)
    assert error["message"] == (  # no name is close: all of them
        "enrich.colour: unknown option; known: strategy, retrieval_limit, affinity_threshold, "
        "citations, vector_store_ids, images, search, prompt"
    )
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model="m", messages=messages, extra_headers={"X-Enrich-Citation": "inline"}
        )
    error = raised.value.body
    assert isinstance(error, dict)
    assert error["message"] == (
        "X-Enrich-Citation: unknown option header; did you mean `X-Enrich-Citations`?"
    )
    assert error["param"] == "X-Enrich-Citation"


# -- a base URL ending in /v1 ------------------------------------------------------------------


def test_a_base_url_ending_in_v1_is_taken_without_it_and_said_at_start() -> None:
    settings = load_settings(
        None, environ={}, overrides={"upstream": {"base_url": "http://127.0.0.1:8080/v1/"}}
    )
    assert settings.upstream.base_url == "http://127.0.0.1:8080"
    assert startup_notes(settings) == [
        "upstream.base_url ended in /v1: using http://127.0.0.1:8080 (the proxy adds /v1/... "
        "to each path itself; write the address without /v1 to silence this)"
    ]
    plain = load_settings(
        None, environ={}, overrides={"upstream": {"base_url": "http://gpu:8000/openai"}}
    )
    assert plain.upstream.base_url == "http://gpu:8000/openai"
    assert startup_notes(plain) == []


def test_a_base_url_ending_in_v1_reaches_the_upstream_at_v1_once(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(upstream={"base_url": upstream.base_url + "/v1"})  # type: ignore[attr-defined]
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
    answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content == "Hello from the fake upstream."
    # With a document: counted by the upstream's own tokenizer, not a tiktoken stand-in.
    note = "data:text/plain;base64," + base64.b64encode(b"The keeper fed the cats.").decode()
    content = [
        {"type": "text", "text": "Who fed the cats?"},
        {"type": "file", "file": {"filename": "note.txt", "file_data": note}},
    ]
    raw = client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": content}]
    )
    assert raw.headers["X-Enrich-Strategy"] == "inject-full-content"
    paths = [r.path for r in upstream.requests]
    assert "/v1/chat/completions" in paths and "/tokenize" in paths
    assert not [path for path in paths if path.startswith("/v1/v1")]
    assert httpx.get(base + "/healthz").json()["status"] == "ok"


def test_healthz_is_degraded_when_the_base_url_is_not_a_servers_root(
    make_proxy: Callable[..., str], servers: ServerThread
) -> None:
    # Something answers there, but 404 to both /health and /v1/models.
    elsewhere = servers.serve(web.Application())
    base = make_proxy(upstream={"base_url": elsewhere + "/api"})
    health = httpx.get(base + "/healthz")
    assert health.status_code == 503
    assert health.json()["status"] == "degraded"
    assert health.json()["detail"] == (
        f"{elsewhere}/api answers 404 to /health and to /v1/models: upstream.base_url must be "
        "the server's root, such as http://127.0.0.1:8080"
    )


def test_the_browser_address_of_a_wildcard_bind_is_loopback() -> None:
    def address(host: str) -> str:
        settings = load_settings(None, environ={}, overrides={"server": {"host": host}})
        return browser_address(settings, 8000)

    assert address("0.0.0.0") == "http://127.0.0.1:8000"
    assert address("::") == "http://[::1]:8000"
    assert address("192.168.1.5") == "http://192.168.1.5:8000"


# -- the real command: a port in use, an upstream down at start --------------------------------


@pytest.fixture
def command(tmp_path: Path) -> Iterator[Callable[..., tuple[subprocess.Popen[bytes], Path]]]:
    started: list[subprocess.Popen[bytes]] = []

    def run(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], Path]:
        log = tmp_path / f"stderr-{len(started)}.txt"
        with log.open("wb") as err:
            process = subprocess.Popen(
                [sys.executable, "-m", "proxy", *args],
                cwd=ROOT,
                env={
                    **os.environ,
                    "PROXY__SERVER__DATA_DIR": str(tmp_path / "data"),
                    **(env or {}),
                },
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
            )
        started.append(process)
        return process, log

    yield run
    for process in started:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


def test_a_port_in_use_is_one_line_that_says_what_to_do(
    command: Callable[..., tuple[subprocess.Popen[bytes], Path]],
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        process, log = command("--upstream", "http://127.0.0.1:9", "--port", str(port))
        assert process.wait(60) == 1
    text = log.read_text()
    assert text.endswith(
        f"cannot start: port {port} on 127.0.0.1 is already in use (another proxy, or another "
        f"server, is listening there): stop it, or start on another port with --port {port + 1} "
        "(server.port)\n"
    )
    assert "Traceback" not in text


def test_a_local_server_that_cannot_start_is_one_line_that_says_why(
    command: Callable[..., tuple[subprocess.Popen[bytes], Path]], tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-model.gguf"
    with_model = {
        "PROXY__UPSTREAM__SPAWN__MODEL": str(missing),
        # A binary that exists, so that the model is what is missing whether or not the
        # optional local extra (xllamacpp) is installed.
        "PROXY__UPSTREAM__SPAWN__BACKEND": "binary",
        "PROXY__UPSTREAM__SPAWN__BINARY": shutil.which("true") or "/bin/true",
    }
    process, log = command("--spawn-llama-server", "--port", str(free_port()), env=with_model)
    assert process.wait(60) == 1
    text = log.read_text()
    assert text.endswith(
        f"cannot start the local llama.cpp server: model file not found at {missing}\n"
    )
    assert "Traceback" not in text


def test_an_upstream_down_at_start_is_a_warning_until_it_answers(
    command: Callable[..., tuple[subprocess.Popen[bytes], Path]],
    servers: ServerThread,
    upstream: FakeUpstream,
) -> None:
    upstream_port, port = free_port(), free_port()
    _, log = command("--upstream", f"http://127.0.0.1:{upstream_port}", "--port", str(port))
    base = f"http://127.0.0.1:{port}"
    assert wait_for(lambda: b"upstream not answering" in log.read_bytes()), log.read_text()
    text = log.read_text()
    # The first line comes before the seconds of imports, saying what is under way.
    assert text.splitlines()[0].endswith(
        f"loading, for 127.0.0.1:{port}, in front of http://127.0.0.1:{upstream_port}'"
    )
    assert f"open {base}/ui to see what the proxy decides" in text
    assert f"upstream http://127.0.0.1:{upstream_port} is unreachable" in text
    assert "start it, or point --upstream (upstream.base_url) at a running server" in text
    health = httpx.get(base + "/healthz")
    assert (health.status_code, health.json()["status"]) == (503, "degraded")

    async def start_upstream() -> None:
        runner = web.AppRunner(upstream.app())
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", upstream_port).start()
        servers.runners.append(runner)

    servers.call(start_upstream())
    assert wait_for(lambda: b"upstream answering" in log.read_bytes(), 30), log.read_text()
    assert httpx.get(base + "/healthz").status_code == 200


# -- a document sent as an image (more in tests/pipeline/test_image_parts.py) ---------------


def test_the_type_of_a_data_url_is_read_from_its_head_only() -> None:
    from proxy.pipeline.images import data_url_type

    assert data_url_type("data:application/pdf;base64,AAAA") == "application/pdf"
    assert data_url_type("DATA:Image/PNG;base64,AAAA") == "image/png"
    assert data_url_type("data:,hello") == ""
    assert data_url_type("https://example.com/a.pdf") is None
    assert data_url_type("data:" + "x" * 10_000) == "x" * 251


# -- a missing offline file: which, and where ----------------------------------------------------


def test_a_missing_embedding_model_is_named_with_its_place_and_never_fetched_on_a_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chromadb.utils.embedding_functions import ONNXMiniLM_L6_V2

    from proxy.errors import ProxyError
    from proxy.retrieval.embeddings import DefaultEmbedder

    def no_download(self: object, url: str, fname: str, chunk_size: int = 1024) -> None:
        raise AssertionError(f"a request tried to download {url}")

    monkeypatch.setattr(ONNXMiniLM_L6_V2, "DOWNLOAD_PATH", tmp_path / "all-MiniLM-L6-v2")
    monkeypatch.setattr(ONNXMiniLM_L6_V2, "_download", no_download)
    embedder = DefaultEmbedder(precision="fp32")
    with pytest.raises(ProxyError) as raised:
        asyncio.run(embedder.embed_query("hello"))
    url = ONNXMiniLM_L6_V2.MODEL_DOWNLOAD_URL
    folder = tmp_path / "all-MiniLM-L6-v2" / "onnx"
    assert raised.value.status == 503 and raised.value.code == "embedding_model_unavailable"
    assert raised.value.message == (
        f"the embedding model all-MiniLM-L6-v2 is not in {folder} (config.json is missing; it "
        "was not fetched at start-up); on a machine without internet access, unpack "
        f"{url} into {folder.parent} (it holds onnx/model.onnx and the tokenizer's files) and "
        "ask again, or use an embedding server (embeddings.backend: openai)"
    )
    # That is where Chroma looks: the files put there are read without any download.
    shipped = ROOT.parent / "shared" / "models" / "chroma" / "all-MiniLM-L6-v2" / "onnx"
    if not shipped.is_dir():
        pytest.skip("no shipped MiniLM files to put in place")
    folder.mkdir(parents=True)
    for item in shipped.iterdir():
        (folder / item.name).write_bytes(item.read_bytes())
    assert embedder.unavailable() is None
    assert len(asyncio.run(embedder.embed_query("hello"))) == 384
