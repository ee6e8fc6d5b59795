"""The data folder's disk full (a small tmpfs mounted by the test; root only): uploads get a
clear 507, questions are still answered (documents by their words while the index cannot grow),
no cache, passage or index entry is left torn, and once space returns everything recovers by
itself: the index completes, the same documents answer correctly, uploads are saved again."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from proxy.documents.cache import decode_entry
from tests.faults.conftest import HANG_GUARD_S, Bench, wait_until

pytestmark = pytest.mark.slow

DISK_MB = 160
RESERVE_MB = 64  # server.min_free_disk_mb's default
OPENAI_ERROR = {"message", "type", "param", "code"}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of DISK_MB mounted for the test."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path, leave_bytes: int) -> Path:
    """Take the disk's space but `leave_bytes` (a file of zeros, written until refused)."""
    filler = disk / f"filler-{len(list(disk.glob('filler-*')))}"
    found = os.statvfs(disk)
    want = max(0, found.f_bavail * found.f_frsize - leave_bytes)
    block = b"\0" * (1 << 20)
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with contextlib.suppress(OSError):  # full: what was asked is taken
            while want > 0:
                want -= os.write(fd, block[: min(want, len(block))])
    finally:
        os.close(fd)
    return filler


def part(name: str, data: bytes) -> dict[str, Any]:
    return {
        "type": "file",
        "file": {"filename": name, "file_data": base64.b64encode(data).decode()},
    }


def ask(
    client: openai.OpenAI,
    question: str,
    *parts: dict[str, Any],
    stream: bool = False,
    strategy: str | None = None,
) -> str:
    messages = [{"role": "user", "content": [{"type": "text", "text": question}, *parts]}]
    extra = {"enrich": {"strategy": strategy}} if strategy else None
    if stream:
        chunks = client.chat.completions.create(
            model="m", messages=messages, stream=True, extra_body=extra
        )
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    done = client.chat.completions.create(model="m", messages=messages, extra_body=extra)
    return done.choices[0].message.content or ""


def ledger(days: int = 2000) -> bytes:
    return "\n\n".join(
        f"Entry {n}. On day {n} the lighthouse at cape {n % 17} burned {n * 3} litres of oil."
        for n in range(days)
    ).encode()


def insufficient_storage(refused: openai.APIStatusError, data_dir: Path) -> None:
    assert refused.status_code == 507
    body = refused.body
    assert isinstance(body, dict) and set(body) == OPENAI_ERROR, body
    assert body["code"] == "insufficient_storage" and body["type"] == "server_error"
    assert "out of space" in body["message"] and "free space" in body["message"]
    assert str(data_dir) not in body["message"]


