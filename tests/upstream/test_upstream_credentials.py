"""Credentials in upstream.base_url (`http://user:password@host`) are the upstream's HTTP Basic
auth, and never printed: not in error bodies, decision records, /ui, /healthz, the preview or
the logs. With upstream.api_key as well the proxy refuses to start. The object store's errors
tell the caller what failed, never its endpoint, bucket or keys."""

from __future__ import annotations

import base64
from collections.abc import Callable

import httpx
import openai
import pytest

from proxy.config import ConfigError, load_settings
from proxy.files.objects import StoreUnavailable, make_object_store
from proxy.files.s3 import S3FileStore
from tests.engines import S3_ENVIRONMENT, free_port
from tests.fakes.upstream import FakeUpstream
from tests.test_logs_and_secrets import json_logs

USER, SECRET = "proxyuser", "pa55-Secret-in-URL"
CHAT = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
PDF_LIKE = base64.b64encode(b"Plain words of a small document.\n" * 3).decode()
WITH_FILE = {
    "model": "m",
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What does it say?"},
                {"type": "file", "file": {"filename": "a.txt", "file_data": PDF_LIKE}},
            ],
        }
    ],
}


def with_credentials(url: str) -> str:
    return url.replace("http://", f"http://{USER}:{SECRET}@")


def test_the_credentials_are_basic_auth_replacing_the_clients(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(upstream={"base_url": with_credentials(upstream.base_url)})  # type: ignore[attr-defined]
    # The SDK always sends an Authorization header: the upstream gets the URL's instead.
    client = openai.OpenAI(base_url=base + "/v1", api_key="sk-client", max_retries=0)
    assert client.chat.completions.create(model="m", messages=CHAT["messages"])  # type: ignore[arg-type]
    expected = "Basic " + base64.b64encode(f"{USER}:{SECRET}".encode()).decode()
    assert upstream.last_to("/v1/chat/completions").headers["Authorization"] == expected
    assert httpx.get(base + "/v1/models").status_code == 200
    assert upstream.last_to("/v1/models").headers["Authorization"] == expected
    httpx.post(base + "/v1/chat/completions", json=WITH_FILE, timeout=60)
    assert upstream.last_to("/props").headers["Authorization"] == expected  # its own calls too


def test_the_credentials_are_printed_nowhere(
    make_proxy: Callable[..., str], capfd: pytest.CaptureFixture[str]
) -> None:
    dead = with_credentials(f"http://127.0.0.1:{free_port()}")  # nothing listens there
    with json_logs("debug"):
        base = make_proxy(upstream={"base_url": dead})
        answers = [
            httpx.post(base + "/v1/chat/completions", json=CHAT, timeout=60),
            httpx.post(base + "/v1/chat/completions", json={**CHAT, "stream": True}, timeout=60),
            httpx.post(base + "/v1/chat/completions", json=WITH_FILE, timeout=60),
            httpx.post(base + "/v1/responses", json={"model": "m", "input": "hi"}, timeout=60),
            httpx.get(base + "/v1/models", timeout=60),
            httpx.post(base + "/tokenize", json={"content": "x"}, timeout=60),
            httpx.get(base + "/healthz", timeout=60),
            httpx.post(base + "/v1/enrich/preview", json=CHAT, timeout=60),
            httpx.get(base + "/v1/enrich/decisions", timeout=60),
        ]
        logs = capfd.readouterr()
    assert answers[0].status_code == 502 and "unreachable" in answers[0].text
    assert "127.0.0.1" in answers[0].text  # the upstream is named, its credentials are not
    assert answers[-1].json()["data"]  # the decision records were there to look at
    for text in [a.text for a in answers] + [logs.out, logs.err]:
        assert SECRET not in text and USER not in text


def test_credentials_and_an_api_key_together_refuse_to_start() -> None:
    with pytest.raises(ConfigError, match="base_url carries credentials") as refused:
        load_settings(
            None,
            environ={},
            overrides={"upstream": {"base_url": "http://u:p@gpu:8080", "api_key": "sk-x"}},
        )
    assert "api_key" in str(refused.value) and "p@" not in str(refused.value)
    settings = load_settings(
        None, environ={}, overrides={"upstream": {"base_url": "http://u:p@gpu:8080/"}}
    )
    assert settings.upstream.base_url == "http://gpu:8080"
    assert settings.upstream.authorization == "Basic " + base64.b64encode(b"u:p").decode()


def test_an_object_store_failure_names_no_endpoint_bucket_or_owner(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    from proxy.config import FileStoreSettings

    for name, value in S3_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    port = free_port()
    files = FileStoreSettings(
        backend="s3",
        bucket="secret-bucket-name",
        prefix="tenant-prefix",
        endpoint_url=f"http://127.0.0.1:{port}",
    )
    store = S3FileStore(make_object_store(files), 1000)
    with json_logs("info"):
        for attempt in (
            lambda: store.list("team-a"),
            lambda: store.get("file-" + "0" * 24, "team-a"),
        ):
            with pytest.raises(StoreUnavailable) as failed:
                attempt()
            error = failed.value.to_dict()["error"]
            assert error["code"] == "object_store_unavailable" and failed.value.status == 503
            for secret in (
                str(port),
                "secret-bucket-name",
                "tenant-prefix",
                b"team-a".hex(),
            ):
                assert secret not in error["message"]
        logs = capfd.readouterr()
    assert "object store failed" in logs.err + logs.out  # the operator learns why
    assert str(port) in logs.err + logs.out


async def test_embedding_and_rerank_servers_are_named_without_their_credentials() -> None:
    from proxy.retrieval.embedding_server import OpenAIEmbedder
    from proxy.retrieval.rerank import Reranker

    port = free_port()
    embedder = OpenAIEmbedder(f"http://{USER}:{SECRET}@127.0.0.1:{port}/v1", "m", max_retries=0)
    reranker = Reranker(f"http://{USER}:{SECRET}@127.0.0.1:{port}/v1", "m")
    try:
        for failing in (embedder.embed_query("x"), reranker.scores("q", ["a", "b"])):
            with pytest.raises(Exception) as failed:
                await failing
            text = str(failed.value)
            assert f"127.0.0.1:{port}" in text and SECRET not in text and USER not in text
    finally:
        await embedder.close()
        await reranker.close()
