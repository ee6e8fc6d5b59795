"""The vector stores API through the official openai SDK, in front of the fake embedder."""

from __future__ import annotations

from collections.abc import Callable

import openai
import pytest

from tests.stores.support import FAST, TOPICS, sdk, upload, upload_topics


@pytest.fixture
def base(make_proxy: Callable[..., str]) -> str:
    return make_proxy(vector_stores=FAST, retrieval={"chunk_tokens": 40, "chunk_overlap": 0})


def test_create_and_poll_then_search(base: str) -> None:
    client = sdk(base)
    ids = upload_topics(client)
    store = client.vector_stores.create(name="topics", metadata={"team": "a"})
    assert store.status == "completed" and store.file_counts.total == 0
    batch = client.vector_stores.file_batches.create_and_poll(
        vector_store_id=store.id, file_ids=list(ids.values())
    )
    assert batch.status == "completed"
    assert batch.file_counts.completed == 3
    store = client.vector_stores.retrieve(store.id)
    assert store.status == "completed"
    assert store.file_counts.completed == 3
    assert store.usage_bytes > 0
    assert store.name == "topics" and store.metadata == {"team": "a"}

    page = client.vector_stores.search(store.id, query="What did the keeper feed the cats?")
    results = list(page)
    assert results[0].filename == "lighthouse.txt"
    assert results[0].file_id == ids["lighthouse.txt"]
    assert "sardines" in results[0].content[0].text
    assert 0 < results[0].score <= 1
