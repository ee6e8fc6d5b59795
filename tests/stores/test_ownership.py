"""Vector stores belong to the key that created them, as files do: two keys and an admin
through the real openai SDK."""

from __future__ import annotations

from collections.abc import Callable

import openai
import pytest

from tests.callers import KEY_A, KEY_ADMIN, KEY_B, KEYS, sdk
from tests.fakes.upstream import FakeUpstream
from tests.stores.support import FAST, upload_topics, wait_until

CATS = "What did the keeper feed the cats?"


def test_keys_cannot_see_each_others_stores(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(server={"api_keys": KEYS}, vector_stores=FAST)
    a, b, ops = sdk(base, KEY_A), sdk(base, KEY_B), sdk(base, KEY_ADMIN)
    ids = upload_topics(a)
    store = a.vector_stores.create(name="a's", file_ids=list(ids.values()))
    wait_until(lambda: a.vector_stores.retrieve(store.id).status == "completed")
    lighthouse = ids["lighthouse.txt"]

    assert list(b.vector_stores.list()) == []
    attempts = [
        lambda: b.vector_stores.retrieve(store.id),
        lambda: b.vector_stores.update(store.id, name="mine now"),
        lambda: b.vector_stores.delete(store.id),
        lambda: b.vector_stores.search(store.id, query=CATS),
        lambda: b.vector_stores.files.list(store.id),
        lambda: b.vector_stores.files.retrieve(lighthouse, vector_store_id=store.id),
        lambda: b.vector_stores.files.delete(lighthouse, vector_store_id=store.id),
        lambda: b.vector_stores.files.content(lighthouse, vector_store_id=store.id),
        lambda: b.vector_stores.file_batches.create(store.id, file_ids=[lighthouse]),
        lambda: b.responses.create(
            model="m",
            input=CATS,
            tools=[{"type": "file_search", "vector_store_ids": [store.id]}],
        ),
        lambda: b.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": CATS}],
            extra_body={"enrich": {"vector_store_ids": [store.id]}},
        ),
    ]
    for attempt in attempts:
        with pytest.raises(openai.NotFoundError) as caught:
            attempt()
        assert caught.value.body["code"] == "vector_store_not_found"  # type: ignore[index]
    # Nor can B put A's files into a store of its own.
    own = b.vector_stores.create(name="b's")
    with pytest.raises(openai.NotFoundError) as caught:
        b.vector_stores.files.create(vector_store_id=own.id, file_id=lighthouse)
    assert caught.value.body["code"] == "file_not_found"  # type: ignore[index]
    assert "sardines" not in str([r.body for r in upstream.requests])

    # A's store is untouched; the admin sees both and may search A's.
    assert a.vector_stores.retrieve(store.id).name == "a's"
    assert a.vector_stores.retrieve(store.id).file_counts.completed == 3
    assert {s.id for s in ops.vector_stores.list()} == {store.id, own.id}
    assert next(iter(ops.vector_stores.search(store.id, query=CATS))).file_id == lighthouse
    assert [s.id for s in a.vector_stores.list()] == [store.id]
