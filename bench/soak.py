"""A day of traffic, shortened to an hour: mixed requests on `python -m proxy --workers 2` in front
of the tests' fake upstream and embedding server, with a `chroma run` server (two workers need
one), reporting every minute what the proxy's processes hold and how it answered.

    python bench/soak.py                      # an hour
    python bench/soak.py --minutes 10         # the same, shorter
    python bench/soak.py --out DIR            # where the results go (test-artifacts/soak/)
    python bench/soak.py --trace              # and what each worker holds, a minute apart
    python bench/soak.py --trace-frames 8     # the same with tracemalloc (halves the traffic)

Traffic (the openai SDK, `--clients` at once, each pausing a little between requests): plain
and streamed chats; questions on new documents (corpus files made new by a line of their own)
and on old ones (the same corpus files again); uploads, questions on them by file id and
deletes (Files API); vector stores made from uploads, searched, and asked with `file_search`
through the Responses API; plain Responses. Every minute: the resident memory and open files of
all the proxy's processes (the parent, its two workers and their parse workers), p50/p99 latency
of plain chats, errors, streams that did not end properly. The corpus: `--corpus DIR`, else
bench/corpus.py's default (made-up documents without one).

Results: `soak.csv` (a row a minute), `soak.json` (the summary against the targets: RSS within
+10% of the end of warm-up, open files flat, no error, every stream complete), `soak.png` (the
plot; matplotlib: `pip install '.[bench]'`), `proxy.log`. Prints numbers; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import csv
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import openai
import psutil
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.corpus import add_corpus_option, find_corpus  # noqa: E402
from tests.engines import ChromaServer, chroma_binary, free_port, stop  # noqa: E402
from tests.fakes.embeddings import FakeEmbeddings  # noqa: E402
from tests.fakes.servers import ServerThread  # noqa: E402
from tests.fakes.upstream import FakeUpstream  # noqa: E402

# Corpus files asked about again and again (parsed once, then from the cache) ...
OLD = [
    "pdf/tracemonkey.pdf",
    "pdf/multicolumn.pdf",
    "pdf/small-table.pdf",
    "docx/blk-paras-and-tables.docx",
    "html/ietf-remotestorage.html",
    "epub/alice.epub",
]
# ... and text ones made new each time by a line of their own (parsed, indexed every time).
NEW = ["text/readability-README.md", "html/ietf-remotestorage.html", "text/tinyshakespeare.txt"]
NEW_BYTES = 60_000  # of each text file: a few dozen passages, retrieval in a 4k window
WARMUP_SHARE = 0.2  # of the run: caches fill, pools grow; the targets apply after it
KINDS = {  # weight of each request kind in the mix
    "plain chat": 30,
    "streamed chat": 14,
    "new document": 10,
    "old document": 10,
    "upload": 8,
    "question on an upload": 8,
    "vector store": 4,
    "file_search": 6,
    "store search": 4,
    "responses": 6,
}


@dataclass
class Minute:
    """What the clients saw in one minute."""

    requests: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    streams: int = 0
    incomplete: int = 0
    plain_s: list[float] = field(default_factory=list)


@dataclass
class Row:
    minute: int
    requests: int
    errors: int
    streams: int
    incomplete_streams: int
    plain_p50_ms: float
    plain_p99_ms: float
    rss_mb: float
    open_files: int
    processes: int
    parent_mb: float
    workers_mb: float
    parse_workers_mb: float


def percentile(samples: list[float], q: float) -> float:
    if not samples:
        return 0.0
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- documents ---------------------------------------------------------------------------------


def documents(
    corpus: Path | None,
) -> tuple[list[tuple[str, bytes]], list[tuple[str, bytes]]]:
    """(old, new) documents: corpus files, or made-up texts without the corpus."""
    if corpus is not None:
        old = [(Path(p).name, (corpus / p).read_bytes()) for p in OLD if (corpus / p).exists()]
        new = [(Path(p).name, (corpus / p).read_bytes()[:NEW_BYTES]) for p in NEW]
        return old, [(name, data) for name, data in new if data]
    print("no corpus: made-up documents instead", flush=True)
    made = [
        (f"notes-{n}.txt", "\n\n".join(f"Note {n}.{i}: item {i * n}." for i in range(400)).encode())
        for n in range(4)
    ]
    return made[:2], made[2:]


def file_part(name: str, data: bytes) -> dict[str, Any]:
    return {
        "type": "file",
        "file": {"filename": name, "file_data": base64.b64encode(data).decode()},
    }


def made_new(name: str, data: bytes) -> tuple[str, bytes]:
    """The document with a line of its own in front: new bytes, parsed and indexed anew."""
    return name, f"Copy {uuid.uuid4().hex}.\n\n".encode() + data


# -- the clients -------------------------------------------------------------------------------


@dataclass
class Client:
    """One client's SDK and what it holds: uploads to ask about, a vector store."""

    sdk: openai.AsyncOpenAI
    rng: random.Random
    uploads: list[tuple[str, str, int]] = field(default_factory=list)  # id, token, asked
    store: str | None = None
    store_files: list[str] = field(default_factory=list)
    store_ready: bool = False
    store_uses: int = 0


