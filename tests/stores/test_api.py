"""The vector stores API through the official openai SDK, in front of the fake embedder."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from tests.callers import sdk
from tests.fakes.upstream import FakeUpstream
from tests.stores.support import FAST, TOPICS, upload, upload_topics, wait_until

SMALL = {"chunk_tokens": 40, "chunk_overlap": 0}
CATS = "What did the keeper feed the cats?"


@pytest.fixture
def base(make_proxy: Callable[..., str]) -> str:
    return make_proxy(vector_stores=FAST, retrieval=SMALL)


def ready_store(client: openai.OpenAI, ids: dict[str, str], **attributes: Any) -> str:
    """A store holding the files (each with its attributes), indexed."""
    store = client.vector_stores.create(name="topics")
    files = [{"file_id": fid, "attributes": attributes.get(name, {})} for name, fid in ids.items()]
    batch = client.vector_stores.file_batches.create_and_poll(
        vector_store_id=store.id,
        files=files,  # type: ignore[typeddict-item]
    )
    assert batch.file_counts.completed == len(ids), batch
    return store.id


def test_create_and_poll_then_search(base: str) -> None:
    client = sdk(base)
    ids = upload_topics(client)
    store = client.vector_stores.create(name="topics", metadata={"team": "a"})
    assert store.status == "completed" and store.file_counts.total == 0
    assert store.object == "vector_store" and store.id.startswith("vs_")
    batch = client.vector_stores.file_batches.create_and_poll(
        vector_store_id=store.id, file_ids=list(ids.values())
    )
    assert batch.status == "completed" and batch.object == "vector_store.files_batch"
    assert batch.file_counts.completed == 3
    store = client.vector_stores.retrieve(store.id)
    assert store.status == "completed"
    assert store.file_counts.completed == 3 and store.file_counts.total == 3
    assert store.usage_bytes > 0
    assert store.name == "topics" and store.metadata == {"team": "a"}
    assert store.last_active_at is not None and store.expires_at is None

    page = client.vector_stores.search(store.id, query=CATS)
    assert page.model_extra is not None
    assert page.model_extra["search_query"] == [CATS]
    results = list(page)
    assert results[0].filename == "lighthouse.txt"
    assert results[0].file_id == ids["lighthouse.txt"]
    assert "sardines" in results[0].content[0].text
    assert 0 < results[0].score <= 1
    assert [r.score for r in results] == sorted((r.score for r in results), reverse=True)


def test_files_are_indexed_in_the_background(base: str) -> None:
    client = sdk(base)
    file_id = upload(client, "lighthouse.txt", TOPICS["lighthouse.txt"])
    store = client.vector_stores.create(name="one")
    created = client.vector_stores.files.create(
        vector_store_id=store.id, file_id=file_id, attributes={"year": 2021}
    )
    assert created.object == "vector_store.file" and created.id == file_id
    assert created.status in ("in_progress", "completed")
    assert created.vector_store_id == store.id and created.attributes == {"year": 2021}
    done = client.vector_stores.files.poll(file_id, vector_store_id=store.id)
    assert done.status == "completed" and done.last_error is None and done.usage_bytes > 0
    assert done.chunking_strategy is not None and done.chunking_strategy.type == "static"
    assert done.chunking_strategy.static.max_chunk_size_tokens == SMALL["chunk_tokens"]
    # The SDK's own upload helper: the Files API, then the store.
    uploaded = client.vector_stores.files.upload_and_poll(
        vector_store_id=store.id, file=("quarks.txt", TOPICS["quarks.txt"].encode())
    )
    assert uploaded.status == "completed"
    assert client.vector_stores.retrieve(store.id).file_counts.completed == 2


def test_search_filters_thresholds_and_limits(base: str) -> None:
    client = sdk(base)
    ids = upload_topics(client)
    store_id = ready_store(
        client,
        ids,
        **{
            "lighthouse.txt": {"topic": "sea", "year": 2019},
            "quarks.txt": {"topic": "physics", "year": 2023},
            "bakery.txt": {"topic": "food", "year": 2024, "open": True},
        },
    )
    search = client.vector_stores.search

    def found(**options: Any) -> list[str]:
        return [r.filename for r in search(store_id, query=CATS, **options)]

    assert found()[0] == "lighthouse.txt"
    assert "lighthouse.txt" not in found(filters={"type": "ne", "key": "topic", "value": "sea"})
    assert set(found(filters={"type": "gte", "key": "year", "value": 2023})) <= {
        "quarks.txt",
        "bakery.txt",
    }
    either = {
        "type": "or",
        "filters": [
            {"type": "eq", "key": "open", "value": True},
            {"type": "in", "key": "topic", "value": ["sea"]},
        ],
    }
    assert set(found(filters=either)) == {"lighthouse.txt", "bakery.txt"}
    assert found(max_num_results=1) == ["lighthouse.txt"]
    assert found(ranking_options={"score_threshold": 0.999}) == []
    strong = search(store_id, query=CATS, ranking_options={"score_threshold": 0.6})
    assert all(r.score > 0.6 for r in strong) and next(r.filename for r in strong) == (
        "lighthouse.txt"
    )
    # Several queries: each passage once, at its best score.
    both = search(store_id, query=[CATS, "strong interaction of quarks"], rewrite_query=True)
    names = [r.filename for r in both]
    assert {"lighthouse.txt", "quarks.txt"} <= set(names)
    assert len(names) == len({(r.file_id, r.content[0].text) for r in both})


def test_bad_requests_are_openai_shaped(base: str) -> None:
    client = sdk(base)
    store = client.vector_stores.create(name="x")
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: client.vector_stores.search(store.id, query=CATS, max_num_results=51), "max"),
        (lambda: client.vector_stores.search(store.id, query=[]), "query"),
        (
            lambda: client.vector_stores.search(
                store.id,
                query=CATS,
                filters={"type": "eq", "key": "a"},  # type: ignore[typeddict-item]
            ),
            "filters.value",
        ),
        (
            lambda: client.vector_stores.create(
                chunking_strategy={
                    "type": "static",
                    "static": {"max_chunk_size_tokens": 5000, "chunk_overlap_tokens": 0},
                }
            ),
            "max_chunk_size_tokens",
        ),
        (lambda: client.vector_stores.create(metadata={f"k{n}": "v" for n in range(17)}), "16"),
        (lambda: client.vector_stores.list(limit=101), "limit"),
        (lambda: client.vector_stores.files.list(store.id, filter="done"), "filter"),  # type: ignore[arg-type]
        (
            lambda: client.vector_stores.file_batches.create(store.id),
            "file_ids or files",
        ),
    ]
    for call, words in cases:
        with pytest.raises(openai.BadRequestError) as caught:
            call()
        error = caught.value.body
        assert isinstance(error, dict) and words in error["message"], error
        assert error["type"] == "invalid_request_error"
    with pytest.raises(openai.NotFoundError) as missing:
        client.vector_stores.files.create(vector_store_id=store.id, file_id="file-" + "0" * 24)
    assert missing.value.body["code"] == "file_not_found"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        client.vector_stores.retrieve("vs_nope")
    too_many = client.files.create(file=("a.txt", b"alpha"), purpose="assistants")
    with pytest.raises(openai.BadRequestError) as caught:
        client.vector_stores.files.create(
            vector_store_id=store.id,
            file_id=too_many.id,
            attributes={"a": ["not", "a", "scalar"]},  # type: ignore[dict-item]
        )
    assert caught.value.body["param"] == "file_id[0].attributes.a"  # type: ignore[index]


def test_list_modify_and_delete_stores(base: str, upstream: FakeUpstream) -> None:
    client = sdk(base)
    made = [client.vector_stores.create(name=f"s{n}").id for n in range(5)]
    first = client.vector_stores.list(limit=2)
    assert [s.id for s in first.data] == made[::-1][:2]
    assert first.has_more
    assert [s.id for s in client.vector_stores.list(limit=2, order="asc")] == made  # auto-paged
    assert [s.id for s in client.vector_stores.list(after=made[2], order="asc")] == made[3:]

    changed = client.vector_stores.update(
        made[0],
        name="renamed",
        metadata={"k": "v"},
        expires_after={"anchor": "last_active_at", "days": 3},
    )
    assert changed.name == "renamed" and changed.metadata == {"k": "v"}
    assert changed.expires_after is not None and changed.expires_after.days == 3
    assert changed.expires_at == changed.last_active_at + 3 * 86_400  # type: ignore[operator]
    cleared = client.vector_stores.update(made[0], expires_after=None)
    assert cleared.expires_after is None and cleared.name == "renamed"

    gone = client.vector_stores.delete(made[0])
    assert gone.deleted and gone.object == "vector_store.deleted"
    with pytest.raises(openai.NotFoundError):
        client.vector_stores.retrieve(made[0])
    assert made[0] not in [s.id for s in client.vector_stores.list()]
    # Nothing under /v1/vector_stores goes upstream, even a path the proxy does not serve.
    assert httpx.get(base + "/v1/vector_stores/x/y/z/w").status_code == 404
    assert not [r for r in upstream.requests if "vector_stores" in r.path]


def test_files_of_a_store_list_update_content_and_delete(base: str) -> None:
    client = sdk(base)
    ids = upload_topics(client)
    store_id = ready_store(client, ids)
    files = client.vector_stores.files
    listed = files.list(store_id, limit=2)
    assert len(listed.data) == 2 and listed.has_more
    assert {f.id for f in files.list(store_id)} == set(ids.values())
    assert list(files.list(store_id, filter="failed")) == []
    assert len(list(files.list(store_id, filter="completed"))) == 3

    lighthouse = ids["lighthouse.txt"]
    updated = files.update(lighthouse, vector_store_id=store_id, attributes={"shelf": "b2"})
    assert updated.attributes == {"shelf": "b2"}
    assert files.retrieve(lighthouse, vector_store_id=store_id).attributes == {"shelf": "b2"}
    shelf = {"type": "eq", "key": "shelf", "value": "b2"}
    hits = client.vector_stores.search(store_id, query="cats and bread", filters=shelf)  # type: ignore[arg-type]
    assert {r.filename for r in hits} == {"lighthouse.txt"}

    content = list(files.content(lighthouse, vector_store_id=store_id))
    assert "sardines" in "".join(part.text or "" for part in content)

    removed = files.delete(lighthouse, vector_store_id=store_id)
    assert removed.deleted and removed.object == "vector_store.file.deleted"
    assert "lighthouse.txt" not in [
        r.filename for r in client.vector_stores.search(store_id, query=CATS)
    ]
    with pytest.raises(openai.NotFoundError):
        files.retrieve(lighthouse, vector_store_id=store_id)
    # The uploaded File stays, as on OpenAI.
    assert client.files.retrieve(lighthouse).id == lighthouse
    assert client.vector_stores.retrieve(store_id).file_counts.total == 2


def test_deleting_a_file_takes_it_out_of_every_store(base: str) -> None:
    client = sdk(base)
    ids = upload_topics(client)
    first, second = ready_store(client, ids), ready_store(client, ids)
    client.files.delete(ids["lighthouse.txt"])
    for store_id in (first, second):
        names = [r.filename for r in client.vector_stores.search(store_id, query=CATS)]
        assert "lighthouse.txt" not in names and names
        assert client.vector_stores.retrieve(store_id).file_counts.total == 2


def test_deleting_a_store_keeps_its_files(base: str) -> None:
    client = sdk(base)
    ids = upload_topics(client)
    store_id = ready_store(client, ids)
    client.vector_stores.delete(store_id)
    assert {f.id for f in client.files.list()} == set(ids.values())
    with pytest.raises(openai.NotFoundError):
        client.vector_stores.files.list(store_id)


def test_a_file_that_cannot_be_read_fails_with_its_reason(base: str) -> None:
    client = sdk(base)
    broken = upload(client, "broken.pdf", b"%PDF-1.7 this is not really a pdf")
    store = client.vector_stores.create(name="x", file_ids=[broken])
    done = client.vector_stores.files.poll(broken, vector_store_id=store.id)
    assert done.status == "failed"
    assert done.last_error is not None and done.last_error.code == "invalid_file"
    assert "broken.pdf" in done.last_error.message
    store_now = client.vector_stores.retrieve(store.id)
    assert store_now.file_counts.failed == 1 and store_now.status == "completed"


def test_static_chunking_keeps_its_own_passages(base: str) -> None:
    client = sdk(base)
    text = " ".join(f"Sentence number {n} talks about lighthouse cats." for n in range(60))
    file_id = upload(client, "long.txt", text)
    static = {"type": "static", "static": {"max_chunk_size_tokens": 100, "chunk_overlap_tokens": 0}}
    small = client.vector_stores.create(name="auto", file_ids=[file_id])
    large = client.vector_stores.create(name="static", file_ids=[file_id], chunking_strategy=static)  # type: ignore[arg-type]
    for store in (small, large):
        wait_until(lambda s=store: client.vector_stores.retrieve(s.id).status == "completed")
    record = client.vector_stores.files.retrieve(file_id, vector_store_id=large.id)
    assert record.chunking_strategy is not None
    assert record.chunking_strategy.static.max_chunk_size_tokens == 100  # type: ignore[union-attr]

    def longest(store_id: str) -> int:
        hits = client.vector_stores.search(store_id, query="lighthouse cats", max_num_results=50)
        return max(len(r.content[0].text) for r in hits)

    # The same bytes, cut two ways, each searched in its own passages.
    assert longest(large.id) > longest(small.id)
    assert longest(small.id) == longest(small.id)
