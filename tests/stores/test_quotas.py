"""Vector stores within a key's bounds: how many stores, the bytes of the indexes built from its
uploads (counted with the uploads against server.max_storage_mb_per_key), and how many files
wait to be indexed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.callers import sdk
from tests.fakes.embeddings import FakeEmbeddings
from tests.stores.support import FAST, TOPICS, upload

KEY_A = "team-a-stores-key-00001"
KEY_B = "team-b-stores-key-00002"
KEYS = [{"name": "team-a", "key": KEY_A}, {"name": "team-b", "key": KEY_B}]
# About 6 KB of text: each index of it takes 180-260 KB on disk (proxy.stores.footprint).
LONG = " ".join(f"Sentence number {n} tells of the lighthouse and its keeper." for n in range(100))


def static(tokens: int, overlap: int) -> dict[str, Any]:
    return {
        "type": "static",
        "static": {"max_chunk_size_tokens": tokens, "chunk_overlap_tokens": overlap},
    }


def test_a_key_holds_at_most_its_number_of_stores(make_proxy: Callable[..., str]) -> None:
    base = make_proxy(server={"api_keys": KEYS, "max_vector_stores_per_key": 3})
    a, b = sdk(base, KEY_A), sdk(base, KEY_B)
    made = [a.vector_stores.create(name=f"s{n}").id for n in range(3)]
    with pytest.raises(openai.BadRequestError) as refused:
        a.vector_stores.create(name="one too many")
    error = refused.value.body
    assert error["code"] == "too_many_vector_stores"  # type: ignore[index]
    assert "server.max_vector_stores_per_key" in error["message"]  # type: ignore[index]
    assert len(a.vector_stores.list().data) == 3
    assert b.vector_stores.create(name="b's own")  # every key has its own count
    a.vector_stores.delete(made[0])
    assert a.vector_stores.create(name="room again")


def test_indexes_count_against_the_keys_storage_quota(make_proxy: Callable[..., str]) -> None:
    quota = 510_000  # the upload and two indexes of it, not a third, nor another upload
    base = make_proxy(
        server={"api_keys": KEYS, "max_storage_mb_per_key": quota / (1024 * 1024)},
        vector_stores=FAST,
    )
    a = sdk(base, KEY_A)
    file_id = upload(a, "long.txt", LONG)
    uploaded = len(LONG.encode())
    store = a.vector_stores.create(name="variants")
    charged: list[int] = []
    failed = None
    # The same upload again and again with other passage sizes: each is an index of its own.
    for tokens in range(100, 1000, 50):
        a.vector_stores.files.create(
            vector_store_id=store.id,
            file_id=file_id,
            chunking_strategy=static(tokens, tokens // 2),  # type: ignore[arg-type]
        )
        done = a.vector_stores.files.poll(file_id, vector_store_id=store.id)
        if done.status == "failed":
            failed = done
            break
        assert done.status == "completed"
        charged.append(done.usage_bytes)
    assert failed is not None and len(charged) >= 2, charged
    assert failed.last_error is not None and failed.last_error.code == "invalid_file"
    assert "max_storage_mb_per_key" in failed.last_error.message
    assert uploaded + sum(charged) <= quota
    # The same sizes again build nothing new and cost nothing more.
    a.vector_stores.files.create(
        vector_store_id=store.id,
        file_id=file_id,
        chunking_strategy=static(100, 50),  # type: ignore[arg-type]
    )
    assert a.vector_stores.files.poll(file_id, vector_store_id=store.id).status == "completed"
    # What is left is too little for another upload of the same size.
    with pytest.raises(openai.APIStatusError) as full:
        upload(a, "more.txt", LONG)
    assert full.value.status_code == 507
    # Another key is not touched by it.
    assert upload(sdk(base, KEY_B), "theirs.txt", LONG)
    # Deleting the upload frees its indexes with it.
    a.files.delete(file_id)
    assert upload(a, "again.txt", LONG)


def test_a_full_quota_refuses_new_attachments_before_saving_them(
    make_proxy: Callable[..., str],
) -> None:
    data = LONG.encode()[:4096]
    base = make_proxy(
        server={"api_keys": KEYS, "max_storage_mb_per_key": len(data) / (1024 * 1024)},
        vector_stores=FAST,
    )
    a = sdk(base, KEY_A)
    file_id = upload(a, "long.txt", data)  # exactly the quota: no room for an index
    store = a.vector_stores.create(name="s")
    for attach in (
        lambda: a.vector_stores.files.create(vector_store_id=store.id, file_id=file_id),
        lambda: a.vector_stores.file_batches.create(vector_store_id=store.id, file_ids=[file_id]),
        lambda: a.vector_stores.create(name="t", file_ids=[file_id]),
    ):
        with pytest.raises(openai.APIStatusError) as refused:
            attach()
        assert refused.value.status_code == 507
        assert refused.value.body["code"] == "storage_quota_exceeded"  # type: ignore[index]
    assert a.vector_stores.files.list(vector_store_id=store.id).data == []
    assert [s.name for s in a.vector_stores.list().data] == ["s"]  # no store "t" half made


def test_the_indexing_queue_is_bounded_per_key_and_overall(
    make_proxy: Callable[..., str], embeddings: FakeEmbeddings
) -> None:
    base = make_proxy(
        server={"api_keys": KEYS},
        vector_stores={**FAST, "max_queued_per_key": 2, "max_queued": 3},
    )
    a, b = sdk(base, KEY_A), sdk(base, KEY_B)
    ids = [upload(a, name, text) for name, text in TOPICS.items()]
    theirs = [upload(b, name, text) for name, text in TOPICS.items()]
    store, their_store = a.vector_stores.create(name="s"), b.vector_stores.create(name="t")
    # More than the key's share at once: refused whole, nothing saved.
    with pytest.raises(openai.RateLimitError) as burst:
        a.vector_stores.file_batches.create(vector_store_id=store.id, file_ids=ids)
    assert burst.value.body["code"] == "indexing_queue_full"  # type: ignore[index]
    assert "vector_stores.max_queued_per_key" in burst.value.body["message"]  # type: ignore[index]
    assert a.vector_stores.files.list(vector_store_id=store.id).data == []
    embeddings.paused.set()  # indexing stalls: the jobs stay queued
    try:
        for file_id in ids[:2]:
            a.vector_stores.files.create(vector_store_id=store.id, file_id=file_id)
        with pytest.raises(openai.RateLimitError):
            a.vector_stores.files.create(vector_store_id=store.id, file_id=ids[2])
        b.vector_stores.files.create(vector_store_id=their_store.id, file_id=theirs[0])
        with pytest.raises(openai.RateLimitError) as overall:
            b.vector_stores.files.create(vector_store_id=their_store.id, file_id=theirs[1])
        assert "vector_stores.max_queued " in overall.value.body["message"]  # type: ignore[index]
    finally:
        embeddings.paused.clear()
    for file_id in ids[:2]:
        assert a.vector_stores.files.poll(file_id, vector_store_id=store.id).status == "completed"
    a.vector_stores.files.create(vector_store_id=store.id, file_id=ids[2])  # room again
    assert httpx.get(base + "/healthz").status_code == 200


def on_disk(*folders: Path) -> int:
    """Bytes the folders take on disk (allocated blocks, as `du` counts them)."""
    return sum(
        path.stat().st_blocks * 512
        for folder in folders
        if folder.exists()
        for path in folder.rglob("*")
        if path.is_file()
    )


# The red team's numbers, scaled down 100 times: a 200 MB quota became 2 MB, and one upload
# indexed with thirteen chunkings was charged 48 MB (480 KB here) while 690 MB (6.9 MB) were
# written: a quota held about 14 times what it said.
SCALED_QUOTA = 2_000_000
BOOK = "\n\n".join(
    f"Chapter {n}. The keeper climbed the {n}th step of the lighthouse with a lamp of brass, "
    f"counted {n * 7} gulls over the harbour and wrote the tide at {n % 12} o'clock in the log."
    for n in range(260)
)


def test_the_indexes_of_one_upload_never_take_more_disk_than_the_quota_allows(
    make_proxy: Callable[..., str], tmp_path: Path
) -> None:
    base = make_proxy(
        server={"api_keys": KEYS, "max_storage_mb_per_key": SCALED_QUOTA / (1024 * 1024)},
        vector_stores=FAST,
    )
    data = tmp_path / "data"
    index = (data / "chroma", data / "passages")
    # Another key's small file first: the index's own files exist before the count starts.
    b = sdk(base, KEY_B)
    theirs = b.vector_stores.create(name="theirs")
    first = b.vector_stores.files.create(
        vector_store_id=theirs.id, file_id=upload(b, "a.txt", LONG)
    )
    assert b.vector_stores.files.poll(first.id, vector_store_id=theirs.id).status == "completed"
    a = sdk(base, KEY_A)
    file_id = upload(a, "book.txt", BOOK)
    store = a.vector_stores.create(name="variants")
    before = on_disk(*index)
    outcomes = []
    for tokens in range(100, 750, 50):  # thirteen chunkings of one upload
        a.vector_stores.files.create(
            vector_store_id=store.id,
            file_id=file_id,
            chunking_strategy=static(tokens, tokens // 2),  # type: ignore[arg-type]
        )
        done = a.vector_stores.files.poll(file_id, vector_store_id=store.id)
        outcomes.append((done.status, done.usage_bytes, done.last_error))
    written = on_disk(*index) - before
    charged = sum(usage for status, usage, _ in outcomes if status == "completed")
    assert written <= charged  # each index is charged at least what it took on disk
    assert len(BOOK.encode()) + charged <= SCALED_QUOTA  # and all of it within the quota
    refused = [error for status, _, error in outcomes if status == "failed"]
    assert refused and all(error is not None for error in refused)
    assert "max_storage_mb_per_key" in refused[0].message  # type: ignore[union-attr]


def test_an_upload_takes_at_most_its_number_of_chunkings(make_proxy: Callable[..., str]) -> None:
    base = make_proxy(vector_stores={**FAST, "max_chunkings_per_file": 2})
    client = sdk(base)
    file_id = upload(client, "long.txt", LONG)
    store = client.vector_stores.create(name="variants")
    statuses = []
    for tokens in (100, 200, 300, 100):
        client.vector_stores.files.create(
            vector_store_id=store.id,
            file_id=file_id,
            chunking_strategy=static(tokens, tokens // 2),  # type: ignore[arg-type]
        )
        done = client.vector_stores.files.poll(file_id, vector_store_id=store.id)
        statuses.append(done.status)
        if done.status == "failed":
            assert done.last_error is not None and done.last_error.code == "invalid_file"
            assert done.last_error.message == (
                "this upload is indexed with 2 chunking strategies already, as many as"
                " vector_stores.max_chunkings_per_file (2) allows: attach it with one of those,"
                " or delete it and upload it again"
            )
    # The third chunking is refused; one of the first two is still there to attach again.
    assert statuses == ["completed", "completed", "failed", "completed"]
