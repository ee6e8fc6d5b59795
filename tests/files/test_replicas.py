"""Replicas sharing one object store (a real SeaweedFS): files, listings and parsed documents
are the same whichever replica answers. Three proxies in this process, each with its own
data_dir, through the openai SDK."""

from __future__ import annotations

import asyncio
import base64
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path

import openai
import pytest

from proxy.config import FileStoreSettings
from proxy.documents.model import Page, ParsedDocument
from proxy.documents.shared import SharedParseCache
from proxy.files.lease import ObjectLeases
from proxy.files.objects import StoreUnavailable, make_object_store
from proxy.files.s3 import S3FileStore
from tests.engines import S3_ENVIRONMENT, free_port
from tests.fakes.upstream import FakeUpstream


def sdk(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="k", max_retries=0)


@pytest.fixture
def replicas(
    make_proxy: Callable[..., str], s3_files: FileStoreSettings, tmp_path: Path
) -> list[str]:
    files = s3_files.model_dump()
    return [
        make_proxy(server={"data_dir": str(tmp_path / f"replica-{n}")}, files=files)
        for n in range(3)
    ]


def documents_read(base: str) -> dict[str, float]:
    """proxy_documents_total by source, from the replica's /metrics."""
    text = sdk(base)._client.get(base + "/metrics").text
    found = re.findall(r'^proxy_documents_total\{source="(\w+)"\} ([0-9.]+)$', text, re.M)
    return {source: float(value) for source, value in found}


def ask(base: str, name: str, data: bytes, question: str = "What is it?") -> None:
    encoded = base64.b64encode(data).decode()
    sdk(base).chat.completions.create(
        model="m",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": question},
                    {"type": "file", "file": {"filename": name, "file_data": encoded}},
                ],
            }
        ],
    )


def test_upload_on_one_chat_on_another_delete_on_a_third(
    replicas: list[str], upstream: FakeUpstream
) -> None:
    one, two, three = (sdk(base) for base in replicas)
    created = one.files.create(file=("facts.txt", b"The sky is green."), purpose="user_data")
    assert [f.id for f in two.files.list().data] == [created.id]
    assert three.files.retrieve(created.id).filename == "facts.txt"
    assert two.files.content(created.id).read() == b"The sky is green."
    two.chat.completions.create(
        model="m",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What colour is the sky?"},
                    {"type": "file", "file": {"file_id": created.id}},
                ],
            }
        ],
    )
    sent = upstream.last_to("/v1/chat/completions").json["messages"][-1]["content"][0]["text"]
    assert "The sky is green." in sent
    assert three.files.delete(created.id).deleted is True
    with pytest.raises(openai.NotFoundError):
        one.files.retrieve(created.id)
    assert two.files.list().data == []


def test_a_document_parsed_by_one_replica_is_read_not_parsed_by_the_others(
    replicas: list[str],
) -> None:
    data = b"# Tides\n\nThe harbour has two tides a day.\n"
    ask(replicas[0], "tides.md", data)
    ask(replicas[1], "tides.md", data)
    ask(replicas[1], "again.md", data)  # now in replica 1's own cache
    assert documents_read(replicas[0]).get("parsed") == 1
    assert documents_read(replicas[1]) == {"shared": 1, "cache": 1}


def test_the_same_new_document_on_three_replicas_at_once_is_parsed_once(
    replicas: list[str],
) -> None:
    data = ("Chapter one. " + "The lighthouse keeper counts ships. " * 4000).encode()
    start = threading.Barrier(3)
    errors: list[BaseException] = []

    def send(base: str) -> None:
        start.wait()
        try:
            ask(base, "book.txt", data, "How many ships?")
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=send, args=(base,)) for base in replicas]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    counts = [documents_read(base) for base in replicas]
    assert sum(c.get("parsed", 0) for c in counts) == 1
    assert sum(c.get("shared", 0) for c in counts) == 2


async def test_a_waiting_replica_takes_over_when_the_parsing_one_dies(
    s3_files: FileStoreSettings,
) -> None:
    store = make_object_store(s3_files)
    dead = ObjectLeases(store, "replica-that-died", lease_s=1.0)
    assert await dead.claim("parse/" + "a" * 64 + ".text") is not None  # then never renews
    alive = SharedParseCache(store, ObjectLeases(store, "replica-alive", lease_s=1.0))
    parsed = ParsedDocument("a.txt", "a" * 64, "text", "plain", (Page(1, "hello"),))

    async def parse() -> ParsedDocument:
        return parsed

    document, here = await asyncio.wait_for(alive.parse_once("a" * 64, "text", parse), 20)
    assert (document, here) == (parsed, True)  # after the dead holder's lease ran out
    # Shared now: the next replica reads it.
    other = SharedParseCache(store, ObjectLeases(store, "replica-three"))
    assert await other.load("a" * 64, "text") == parsed


