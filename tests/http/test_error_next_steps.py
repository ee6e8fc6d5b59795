"""Every 5xx the proxy produces says what to do next, and an upstream nothing answers is said
before any tokenizer problem (issue 44: the wrong error first)."""

from __future__ import annotations

import ast
import asyncio
import base64
import errno
from collections.abc import Callable
from pathlib import Path

import aiohttp
import httpx
import pytest

from proxy.documents.parser import parser_unavailable
from proxy.errors import ProxyError, bad_upstream
from proxy.files.objects import StoreUnavailable
from proxy.files.protocol import QuotaExceeded
from proxy.http.files import storage_error
from proxy.http.middleware import internal_error
from proxy.http.native_responses import responses_need_chat
from proxy.offline import embedding_model_missing, tiktoken_missing
from proxy.retrieval.embedding_server import OpenAIEmbedder
from proxy.retrieval.index import VectorIndex, dimensions_changed
from proxy.retrieval.rerank import Reranker
from proxy.toolloop.loop import turn_refused
from proxy.upstream import encodings
from proxy.upstream.client import upstream_failure
from proxy.upstream.relay import stream_broken, translate_client_error
from proxy.upstream.spawn import free_port
from tests.fakes.upstream import FakeUpstream

ROOT = Path(__file__).resolve().parents[2]
URL = "http://127.0.0.1:9"


async def refused_connection() -> BaseException:
    """A real connection refused by a port nothing listens on."""
    port = free_port()
    async with aiohttp.ClientSession() as session:
        try:
            await session.get(f"http://127.0.0.1:{port}/")
        except aiohttp.ClientConnectorError as error:
            return error
    raise AssertionError("something listens on a free port")


def vector_store_error(server_url: str | None) -> ProxyError:
    index = VectorIndex(lambda: None, object(), server_url=server_url, path=Path("/data/chroma"))  # type: ignore[arg-type,return-value]

    def broken() -> None:
        raise OSError("disk I/O error")

    try:
        asyncio.run(index._run(broken))
    except ProxyError as error:
        return error
    raise AssertionError("no error")


# code, how the proxy makes it, the next step its message must give
NEXT_STEPS: list[tuple[str, Callable[[], ProxyError], str]] = [
    (
        "upstream_error",
        lambda: turn_refused(500, 2, "boom"),
        "its log says why: ask again, or search once instead (enrich.search: once",
    ),
    (
        "upstream_unreachable",
        lambda: translate_client_error(asyncio.run(refused_connection()), URL),
        "; start it, or point --upstream (upstream.base_url) at a running server",
    ),
    (
        "upstream_timeout",
        lambda: translate_client_error(TimeoutError(), URL),
        ": ask again, or give it longer (upstream.read_timeout_s, upstream.connect_timeout_s)",
    ),
    (
        "upstream_failed",
        lambda: translate_client_error(aiohttp.ServerDisconnectedError(), URL),
        "; its log says why: ask again once it answers",
    ),
    (
        "upstream_failed",
        lambda: upstream_failure(500, {"error": {"message": "boom"}}, "/tokenize"),
        "boom; the upstream's log says why: ask again once it answers",
    ),
    (
        "upstream_stream_broken",
        lambda: stream_broken(URL, aiohttp.ClientPayloadError("cut")),
        "; its log says why (a crash, a restart): ask again",
    ),
    (
        "bad_upstream",
        lambda: bad_upstream("chat answer"),
        "; check that upstream.base_url is the root of an OpenAI-compatible server",
    ),
    (
        "responses_need_chat",
        responses_need_chat,
        "; set upstream.responses: proxy, or models.<name>.adapter: chat",
    ),
    (
        "internal_error",
        lambda: internal_error("0123abcd"),
        "under request id 0123abcd: report it with that line, and ask again",
    ),
    (
        "insufficient_storage",
        lambda: storage_error(OSError(errno.ENOSPC, "No space left on device")),
        "Try again later; the proxy's operator must free space on its disk (server.data_dir)",
    ),
    (
        "storage_error",
        lambda: storage_error(OSError(errno.EIO, "Input/output error")),
        ": upload it again, and if this repeats, check that server.data_dir is writable",
    ),
    (
        "storage_quota_exceeded",
        lambda: QuotaExceeded(100 * 1024 * 1024),
        "; delete some files first",
    ),
    (
        "object_store_unavailable",
        lambda: StoreUnavailable("read the file", RuntimeError("connection reset")),
        "; try again (the proxy's log says why)",
    ),
    (
        "vector_store_failed",
        lambda: vector_store_error(None),
        "; ask again, and if this repeats, check the disk under vector_store.path",
    ),
    (
        "vector_store_failed",
        lambda: vector_store_error("http://chroma:8000"),
        "; check that it runs (chroma run) at vector_store.host and port, then ask again",
    ),
    (
        "vector_store_failed",
        lambda: dimensions_changed(384, 768),
        "; give embeddings.model its new name, so documents are indexed again",
    ),
    (
        "embeddings_failed",
        lambda: OpenAIEmbedder(base_url="http://e:1/v1", model="nomic")._error("unreachable"),
        "; check that it runs and serves embeddings.model, then ask again",
    ),
    (
        "rerank_failed",
        lambda: Reranker("http://r:1/v1/rerank", "bge")._error("HTTP 500: boom"),
        "; check that it runs and serves retrieval.rerank.model, or remove retrieval.rerank",
    ),
    (
        "parser_unavailable",
        parser_unavailable,
        "; ask again, and if this repeats, the proxy's log says why",
    ),
    (
        "tokenizer_unavailable",
        lambda: tiktoken_missing(
            "cl100k_base",
            encodings.ENCODINGS["cl100k_base"].url,
            [Path("/shipped/cl100k_base.tiktoken"), Path("/home/u/.cache/tiktoken/9b5a")],
        ),
        "; reinstall enrich-proxy (pip install --force-reinstall enrich-proxy), or copy",
    ),
    (
        "embedding_model_unavailable",
        lambda: embedding_model_missing(Path("/home/u/onnx"), "https://x/onnx.tar.gz", "absent"),
        "and ask again, or use an embedding server (embeddings.backend: openai)",
    ),
]


