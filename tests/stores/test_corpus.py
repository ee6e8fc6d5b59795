"""A vector store made of real documents from the shared corpus (skipped when it is absent):
the fake embedder in the default run, the real MiniLM model in a slow test."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.callers import sdk
from tests.fakes.upstream import FakeUpstream
from tests.stores.support import FAST, corpus_bytes, upload, upload_topics, wait_until

CORPUS_FILES = {
    "pdf/tracemonkey.pdf": {"kind": "paper", "year": 2009},
    "text/readability-README.md": {"kind": "readme", "year": 2015},
    "html/ietf-remotestorage.html": {"kind": "spec", "year": 2014},
}
TRACES = "How does trace-based JIT compilation specialize types in dynamic languages?"


def corpus_store(base: str, corpus: Path) -> tuple[object, str, dict[str, str]]:
    """Several corpus files and the generated topic files in one store, indexed."""
    client = sdk(base)
    data = corpus_bytes(corpus, *CORPUS_FILES)
    ids = {name: upload(client, name, raw) for name, raw in data.items()}
    ids.update(upload_topics(client))
    attributes = {Path(path).name: fields for path, fields in CORPUS_FILES.items()}
    store = client.vector_stores.create(name="corpus")
    files = [
        {"file_id": fid, "attributes": attributes.get(name, {"kind": "note"})}
        for name, fid in ids.items()
    ]
    batch = client.vector_stores.file_batches.create_and_poll(
        vector_store_id=store.id,
        files=files,  # type: ignore[arg-type]
    )
    assert batch.file_counts.completed == len(ids), batch
    return client, store.id, ids


def test_a_store_of_corpus_documents(
    make_proxy: Callable[..., str], corpus_dir: Path, upstream: FakeUpstream
) -> None:
    client, store_id, ids = corpus_store(make_proxy(vector_stores=FAST), corpus_dir)
    stores = client.vector_stores  # type: ignore[attr-defined]
    assert stores.retrieve(store_id).file_counts.completed == 6

    hits = list(stores.search(store_id, query=TRACES))
    assert hits[0].filename == "tracemonkey.pdf"
    storage = "client-side applications in a web browser talk to a data storage server"
    remote = list(stores.search(store_id, query=storage))
    assert remote[0].filename == "ietf-remotestorage.html"
    readme = {"type": "eq", "key": "kind", "value": "readme"}
    only = list(stores.search(store_id, query=TRACES, filters=readme))
    assert {r.filename for r in only} <= {"readability-README.md"}
    recent = {"type": "gt", "key": "year", "value": 2010}
    assert "tracemonkey.pdf" not in {
        r.filename for r in stores.search(store_id, query=TRACES, filters=recent)
    }
    assert (
        list(stores.search(store_id, query=TRACES, ranking_options={"score_threshold": 0.99})) == []
    )

    response = client.responses.create(  # type: ignore[attr-defined]
        model="m",
        input=TRACES,
        tools=[
            {
                "type": "file_search",
                "vector_store_ids": [store_id],
                "max_num_results": 3,
                "filters": {"type": "eq", "key": "kind", "value": "paper"},
            }
        ],
        include=["file_search_call.results"],
    )
    search, message = response.output
    assert {r.filename for r in search.results} == {"tracemonkey.pdf"}
    notes = message.content[0].annotations
    assert notes and {n.file_id for n in notes} == {ids["tracemonkey.pdf"]}
    sent = upstream.last_to("/v1/chat/completions").json["messages"][-1]["content"]
    assert "Citation 1:" in str(sent)

    # Deleting the paper from the store: its passages are no longer found.
    stores.files.delete(ids["tracemonkey.pdf"], vector_store_id=store_id)
    assert "tracemonkey.pdf" not in {r.filename for r in stores.search(store_id, query=TRACES)}


@pytest.mark.slow
def test_a_corpus_store_with_the_real_embedding_model(
    make_proxy: Callable[..., str], corpus_dir: Path
) -> None:
    base = make_proxy(vector_stores=FAST, embeddings={"backend": "default"})
    client, store_id, _ids = corpus_store(base, corpus_dir)
    stores = client.vector_stores  # type: ignore[attr-defined]
    # Paraphrased questions, none of them in the documents' own words.
    for question, wanted in [
        (
            "Which paper compiles hot loops of a JavaScript interpreter to machine code?",
            "tracemonkey.pdf",
        ),
        (
            "How do I install the library that turns web pages into clean articles?",
            "readability-README.md",
        ),
        ("Who gave the cats their breakfast at the lighthouse?", "lighthouse.txt"),
    ]:
        hits = list(stores.search(store_id, query=question, max_num_results=3))
        assert hits[0].filename == wanted, (question, [h.filename for h in hits])
    wait_until(lambda: stores.retrieve(store_id).status == "completed")
