"""Vector stores outlive the process: records on disk, indexing resumed after a restart or a
crash, expiry, cancelled batches."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.callers import sdk
from tests.fakes.embeddings import FakeEmbeddings
from tests.fakes.servers import ServerThread
from tests.stores.support import FAST, upload_topics, wait_until

SMALL = {"chunk_tokens": 40, "chunk_overlap": 0}
CATS = "What did the keeper feed the cats?"


@pytest.fixture
def paused(embeddings: FakeEmbeddings) -> Iterator[FakeEmbeddings]:
    """The embedder holds every request until the test lets it go."""
    embeddings.paused.set()
    yield embeddings
    embeddings.paused.clear()


def stop_last(servers: ServerThread) -> None:
    """Stop the proxy started last, as a graceful shutdown does."""
    servers.call(servers.runners.pop().cleanup())


def records(tmp_path: Path) -> Path:
    return tmp_path / "data" / "vector_stores"


def rewrite(path: Path, **changes: Any) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def completed(client: openai.OpenAI, store_id: str) -> bool:
    return client.vector_stores.retrieve(store_id).status == "completed"


def test_stores_survive_a_restart(make_proxy: Callable[..., str], servers: ServerThread) -> None:
    client = sdk(make_proxy(vector_stores=FAST, retrieval=SMALL))
    ids = upload_topics(client)
    store = client.vector_stores.create(
        name="kept", file_ids=list(ids.values()), metadata={"k": "v"}
    )
    wait_until(lambda: completed(client, store.id))
    stop_last(servers)

    again = sdk(make_proxy(vector_stores=FAST, retrieval=SMALL))
    found = again.vector_stores.retrieve(store.id)
    assert found.name == "kept" and found.metadata == {"k": "v"}
    assert found.file_counts.completed == 3 and found.status == "completed"
    assert [s.id for s in again.vector_stores.list()] == [store.id]
    results = list(again.vector_stores.search(store.id, query=CATS))
    assert results[0].file_id == ids["lighthouse.txt"]


def test_indexing_cut_short_resumes_after_a_restart(
    make_proxy: Callable[..., str], servers: ServerThread, paused: FakeEmbeddings
) -> None:
    client = sdk(make_proxy(vector_stores=FAST, retrieval=SMALL))
    ids = upload_topics(client)
    store = client.vector_stores.create(name="cut", file_ids=list(ids.values()))
    assert client.vector_stores.retrieve(store.id).status == "in_progress"
    stop_last(servers)  # mid-indexing: the embedder never answered
    paused.paused.clear()

    again = sdk(make_proxy(vector_stores=FAST, retrieval=SMALL))
    wait_until(lambda: completed(again, store.id))
    assert again.vector_stores.retrieve(store.id).file_counts.completed == 3


def test_a_crashed_runners_files_are_taken_over_once_its_claim_runs_out(
    make_proxy: Callable[..., str], servers: ServerThread, tmp_path: Path
) -> None:
    settings = {"vector_stores": {**FAST, "indexing_lease_s": 0.2}, "retrieval": SMALL}
    client = sdk(make_proxy(**settings))
    ids = upload_topics(client)
    store = client.vector_stores.create(name="crash", file_ids=list(ids.values()))
    wait_until(lambda: completed(client, store.id))
    stop_last(servers)
    # What a process killed while indexing leaves: in progress, claimed by it for a while yet.
    for path in (records(tmp_path) / "files" / store.id).glob("*.json"):
        rewrite(
            path,
            status="in_progress",
            usage_bytes=0,
            runner="gone-host:4242:dead00",
            runner_until=time.time() + 0.5,
        )

    again = sdk(make_proxy(**settings))
    assert again.vector_stores.retrieve(store.id).status == "in_progress"
    wait_until(lambda: completed(again, store.id))
    assert again.vector_stores.retrieve(store.id).usage_bytes > 0


def test_an_expired_store_can_be_read_and_deleted_not_used(
    make_proxy: Callable[..., str], tmp_path: Path
) -> None:
    client = sdk(make_proxy(vector_stores=FAST, retrieval=SMALL))
    ids = upload_topics(client)
    store = client.vector_stores.create(
        name="old",
        file_ids=list(ids.values()),
        expires_after={"anchor": "last_active_at", "days": 1},
    )
    wait_until(lambda: completed(client, store.id))
    path = records(tmp_path) / "stores" / f"{store.id}.json"

    # Used an hour ago: the search moves last_active_at, and with it the expiry.
    rewrite(path, last_active_at=int(time.time()) - 3600)
    before = int(time.time())
    client.vector_stores.search(store.id, query=CATS)
    touched = client.vector_stores.retrieve(store.id)
    assert touched.last_active_at is not None and touched.last_active_at >= before
    assert touched.expires_at == touched.last_active_at + 86_400

    rewrite(path, last_active_at=int(time.time()) - 2 * 86_400)
    old = client.vector_stores.retrieve(store.id)
    assert old.status == "expired"
    assert old.expires_at is not None and old.expires_at < time.time()
    for use in (
        lambda: client.vector_stores.search(store.id, query=CATS),
        lambda: client.vector_stores.files.create(
            vector_store_id=store.id, file_id=ids["quarks.txt"]
        ),
        lambda: client.responses.create(
            model="m",
            input=CATS,
            tools=[{"type": "file_search", "vector_store_ids": [store.id]}],
        ),
    ):
        with pytest.raises(openai.BadRequestError) as caught:
            use()
        assert caught.value.body["code"] == "vector_store_expired"  # type: ignore[index]
    assert client.vector_stores.files.list(store.id).data
    assert client.vector_stores.delete(store.id).deleted


def test_a_cancelled_batch_stays_cancelled(
    make_proxy: Callable[..., str], paused: FakeEmbeddings
) -> None:
    client = sdk(make_proxy(vector_stores=FAST, retrieval=SMALL))
    ids = upload_topics(client)
    store = client.vector_stores.create(name="c")
    batch = client.vector_stores.file_batches.create(store.id, file_ids=list(ids.values()))
    assert batch.status == "in_progress" and batch.file_counts.in_progress == 3
    cancelled = client.vector_stores.file_batches.cancel(batch.id, vector_store_id=store.id)
    assert cancelled.status == "cancelled"
    assert cancelled.file_counts.cancelled == 3 and cancelled.file_counts.in_progress == 0
    paused.paused.clear()  # whatever was under way finishes now, and must not count
    listed = client.vector_stores.file_batches.list_files(batch.id, vector_store_id=store.id)
    assert {f.status for f in listed} == {"cancelled"}
    assert list(client.vector_stores.search(store.id, query=CATS)) == []
    after = client.vector_stores.file_batches.retrieve(batch.id, vector_store_id=store.id)
    assert after.status == "cancelled" and after.file_counts.cancelled == 3
    assert client.vector_stores.retrieve(store.id).status == "completed"


def test_a_file_added_again_while_indexing_is_indexed_with_its_new_attributes(
    make_proxy: Callable[..., str], paused: FakeEmbeddings
) -> None:
    # A long lease: only the job started by the second add can finish the file in time.
    client = sdk(make_proxy(vector_stores={**FAST, "indexing_lease_s": 600}, retrieval=SMALL))
    file_id = upload_topics(client)["lighthouse.txt"]
    store = client.vector_stores.create(name="again")
    client.vector_stores.files.create(vector_store_id=store.id, file_id=file_id)
    client.vector_stores.files.create(
        vector_store_id=store.id, file_id=file_id, attributes={"version": 2}
    )
    paused.paused.clear()
    done = wait_until(
        lambda: (
            found
            if (
                found := client.vector_stores.files.retrieve(file_id, vector_store_id=store.id)
            ).status
            == "completed"
            else None
        ),
        timeout=30,
    )
    assert done.attributes == {"version": 2}
    assert client.vector_stores.retrieve(store.id).file_counts.total == 1


def test_files_stay_completed_and_searchable_when_another_precision_embeds_them_again(
    make_proxy: Callable[..., str], servers: ServerThread
) -> None:
    # README, "Changing the precision indexes documents again": the default embedder's other
    # build has another fingerprint; a store's files are not sent back to in_progress for it.
    def minilm(precision: str) -> dict[str, Any]:
        return {"backend": "default", "precision": precision}

    client = sdk(make_proxy(vector_stores=FAST, retrieval=SMALL, embeddings=minilm("fp32")))
    ids = upload_topics(client)
    store = client.vector_stores.create(name="built", file_ids=list(ids.values()))
    wait_until(lambda: completed(client, store.id))
    stop_last(servers)

    again = sdk(make_proxy(vector_stores=FAST, retrieval=SMALL, embeddings=minilm("int8")))
    found = again.vector_stores.retrieve(store.id)
    assert found.status == "completed" and found.file_counts.completed == 3
    results = list(again.vector_stores.search(store.id, query=CATS))
    assert results[0].file_id == ids["lighthouse.txt"]
    files = again.vector_stores.files.list(store.id)
    assert [f.status for f in files] == ["completed"] * 3