@pytest.mark.parametrize(
    ("code", "make", "next_step"),
    NEXT_STEPS,
    ids=[f"{code}-{i}" for i, (code, _, _) in enumerate(NEXT_STEPS)],
)
def test_each_5xx_says_what_to_do(
    code: str, make: Callable[[], ProxyError], next_step: str
) -> None:
    error = make()
    assert error.status >= 500
    assert error.code == code
    assert next_step in error.message, error.message


def called_name(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)


def keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def five_hundreds() -> list[tuple[str, int, str | None]]:
    """Every place in proxy/ that makes a 5xx error: (file, line, its code)."""
    found = []
    for path in sorted((ROOT / "proxy").rglob("*.py")):
        tree = ast.parse(path.read_text())
        server_classes = {
            node.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef)
            and any(
                isinstance(item, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "status" for t in item.targets)
                and isinstance(item.value, ast.Constant)
                and int(item.value.value) >= 500
                for item in node.body
            )
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = called_name(node)
            status = keyword(node, "status")
            makes_5xx = name in ("UpstreamError", "UpstreamTimeout") or (
                name == "ProxyError"
                and isinstance(status, ast.Constant)
                and int(status.value) >= 500
            )
            if name == "ProxyError" and not isinstance(status, ast.Constant | type(None)):
                # A status taken from the upstream's answer: its own error relayed (its own
                # message and code), unless the proxy names it (our own calls' failures).
                makes_5xx = isinstance(keyword(node, "code"), ast.Constant)
            in_server_class = name == "__init__" and any(
                isinstance(parent, ast.ClassDef) and parent.name in server_classes
                for parent in ast.walk(tree)
                if node in ast.walk(parent)
            )
            if makes_5xx or in_server_class:
                code = keyword(node, "code")
                literal = code.value if isinstance(code, ast.Constant) else None
                found.append((str(path.relative_to(ROOT)), node.lineno, literal))
    return found


def test_every_5xx_in_the_code_has_a_code_whose_next_step_is_tested() -> None:
    """A new 5xx without a code, or with one the table above does not test, fails here."""
    sites = five_hundreds()
    assert len(sites) >= 15  # the scan finds them
    tested = {code for code, _, _ in NEXT_STEPS}
    untested = [site for site in sites if site[2] not in tested]
    assert untested == []


# -- the upstream first ------------------------------------------------------------------------


@pytest.fixture
def no_tiktoken_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The shipped files gone, TIKTOKEN_CACHE_DIR unset, every cache empty: the home."""
    monkeypatch.setattr(encodings, "_loaded", {})
    monkeypatch.setattr(encodings, "SHIPPED", tmp_path / "stripped")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    monkeypatch.delenv("DATA_GYM_CACHE_DIR", raising=False)
    monkeypatch.setattr(encodings.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    return home


def with_document() -> dict[str, object]:
    data = base64.b64encode(b"The boiler was serviced in March. " * 20).decode()
    part = {"filename": "notes.txt", "file_data": f"data:text/plain;base64,{data}"}
    content = [{"type": "text", "text": "When was it serviced?"}, {"type": "file", "file": part}]
    return {"model": "m", "messages": [{"role": "user", "content": content}]}


@pytest.mark.parametrize("kind", ["auto", "ollama"])
def test_an_unreachable_upstream_is_said_before_a_missing_tokenizer(
    make_proxy: Callable[..., str], no_tiktoken_files: Path, kind: str
) -> None:
    """The upstream down and tiktoken's file nowhere: the 502 that says to start the upstream,
    whether its kind is probed (auto) or configured (asked once more)."""
    down = f"http://127.0.0.1:{free_port()}"
    base = make_proxy(upstream={"base_url": down, "kind": kind})
    answer = httpx.post(base + "/v1/chat/completions", json=with_document(), timeout=60)
    assert answer.status_code == 502, answer.text
    error = answer.json()["error"]
    assert error["code"] == "upstream_unreachable"
    assert error["message"].startswith(f"upstream {down} is unreachable: ")
    assert error["message"].endswith(
        "; start it, or point --upstream (upstream.base_url) at a running server"
    )


def test_with_the_upstream_up_a_missing_tokenizer_names_where_the_readme_says(
    make_proxy: Callable[..., str], upstream: FakeUpstream, no_tiktoken_files: Path
) -> None:
    upstream.kind = "plain"  # no tokenizer endpoint: tiktoken counts
    base = make_proxy()
    answer = httpx.post(base + "/v1/chat/completions", json=with_document(), timeout=60)
    assert answer.status_code == 503, answer.text
    error = answer.json()["error"]
    assert error["code"] == "tokenizer_unavailable"
    readme = no_tiktoken_files / ".cache" / "tiktoken"
    assert f"or copy {encodings.ENCODINGS['cl100k_base'].url} to {readme}/" in error["message"]
