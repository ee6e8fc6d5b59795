"""The pure parts of vector stores: states, expiry, pagination, validation, index keys,
the ranking across files."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.errors import BadRequest
from proxy.retrieval.chunking import Chunk
from proxy.retrieval.scored import Scored
from proxy.stores import params
from proxy.stores.chunking import index_key
from proxy.stores.pagination import PageRequest, page_request, paginate
from proxy.stores.records import (
    DAY_S,
    BatchRecord,
    ExpiresAfter,
    FileRecord,
    StoreRecord,
    batch_status,
    file_counts,
    store_status,
)
from proxy.stores.search import best_hits, by_file

NOW = 1_700_000_000.0


def store(**fields: Any) -> StoreRecord:
    return StoreRecord(**{"id": "vs_" + "a" * 24, "owner": "me", "created": NOW, **fields})


def record(file_id: str, status: str = "completed", **fields: Any) -> FileRecord:
    return FileRecord(
        **{"id": file_id, "store_id": "vs_" + "a" * 24, "created": NOW, "status": status, **fields}
    )


def test_a_store_is_in_progress_while_a_file_is_and_expires_after_its_last_use() -> None:
    files = [record("file-1"), record("file-2", "in_progress"), record("file-3", "failed")]
    assert store_status(store(), files, NOW) == "in_progress"
    assert store_status(store(), files[::2], NOW) == "completed"
    assert file_counts(files) == {
        "in_progress": 1,
        "completed": 1,
        "failed": 1,
        "cancelled": 0,
        "total": 3,
    }
    ageing = store(expires_after=ExpiresAfter(days=2), last_active_at=int(NOW))
    assert ageing.expires_at() == int(NOW) + 2 * DAY_S
    assert store_status(ageing, files, NOW + 2 * DAY_S - 1) == "in_progress"
    assert store_status(ageing, files, NOW + 2 * DAY_S) == "expired"
    assert store().expires_at() is None and not store().expired(NOW + 1000 * DAY_S)


def test_batch_states() -> None:
    batch = BatchRecord(id="vsfb_" + "b" * 24, store_id="vs_x", created=NOW, file_ids=["f"])
    assert batch_status(batch, [record("f", "in_progress")]) == "in_progress"
    assert batch_status(batch, [record("f"), record("g", "failed")]) == "completed"
    assert batch_status(batch, [record("f", "failed")]) == "failed"
    cancelled = batch.model_copy(update={"cancelled": True})
    assert batch_status(cancelled, [record("f", "cancelled")]) == "cancelled"


def test_a_claim_holds_until_it_runs_out() -> None:
    held = record("f", "in_progress", runner="other", runner_until=NOW + 10)
    assert not held.claimable("me", NOW)
    assert held.claimable("other", NOW)
    assert held.claimable("me", NOW + 10)
    assert record("f", "in_progress").claimable("me", NOW)
    assert not record("f", "completed").claimable("me", NOW)


def test_pagination_by_creation_with_cursors() -> None:
    items = [(float(n), f"id-{n}") for n in range(5)]
    key = lambda item: item  # noqa: E731

    def ids(request: PageRequest) -> tuple[list[str], bool]:
        page, more = paginate(items, request, key)
        return [item[1] for item in page], more

    assert ids(PageRequest(limit=2)) == (["id-4", "id-3"], True)
    assert ids(PageRequest(limit=2, after="id-3")) == (["id-2", "id-1"], True)
    assert ids(PageRequest(limit=2, after="id-1")) == (["id-0"], False)
    assert ids(PageRequest(limit=2, order="asc", after="id-1")) == (["id-2", "id-3"], True)
    assert ids(PageRequest(limit=2, before="id-1")) == (["id-3", "id-2"], True)
    assert ids(PageRequest(after="nobody")) == ([], False)
    assert page_request({"limit": "7", "order": "asc"}) == PageRequest(7, "asc")
    for bad in ({"limit": "0"}, {"limit": "101"}, {"limit": "x"}, {"order": "up"}):
        with pytest.raises(BadRequest):
            page_request(bad)


def test_attributes_and_metadata_as_openai_limits_them() -> None:
    assert params.attributes({"a": "x", "b": 1, "c": 2.5, "d": True}) == {
        "a": "x",
        "b": 1,
        "c": 2.5,
        "d": True,
    }
    for bad in (
        {f"k{n}": n for n in range(17)},
        {"k" * 65: 1},
        {"a": "x" * 513},
        {"a": [1]},
        {"a": None},
        {"a": float("nan")},
    ):
        with pytest.raises(BadRequest):
            params.attributes(bad)
    assert params.metadata({"team": "a"}) == {"team": "a"}
    with pytest.raises(BadRequest) as caught:
        params.metadata({"n": 1})
    assert caught.value.param == "metadata.n"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"chunking_strategy": {"type": "static"}}, "chunking_strategy"),
        (
            {
                "chunking_strategy": {
                    "type": "static",
                    "static": {"max_chunk_size_tokens": 99, "chunk_overlap_tokens": 0},
                }
            },
            "chunking_strategy.static.max_chunk_size_tokens",
        ),
        (
            {
                "chunking_strategy": {
                    "type": "static",
                    "static": {"max_chunk_size_tokens": 400, "chunk_overlap_tokens": 201},
                }
            },
            "chunking_strategy.static",
        ),
        ({"expires_after": {"anchor": "created_at", "days": 1}}, "expires_after.anchor"),
        ({"expires_after": {"anchor": "last_active_at", "days": 0}}, "expires_after.days"),
        ({"name": 5}, "name"),
        ({"colour": "blue"}, "colour"),
        ({"file_ids": ["f"] * 2001}, "file_ids"),
    ],
)
def test_store_bodies_are_validated(body: dict[str, Any], param: str) -> None:
    with pytest.raises(BadRequest) as caught:
        params.validated(params.CreateStore, body)
    assert caught.value.param == param


def test_static_sizes_are_their_own_index_key() -> None:
    sha = "ab" * 32
    assert index_key(sha, (250, 30), (250, 30)) == sha
    other = index_key(sha, (400, 100), (250, 30))
    assert other != sha and len(other) == 64
    assert index_key(sha, (400, 100), (250, 30)) == other
    assert index_key(sha, (400, 50), (250, 30)) != other


def _scored(index: int, dense: float, rerank: float | None = None) -> Scored:
    chunk = Chunk("s", "f.txt", index, f"passage {index}", 1, 1)
    return Scored(chunk, dense, rerank=rerank)


def test_one_ranking_across_files() -> None:
    a, b = record("file-a", filename="a.txt"), record("file-b", filename="b.txt")
    found = [
        (a, _scored(0, 0.3)),
        (a, _scored(1, 0.9)),
        (b, _scored(0, 0.7)),
        (b, _scored(0, 0.8)),  # the same passage found by a second query: its best score
        (b, _scored(1, 0.1)),
    ]
    hits = best_hits(found, threshold=0.2, limit=3)
    assert [(h.file.id, h.chunk.index, h.score) for h in hits] == [
        ("file-a", 1, 0.9),
        ("file-b", 0, 0.8),
        ("file-a", 0, 0.3),
    ]
    assert [(f.id, [s.chunk.index for s in hits]) for f, hits in by_file(hits)] == [
        ("file-a", [1, 0]),
        ("file-b", [0]),
    ]
    # With a reranker, its score ranks and is held to the threshold.
    reranked = best_hits([(a, _scored(0, 0.9, rerank=0.1)), (b, _scored(0, 0.2, 0.6))], 0.3, 5)
    assert [h.file.id for h in reranked] == ["file-b"]
    assert best_hits(found, threshold=0.95, limit=3) == []