def dead_store_settings() -> FileStoreSettings:
    port = free_port()  # nothing listens there
    return FileStoreSettings(backend="s3", bucket="b", endpoint_url=f"http://127.0.0.1:{port}")


def test_an_unreachable_object_store_stops_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    from proxy.config import ConfigError, load_settings
    from proxy.wiring import make_object_store as wired_store

    for name, value in S3_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    files = dead_store_settings().model_dump()
    settings = load_settings(None, environ={}, overrides={"files": files})
    with pytest.raises(ConfigError, match="config key files: the object store cannot be used"):
        wired_store(settings)


def test_a_failing_object_store_is_a_503_not_a_500(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in S3_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    store = S3FileStore(make_object_store(dead_store_settings()), 1000)
    with pytest.raises(StoreUnavailable) as raised:
        store.get("file-" + "0" * 24, "team-a")
    assert raised.value.status == 503 and raised.value.code == "object_store_unavailable"


def test_a_large_upload_streams_in_parts_and_reads_back_whole_elsewhere(
    replicas: list[str],
) -> None:
    data = os.urandom(12 * 1024 * 1024)  # past one 8 MiB part: a multipart upload
    created = sdk(replicas[0]).files.create(file=("big.bin", data), purpose="user_data")
    assert created.bytes == len(data)
    assert sdk(replicas[1]).files.content(created.id).read() == data
    sdk(replicas[2]).files.delete(created.id)


def test_who_created_a_native_response_is_known_to_every_replica(
    make_proxy: Callable[..., str], s3_files: FileStoreSettings, tmp_path: Path
) -> None:
    keys = [
        {"name": "team-a", "key": "team-a-replica-key-01"},
        {"name": "team-b", "key": "team-b-replica-key-02"},
    ]
    one, two = (
        make_proxy(
            server={"data_dir": str(tmp_path / f"replica-{n}"), "api_keys": keys},
            upstream={"responses": "native"},
            files=s3_files.model_dump(),
        )
        for n in range(2)
    )
    created = openai.OpenAI(base_url=one + "/v1", api_key=keys[0]["key"], max_retries=0)
    assert created.responses.create(model="m", input="Say hi").id == "resp_up"
    for key, expected in ((keys[1]["key"], 404), (keys[0]["key"], 200)):
        answer = sdk(two)._client.get(
            two + "/v1/responses/resp_up", headers={"Authorization": f"Bearer {key}"}
        )
        assert answer.status_code == expected


def test_a_chain_kept_by_one_replica_is_searched_by_another(
    make_proxy: Callable[..., str],
    s3_files: FileStoreSettings,
    tmp_path: Path,
    upstream: FakeUpstream,
) -> None:
    one, two = (
        make_proxy(
            server={"data_dir": str(tmp_path / f"replica-{n}")},
            upstream={"responses": "native"},
            files=s3_files.model_dump(),
            retrieval={"chunk_tokens": 40, "chunk_overlap": 0},
        )
        for n in range(2)
    )
    notes = "\n\n".join(
        [
            "# Keeper",
            "The keeper feeds the cats sardines at dawn.",
            "# Harbour",
            "Boats leave at six.",
        ]
    )
    file_id = sdk(one).files.create(file=("notes.md", notes.encode()), purpose="user_data").id
    upstream.response_id = "resp_first"
    asked = [{"type": "input_file", "file_id": file_id}, {"type": "input_text", "text": "Cats?"}]
    sdk(one).responses.create(model="m", input=[{"role": "user", "content": asked}])
    upstream.response_id = "resp_second"
    sdk(two).responses.create(
        model="m",
        input="What does he feed them?",
        previous_response_id="resp_first",
        extra_body={"enrich": {"strategy": "retrieval", "affinity_threshold": 0.0}},
    )
    sent = upstream.last_to("/v1/responses").json["input"]
    assert "sardines" in sent[0]["content"][0]["text"]
    [record] = sdk(two)._client.get(two + "/v1/enrich/decisions").json()["data"]
    chain = record["decision"]["chain"]
    assert (chain["messages"], chain["files"]) == (2, ["notes.md"])