def test_the_data_folders_disk_full(bench: Bench, small_disk: Path) -> None:
    bench.data_dir = small_disk / "data"
    # Every candidate counts (the fake embedder's cosines are low): what is asked is cited.
    base = bench.start(retrieval={"affinity_threshold": 0.0})
    client = openai.OpenAI(base_url=base + "/v1", api_key="-", max_retries=0, timeout=HANG_GUARD_S)
    kept = client.files.create(file=("kept.txt", b"The keeper is Ada."), purpose="assistants")
    assert "Ada" in ask(client, "Who keeps it?", {"type": "file", "file": {"file_id": kept.id}})

    # Under the room kept free (but not quite full): what would have to be written is refused
    # or left out, and questions are answered.
    fillers = [fill(small_disk, 20 * 1024 * 1024)]
    with pytest.raises(openai.APIStatusError) as refused:
        client.files.create(file=("new.txt", b"x" * 100_000), purpose="user_data")
    insufficient_storage(refused.value, bench.data_dir)
    note = b"The harbour note says the tide turns at 4 pm."
    assert "tide turns at 4 pm" in ask(client, "When?", part("note.txt", note))
    # A short document is indexed whole before its first answer: it cannot be, so its words
    # rank it; a long one is answered from its first candidates while its index waits.
    tides = b"\n\n".join(b"Tide table %d: high water at %d am." % (n, n % 12) for n in range(30))
    answer = ask(client, "Tide table 17?", part("tides.txt", tides), strategy="retrieval")
    assert "Tide table 17: high water at 5 am." in answer
    retrieval = bench.last_decision()["retrieval"]
    assert retrieval["ranked_by_words"] == ["tides.txt"]
    assert "out of space" in retrieval["store_down"]["tides.txt"]
    big = ledger()
    answer = ask(client, "How much oil on day 1234?", part("ledger.txt", big))
    assert "On day 1234 the lighthouse at cape 10 burned 3702 litres" in answer
    retrieval = bench.last_decision()["retrieval"]
    # Embedded whole or in part while it waited, its index could not be stored: its words ranked
    # it, and the background stores it once there is room.
    assert "out of space" in retrieval["store_down"]["ledger.txt"]
    # A vector store made now waits for room to index its file (in progress, not failed).
    store = client.vector_stores.create(name="keepers", file_ids=[kept.id])

    # Truly full: even the small records fail, with the same 507, never a 500.
    fillers.append(fill(small_disk, 0))
    with pytest.raises(openai.APIStatusError) as refused:
        client.vector_stores.create(name="more")
    insufficient_storage(refused.value, bench.data_dir)
    with pytest.raises(openai.APIStatusError) as refused:
        client.files.create(file=("new.txt", b"x" * 100_000), purpose="user_data")
    insufficient_storage(refused.value, bench.data_dir)
    streamed = ask(client, "When?", part("other.txt", b"The ferry leaves at noon."), stream=True)
    assert "ferry leaves at noon" in streamed
    assert client.vector_stores.retrieve(store.id).file_counts.failed == 0

    # Space returns: nothing torn was left, and everything recovers by itself.
    for filler in fillers:
        filler.unlink()
    torn = [
        p.name
        for p in bench.data_dir.rglob("*")
        if p.name.startswith((".tmp-", ".upload-")) or p.name.endswith(".partial")
    ]
    assert torn == []
    for entry in (bench.data_dir / "parsed").glob("*/*.json"):
        sha256, kind, _ = entry.name.split(".")
        decode_entry(entry.read_bytes(), sha256, kind)  # raises on a torn entry
    wait_until(
        lambda: client.vector_stores.retrieve(store.id).status == "completed",
        "the vector store's file indexed once there is room",
    )
    assert "Ada" in client.vector_stores.search(store.id, query="keeper").data[0].content[0].text
    sha256 = hashlib.sha256(big).hexdigest()
    assert bench.services is not None
    wait_until(lambda: indexed(bench, sha256), "the ledger's index completed by itself")
    answer = ask(client, "How much oil on day 1234?", part("ledger.txt", big))
    assert "On day 1234 the lighthouse at cape 10 burned 3702 litres" in answer
    retrieval = bench.last_decision()["retrieval"]
    assert retrieval["store_down"] == {} and retrieval["ranked_by_words"] == []
    assert retrieval["indexed"] == {"ledger.txt": 100}
    assert "tide turns at 4 pm" in ask(client, "When?", part("note.txt", note))
    saved = client.files.create(file=("new.txt", b"saved at last"), purpose="user_data")
    assert client.files.content(saved.id).read() == b"saved at last"


def indexed(bench: Bench, sha256: str) -> bool:
    """Whether the proxy's index holds the document whole: every passage, and its record."""
    services = bench.services
    assert services is not None

    async def look() -> bool:
        retriever = await services.retriever()
        document = services.parser.cache.get(sha256, "text")
        assert document is not None
        passages = await retriever.passages(document)
        index, settings = retriever.index, retriever.settings
        stored = await index.stored_indexes(sha256, settings)
        complete = await index.is_indexed(sha256, settings)
        return complete and stored == set(range(len(passages.chunks)))

    return bench.servers.call(look())


def test_under_the_room_kept_free_without_a_small_disk(bench: Bench) -> None:
    """The same refusals on any machine: a reserve larger than the disk's free space."""
    base = bench.start(server={"min_free_disk_mb": 1e12}, retrieval={"affinity_threshold": 0.0})
    client = openai.OpenAI(base_url=base + "/v1", api_key="-", max_retries=0, timeout=HANG_GUARD_S)
    with pytest.raises(openai.APIStatusError) as refused:
        client.files.create(file=("new.txt", b"x" * 1000), purpose="user_data")
    insufficient_storage(refused.value, bench.data_dir)
    tides = b"\n\n".join(b"Tide table %d: high water at %d am." % (n, n % 12) for n in range(30))
    answer = ask(client, "Tide table 17?", part("tides.txt", tides), strategy="retrieval")
    assert "Tide table 17: high water at 5 am." in answer
    assert bench.last_decision()["retrieval"]["ranked_by_words"] == ["tides.txt"]
    assert not list((bench.data_dir / "parsed").glob("*/*.json"))  # no cache entry written
