"""The Chroma server restarted in the middle of indexing a document: questions meanwhile are
answered from the document's words, indexing resumes by itself once the server is back, and
every passage ends up stored once, embedded once. A real `chroma run`; e2e (CI runs it)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import chromadb
import openai
import pytest
from chromadb.config import Settings as ChromaSettings

from proxy.retrieval.chunking import Chunk
from tests.engines import ChromaServer, chroma_binary
from tests.faults.conftest import HANG_GUARD_S, Bench, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PAUSE_S = float(os.environ.get("FAULT_PAUSE_S", "5"))
"""How long the server stays down (the issue's 30 s behaves the same: `FAULT_PAUSE_S=30`); the
background waits 1, 2, 4 ... 30 s between attempts, so a longer pause only waits longer."""
CARGO = ["tea", "salt", "iron", "wool"]


def ledger(tag: str, days: int = 1500) -> bytes:
    """A plain-text ledger of `days` distinct paragraphs: about 50 passages."""
    return "\n\n".join(
        f"Section {n} ({tag}). The harbour ledger for day {n} lists ship {n * 7} arriving with "
        f"{n * 3} crates of {CARGO[n % 4]} and a crew of {n % 40}."
        for n in range(days)
    ).encode()


def ask(name: str, data: bytes, question: str) -> list[dict[str, Any]]:
    encoded = base64.b64encode(data).decode()
    part = {"type": "file", "file": {"filename": name, "file_data": encoded}}
    return [{"role": "user", "content": [{"type": "text", "text": question}, part]}]


def passages_of(data_dir: Path, sha256: str) -> list[Chunk]:
    (found,) = (data_dir / "passages" / sha256).glob("*/chunks.json")
    return [Chunk(**row) for row in json.loads(found.read_text())]


def test_chroma_restarted_in_the_middle_of_indexing(bench: Bench, tmp_path: Path) -> None:
    if chroma_binary() is None:
        pytest.skip("the chroma CLI is not installed (pip install chromadb)")
    chroma = ChromaServer.start(tmp_path / "chroma")
    try:
        restarted_mid_indexing(bench, chroma)
    finally:
        chroma.stop()


def restarted_mid_indexing(bench: Bench, chroma: ChromaServer) -> None:
    base = bench.start(vector_store={"mode": "server", "host": "127.0.0.1", "port": chroma.port})
    client = openai.OpenAI(base_url=base + "/v1", api_key="-", max_retries=0, timeout=HANG_GUARD_S)
    store = chromadb.HttpClient(
        host="127.0.0.1", port=chroma.port, settings=ChromaSettings(anonymized_telemetry=False)
    )
    data = ledger("first")
    sha256 = hashlib.sha256(data).hexdigest()

    def stored() -> set[str]:
        collection = store.get_collection("openai-fake")
        return set(collection.get(where={"sha256": sha256}, include=[])["ids"])

    def complete() -> bool:
        manifest = store.get_collection("openai-fake.manifest")
        return bool(manifest.get(ids=[sha256], include=[])["ids"])

    # The first question is answered at once; the rest of the document is indexed behind it,
    # one batch of four passages per embedding request.
    bench.embeddings.delay_s = 0.1
    first = client.chat.completions.with_raw_response.create(
        model="m", messages=ask("ledger.txt", data, "Which ship came on day 1200?")
    )
    assert first.headers["X-Enrich-Strategy"] == "retrieval"
    wait_until(lambda: len(stored()) >= 8, "background indexing under way")
    bench.embeddings.paused.set()  # the next batch waits in the embedding server ...
    time.sleep(0.5)  # (one already on its way lands)
    before = stored()
    total = len(passages_of(bench.data_dir, sha256))
    assert len(before) < total and not complete(), "indexing finished before the fault"
    chroma.stop()
    bench.embeddings.paused.clear()  # ... and comes back once the server is down: not stored

    # Meanwhile: questions are answered from the words, this document's and a new one's.
    for day in (1200, 77):
        answer = client.chat.completions.create(
            model="m", messages=ask("ledger.txt", data, f"Which ship came on day {day}?")
        )
        assert f"day {day} lists ship {day * 7} " in (answer.choices[0].message.content or "")
        retrieval = bench.last_decision()["retrieval"]
        assert retrieval["ranked_by_words"] == ["ledger.txt"]
        assert "Chroma server" in retrieval["store_down"]["ledger.txt"]
    other = ledger("second", days=300)
    answer = client.chat.completions.create(
        model="m", messages=ask("other.txt", other, "Which ship came on day 250?")
    )
    assert "day 250 lists ship 1750 " in (answer.choices[0].message.content or "")
    assert bench.last_decision()["retrieval"]["ranked_by_words"] == ["other.txt"]

    # A vector store's file added meanwhile waits for the server (in progress, not failed).
    upload = client.files.create(
        file=("harbour.txt", b"The harbour master is called Ada."), purpose="assistants"
    )
    vector_store = client.vector_stores.create(name="harbour", file_ids=[upload.id])
    time.sleep(PAUSE_S)
    assert client.vector_stores.retrieve(vector_store.id).file_counts.failed == 0
    chroma.restart()
    # Nobody asks anything: the background resumes by itself and finishes the document.
    wait_until(complete, "indexing resumed and finished")
    ids = stored()
    passages = passages_of(bench.data_dir, sha256)
    assert ids == {f"{sha256}:{i}" for i in range(len(passages))}, "a passage is missing"
    embedded = Counter(text for batch in bench.embeddings.inputs for text in batch)
    twice = [p.index for p in passages if embedded[p.embedded] > 1]
    never = [p.index for p in passages if embedded[p.embedded] == 0]
    print(
        f"\nchroma down for {PAUSE_S:g} s mid-indexing: {len(before)} of {len(passages)} passages"
        f" stored before, all {len(ids)} after; embedded twice: {twice}, never: {never}"
    )
    assert twice == [] and never == []
    wait_until(
        lambda: client.vector_stores.retrieve(vector_store.id).status == "completed",
        "the vector store's file indexed",
    )
    found = client.vector_stores.search(vector_store.id, query="Who is the harbour master?")
    assert found.data and "Ada" in found.data[0].content[0].text
    # And by meaning again.
    client.chat.completions.create(
        model="m", messages=ask("ledger.txt", data, "Which ship came on day 1200?")
    )
    retrieval = bench.last_decision()["retrieval"]
    assert retrieval["ranked_by_words"] == [] and retrieval["store_down"] == {}
    assert retrieval["indexed"] == {"ledger.txt": 100}