class Traffic:
    def __init__(self, base: str, clients: int, old: list[tuple[str, bytes]], new: Any) -> None:
        self.minute = Minute()
        self.old, self.new = old, new
        self.clients = [
            Client(
                openai.AsyncOpenAI(base_url=base + "/v1", api_key="-", max_retries=0, timeout=300),
                random.Random(n),
            )
            for n in range(clients)
        ]
        self.kinds_seen: Counter[str] = Counter()
        self.kinds = list(KINDS)
        self.weights = [KINDS[kind] for kind in self.kinds]

    async def run(self, until: float) -> None:
        await asyncio.gather(*(self._loop(client, until) for client in self.clients))
        for client in self.clients:
            await self._clean(client)
            await client.sdk.close()

    async def _loop(self, client: Client, until: float) -> None:
        while time.monotonic() < until:
            kind = client.rng.choices(self.kinds, self.weights)[0]
            try:
                await getattr(self, "_" + kind.replace(" ", "_").replace("-", "_"))(client)
                self.minute.requests[kind] += 1
            except Exception as error:
                self.minute.requests[kind] += 1
                self.minute.errors.append(f"{kind}: {type(error).__name__}: {error}"[:300])
            await asyncio.sleep(client.rng.uniform(0.0, 0.2))

    # each kind: raises on anything but a whole, right answer

    async def _chat(self, client: Client, content: Any, *, stream: bool) -> str:
        messages = [{"role": "user", "content": content}]
        if not stream:
            done = await client.sdk.chat.completions.create(model="m", messages=messages)
            return done.choices[0].message.content or ""
        self.minute.streams += 1
        chunks = await client.sdk.chat.completions.create(model="m", messages=messages, stream=True)
        text, finish = [], None
        async for chunk in chunks:
            for choice in chunk.choices:
                text.append(choice.delta.content or "")
                finish = choice.finish_reason or finish
        if finish != "stop":
            self.minute.incomplete += 1
            raise RuntimeError(f"stream ended without finish_reason stop ({finish})")
        return "".join(text)

    async def _plain_chat(self, client: Client) -> None:
        question = f"Plain question {client.rng.randint(0, 10**9)}?"
        started = time.perf_counter()
        answer = await self._chat(client, question, stream=False)
        self.minute.plain_s.append(time.perf_counter() - started)
        if answer != question:  # the fake upstream echoes the question
            raise RuntimeError(f"another answer: {answer[:80]!r}")

    async def _streamed_chat(self, client: Client) -> None:
        question = f"Streamed question {client.rng.randint(0, 10**9)}?"
        if await self._chat(client, question, stream=True) != question:
            raise RuntimeError("another answer")

    async def _new_document(self, client: Client) -> None:
        name, data = made_new(*client.rng.choice(self.new))
        content = [{"type": "text", "text": "What is this about?"}, file_part(name, data)]
        if not await self._chat(client, content, stream=client.rng.random() < 0.5):
            raise RuntimeError("an empty answer")

    async def _old_document(self, client: Client) -> None:
        name, data = client.rng.choice(self.old)
        content = [{"type": "text", "text": "Summarise it."}, file_part(name, data)]
        if not await self._chat(client, content, stream=client.rng.random() < 0.5):
            raise RuntimeError("an empty answer")

    async def _upload(self, client: Client) -> None:
        token = uuid.uuid4().hex
        data = f"The locker code of this upload is {token}.\n".encode() * 40
        created = await client.sdk.files.create(file=(f"{token}.txt", data), purpose="user_data")
        client.uploads.append((created.id, token, 0))
        while len(client.uploads) > 4:  # deleted after their questions: the store stays small
            file_id, _, _ = client.uploads.pop(0)
            await client.sdk.files.delete(file_id)

    async def _question_on_an_upload(self, client: Client) -> None:
        if not client.uploads:
            return await self._upload(client)
        index = client.rng.randrange(len(client.uploads))
        file_id, token, asked = client.uploads[index]
        part = {"type": "file", "file": {"file_id": file_id}}
        content = [{"type": "text", "text": "The locker code?"}, part]
        if token not in await self._chat(client, content, stream=client.rng.random() < 0.3):
            raise RuntimeError("the upload's text is not in the answer")
        client.uploads[index] = (file_id, token, asked + 1)
        return None

    async def _vector_store(self, client: Client) -> None:
        if client.store is not None and (client.store_uses < 12 or not client.store_ready):
            return await self._store_search(client)
        await self._clean(client)
        made = []
        for topic in ("harbour", "bakery"):
            token = uuid.uuid4().hex[:12]
            text = f"The {topic} keeper's name is {topic.title()}-{token}.\n" * 20
            created = await client.sdk.files.create(
                file=(f"{topic}.txt", text.encode()), purpose="assistants"
            )
            made.append(created.id)
        store = await client.sdk.vector_stores.create(name="soak", file_ids=made)
        client.store, client.store_files, client.store_ready, client.store_uses = (
            store.id,
            made,
            False,
            0,
        )
        return None

    async def _ready(self, client: Client) -> bool:
        if client.store is None:
            return False
        if not client.store_ready:
            found = await client.sdk.vector_stores.retrieve(client.store)
            if found.file_counts.failed:
                raise RuntimeError(f"a vector store file failed: {found.file_counts}")
            client.store_ready = found.status == "completed"
        return client.store_ready

    async def _file_search(self, client: Client) -> None:
        if not await self._ready(client):
            return await self._responses(client)
        assert client.store is not None
        client.store_uses += 1
        answer = await client.sdk.responses.create(
            model="m",
            input="What is the harbour keeper's name?",
            tools=[{"type": "file_search", "vector_store_ids": [client.store]}],
        )
        if "Harbour-" not in answer.output_text:
            raise RuntimeError("file_search found nothing")
        return None

    async def _store_search(self, client: Client) -> None:
        if not await self._ready(client):
            return await self._plain_chat(client)
        assert client.store is not None
        client.store_uses += 1
        found = await client.sdk.vector_stores.search(client.store, query="bakery keeper")
        if not found.data:
            raise RuntimeError("the store search found nothing")
        return None

    async def _responses(self, client: Client) -> None:
        question = f"Responses question {client.rng.randint(0, 10**9)}?"
        if client.rng.random() < 0.5:
            answer = await client.sdk.responses.create(model="m", input=question)
            if answer.output_text != question:
                raise RuntimeError("another answer")
            return
        self.minute.streams += 1
        events = await client.sdk.responses.create(model="m", input=question, stream=True)
        last = None
        async for event in events:
            last = event.type
        if last != "response.completed":
            self.minute.incomplete += 1
            raise RuntimeError(f"a Responses stream ended with {last}")

    async def _clean(self, client: Client) -> None:
        if client.store is not None:
            await client.sdk.vector_stores.delete(client.store)
            for file_id in client.store_files:
                await client.sdk.files.delete(file_id)
            client.store, client.store_files = None, []


# -- the proxy and what it holds ---------------------------------------------------------------


@dataclass
class Holdings:
    """What the proxy's processes hold now: RSS (MB) by level, open files, processes."""

    parent_mb: float = 0.0
    workers_mb: float = 0.0
    parse_workers_mb: float = 0.0
    open_files: int = 0
    processes: int = 0

    @property
    def rss_mb(self) -> float:
        return self.parent_mb + self.workers_mb + self.parse_workers_mb


def holdings(parent: psutil.Process) -> Holdings:
    """Summed over the parent, its workers and their parse workers (their children)."""
    found = Holdings()
    with contextlib.suppress(psutil.NoSuchProcess):
        workers = parent.children()
        levels = [("parent_mb", [parent]), ("workers_mb", workers)]
        parsers = [p for w in workers for p in _children(w)]
        for level, processes in [*levels, ("parse_workers_mb", parsers)]:
            for process in processes:
                with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                    mb = process.memory_info().rss / 2**20
                    setattr(found, level, getattr(found, level) + mb)
                    found.open_files += process.num_fds()
                    found.processes += 1
    return found


def _children(process: psutil.Process) -> list[psutil.Process]:
    try:
        return process.children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def wait_healthy(base: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 180
    while True:
        try:
            with urllib.request.urlopen(base + "/healthz", timeout=5):
                return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the proxy did not start:\n{log.read_text()[-3000:]}") from None
            time.sleep(0.5)


def config(work: Path, port: int, upstream: str, embeddings: str, chroma: int) -> dict[str, Any]:
    return {
        "server": {
            "port": port,
            "data_dir": str(work / "data"),
            "log_format": "json",
            "log_level": "warning",  # one access line a request would be most of the log
            "max_connections_per_client": 0,  # every client comes from 127.0.0.1
            "shutdown_grace_s": 5,
        },
        "upstream": {"base_url": upstream},
        "embeddings": {"backend": "openai", "base_url": embeddings, "model": "fake"},
        "vector_store": {"mode": "server", "host": "127.0.0.1", "port": chroma},
        "documents": {"parse_workers": 1},
    }


async def soak(
    args: argparse.Namespace, base: str, parent: psutil.Process, fakes: Any
) -> list[Row]:
    old, new = documents(args.corpus)
    traffic = Traffic(base, args.clients, old, new)
    rows: list[Row] = []
    out = args.out / "soak.csv"
    started = time.monotonic()
    until = started + args.minutes * 60
    running = asyncio.create_task(traffic.run(until))
    with open(out, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(Row.__dataclass_fields__))
        writer.writeheader()
        for minute in range(1, int(args.minutes) + 1):
            await asyncio.wait(
                [running], timeout=max(0.0, started + minute * 60 - time.monotonic())
            )
            seen, traffic.minute = traffic.minute, Minute()
            traffic.kinds_seen.update(seen.requests)
            fakes.forget()
            held = holdings(parent)
            ms = [s * 1000 for s in seen.plain_s]
            row = Row(
                minute,
                sum(seen.requests.values()),
                len(seen.errors),
                seen.streams,
                seen.incomplete,
                round(percentile(ms, 0.5), 2),
                round(percentile(ms, 0.99), 2),
                round(held.rss_mb, 1),
                held.open_files,
                held.processes,
                round(held.parent_mb, 1),
                round(held.workers_mb, 1),
                round(held.parse_workers_mb, 1),
            )
            rows.append(row)
            writer.writerow(asdict(row))
            handle.flush()
            print(
                f"minute {minute:3d}: {row.requests:5d} requests, {row.errors} errors,"
                f" {row.incomplete_streams}/{row.streams} streams incomplete; plain p50"
                f" {row.plain_p50_ms:.1f} ms p99 {row.plain_p99_ms:.1f} ms; RSS {row.rss_mb:.0f} MB"
                f" (parent {row.parent_mb:.0f}, workers {row.workers_mb:.0f}, parsers"
                f" {row.parse_workers_mb:.0f}) in {row.processes} processes,"
                f" {row.open_files} open files",
                flush=True,
            )
            for error in seen.errors[:5]:
                print(f"    {error}", flush=True)
    await running
    print(f"requests by kind: {dict(traffic.kinds_seen)}", flush=True)
    return rows


def summary(rows: list[Row], minutes: float, warmup: float | None) -> dict[str, Any]:
    share = round(minutes * WARMUP_SHARE) if warmup is None else round(warmup)
    warm = min(max(1, share), len(rows))
    after = rows[warm:] or rows[-1:]
    base_rss, base_fds = rows[warm - 1].rss_mb, rows[warm - 1].open_files
    growth = (max(r.rss_mb for r in after) / base_rss - 1) * 100 if base_rss else 0.0
    errors = sum(r.errors for r in rows)
    incomplete = sum(r.incomplete_streams for r in rows)
    found = {
        "minutes": len(rows),
        "warmup_minutes": warm,
        "requests": sum(r.requests for r in rows),
        "streams": sum(r.streams for r in rows),
        "rss_mb_after_warmup": base_rss,
        "rss_mb_max_after_warmup": max(r.rss_mb for r in after),
        "rss_growth_percent": round(growth, 1),
        "open_files_after_warmup": base_fds,
        "open_files_min_max_after": [
            min(r.open_files for r in after),
            max(r.open_files for r in after),
        ],
        "open_files_end": rows[-1].open_files,
        "errors": errors,
        "incomplete_streams": incomplete,
        "plain_p50_ms_median": percentile([r.plain_p50_ms for r in rows], 0.5),
        "plain_p99_ms_max": max(r.plain_p99_ms for r in rows),
    }
    found["targets"] = {
        "RSS within +10% after warm-up": growth <= 10,
        "open files flat": rows[-1].open_files <= base_fds + 8,
        "0 errors": errors == 0,
        "every stream complete": incomplete == 0,
    }
    return found


def plot(rows: list[Row], result: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no plot: matplotlib is not installed (pip install '.[bench]')")
        return False
    minutes = [r.minute for r in rows]
    figure, axes = plt.subplots(4, 1, figsize=(9, 10), sharex=True)
    axes[0].plot(minutes, [r.rss_mb for r in rows], label="RSS, all proxy processes")
    axes[0].plot(minutes, [r.workers_mb for r in rows], label="its two workers", lw=0.8)
    axes[0].plot(minutes, [r.parse_workers_mb for r in rows], label="their parse workers", lw=0.8)
    limit = result["rss_mb_after_warmup"] * 1.1
    axes[0].axhline(limit, color="grey", linestyle="--", label="+10% of the end of warm-up")
    axes[0].set_ylabel("MB")
    axes[1].plot(minutes, [r.open_files for r in rows], label="open files")
    axes[1].set_ylabel("files")
    axes[1].set_ylim(bottom=0)
    axes[2].plot(minutes, [r.plain_p50_ms for r in rows], label="plain chat p50")
    axes[2].plot(minutes, [r.plain_p99_ms for r in rows], label="plain chat p99")
    axes[2].set_ylabel("ms")
    axes[3].bar(minutes, [r.errors for r in rows], label="errors")
    axes[3].plot(minutes, [r.incomplete_streams for r in rows], "r.", label="incomplete streams")
    axes[3].set_ylabel("per minute")
    axes[3].set_ylim(bottom=0, top=max(5, *(r.errors for r in rows)))
    axes[3].set_xlabel("minute")
    for axis in axes:
        axis.axvspan(0.5, result["warmup_minutes"] + 0.5, color="0.92")
        axis.legend(loc="upper left", fontsize="small")
    figure.suptitle(
        f"bench/soak.py: {result['requests']} requests in {len(rows)} minutes, 2 workers"
        " (shaded: warm-up)"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    return True


def trace_summary(folder: Path) -> list[str]:
    """Each worker's first and last line of --trace: what grew, and the caches that filled."""
    said = []
    for path in sorted(folder.glob("worker-*.jsonl")):
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if len(lines) < 2:
            continue
        first, last = lines[0], lines[-1]
        figures = ["rss_mb", "in_use_mb", "free_in_arenas_mb", "mmapped_mb", "python_blocks"]
        grew = ", ".join(f"{name} {first.get(name)} → {last.get(name)}" for name in figures)
        said.append(f"{path.stem}, minute {first['minute']} → {last['minute']}: {grew}")
        for name, (filled, bound) in last["caches"].items():
            before = first["caches"].get(name, [0, bound])[0]
            if filled != before:
                said.append(f"    {name}: {before:,} → {filled:,} of {bound:,}")
        said.append(f"    object types grown most: {last.get('types_grown', {})}")
    return said


class Fakes:
    """The fake upstream (echoing) and embedding server, in this process."""

    def __init__(self) -> None:
        self.thread = ServerThread()
        self.upstream = FakeUpstream(chat_mode="echo")
        self.embeddings = FakeEmbeddings()
        self.upstream_url = self.thread.serve(self.upstream.app())
        self.embeddings_url = self.thread.serve(self.embeddings.app()) + "/v1"

    def forget(self) -> None:
        """Drop what the fakes recorded: an hour of it would be this process's memory."""
        self.upstream.requests.clear()
        self.embeddings.inputs.clear()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument(
        "--warmup-minutes", type=float, help="before the targets apply (default: a fifth)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "test-artifacts" / "soak")
    add_corpus_option(parser)
    parser.add_argument(
        "--trace",
        action="store_true",
        help="each worker writes its heap, caches and grown object types to OUT/trace/ a minute",
    )
    parser.add_argument(
        "--trace-frames", type=int, default=0, help="--trace with tracemalloc, N frames deep"
    )
    args = parser.parse_args()
    args.corpus = find_corpus(args.corpus, required=False)
    if chroma_binary() is None:
        raise SystemExit("two workers need a Chroma server: the chroma CLI is not installed")
    args.out.mkdir(parents=True, exist_ok=True)
    print(
        f"soak: {args.minutes:g} minutes, {args.clients} clients, 2 workers;"
        f" {platform.processor() or platform.machine()}, {os.cpu_count()} cores,"
        f" load average {os.getloadavg()[0]:.1f}; results in {args.out}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="soak-") as temp:
        work = Path(temp)
        chroma = ChromaServer.start(work / "chroma")
        fakes = Fakes()
        port = free_port()
        settings = config(work, port, fakes.upstream_url, fakes.embeddings_url, chroma.port)
        (work / "proxy.yaml").write_text(yaml.safe_dump(settings))
        log = args.out / "proxy.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if args.trace or args.trace_frames:  # bench/memtrace/sitecustomize.py, in the parent
            (args.out / "trace").mkdir(exist_ok=True)
            env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "bench" / "memtrace"), str(ROOT)])
            env["SOAK_TRACE_DIR"] = str(args.out / "trace")
            env["SOAK_TRACE_FRAMES"] = str(args.trace_frames)
        # The real command, two workers sharing the port.
        command = [sys.executable, "-m", "proxy", "--config", str(work / "proxy.yaml")]
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [*command, "--workers", "2"],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )
        base = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(base, process, log)
            rows = asyncio.run(soak(args, base, psutil.Process(process.pid), fakes))
        finally:
            stop(process, grace_s=15)
            fakes.thread.close()
            chroma.stop()
    result = summary(rows, args.minutes, args.warmup_minutes)
    result["load_average_end"] = round(os.getloadavg()[0], 2)
    (args.out / "soak.json").write_text(json.dumps(result, indent=2))
    plotted = plot(rows, result, args.out / "soak.png")
    print(json.dumps(result, indent=2))
    if args.trace or args.trace_frames:
        print("\n".join(trace_summary(args.out / "trace")))
    print(f"written: {args.out / 'soak.csv'}, {args.out / 'soak.json'}", end="")
    print(f", {args.out / 'soak.png'}" if plotted else "")


if __name__ == "__main__":
    main()
