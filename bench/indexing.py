"""Indexing speed: MiniLM as today (fp32, today's batches) against the new build, in one run.

    python bench/indexing.py                        # both books, today and new, interleaved
    python bench/indexing.py --today-root ../main   # "today" runs that checkout's own code
    python bench/indexing.py --pages 40 --rounds 2  # the first 40 pages of each book, twice
    python bench/indexing.py --one new --book moby-dick.epub   # one whole-process run
    python bench/indexing.py --sweep                # passages/s against batch size and threads
    python bench/indexing.py --agreement            # int8 against fp32: cosines and rankings

Each run indexes a book the way the proxy does in the background (`Retriever.index_document`:
batches at the background's pace, upserted into an embedded Chroma store in a fresh directory),
in a process of its own, after the model is loaded; it reports passages/s, wall and CPU
seconds. "today" is fp32 with 64-passage model runs in 4-passage background rounds (this
checkout's code with those settings, or another checkout's code with its own defaults);
"new" is this checkout's defaults (int8 on a CPU with VNNI). Runs alternate (today, new, new,
today, ...) so that a machine getting busier or quieter favours neither. Prints numbers only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
CORPUS = ROOT.parent / "shared" / "corpus"
BOOKS = {"moby-dick.epub": "epub/moby-dick.epub", "freeculture.pdf": "pdf/freeculture.pdf"}
TODAY = {"precision": "fp32", "run": 64, "round": 4}
"""Today's settings: fp32, `embeddings.batch_size` 64, `BACKGROUND_BATCH` 4."""


# -- one indexing run, in its own process ---------------------------------------------


async def index_once(spec: dict[str, Any]) -> dict[str, Any]:
    """Index one book with the code under `spec["root"]` and the given settings."""
    sys.path.insert(0, spec["root"])
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(Path.home() / ".cache" / "tiktoken"))
    from proxy.documents import DocumentParser
    from proxy.documents.model import ParsedDocument
    from proxy.retrieval.embeddings import DefaultEmbedder
    from proxy.retrieval.index import VectorIndex
    from proxy.retrieval.retriever import Retriever

    settings: dict[str, Any] = {}
    if spec.get("precision"):
        settings["precision"] = spec["precision"]
    if spec.get("run"):
        settings["batch_size"] = spec["run"]
    embedder = DefaultEmbedder(**settings)
    path = CORPUS / BOOKS[spec["book"]]
    with tempfile.TemporaryDirectory() as directory:
        parser = DocumentParser(Path(directory) / "parsed", workers=1)
        try:
            document: ParsedDocument = await parser.parse(path.name, path.read_bytes())
        finally:
            await parser.close()
        if spec.get("pages"):
            pages = document.pages[: spec["pages"]]
            document = ParsedDocument(
                document.name, document.sha256, document.kind, document.library, pages
            )
        retriever = Retriever(
            index=VectorIndex.embedded(Path(directory) / "chroma", embedder),
            embedder=embedder,
            chunk_tokens=250,
            chunk_overlap=30,
            count_tokens=embedder.count_tokens,
        )
        if spec.get("round"):
            retriever.indexer.batch = spec["round"]
        try:
            passages = await retriever.passages(document)
            await embedder.embed_query("the model is loaded before the clock starts")
            await retriever.index.is_indexed("0" * 64)  # so is the store
            cpu, started = time.process_time(), time.perf_counter()
            indexed = await retriever.index_document(document)
            seconds = time.perf_counter() - started
            cpu = time.process_time() - cpu
        finally:
            await retriever.close()
    count = len(passages.chunks)
    return {
        "book": spec["book"],
        "passages": count,
        "indexed": indexed,
        "seconds": seconds,
        "cpu": cpu,
        "per_s": count / seconds,
        "precision": getattr(embedder, "precision", "fp32"),
        "run": embedder.batch_size,
        "round": retriever.indexer.batch,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "load": os.getloadavg()[0],
        "code": str(Path(sys.modules["proxy"].__file__ or "").parent.parent),
    }


def spawn(spec: dict[str, Any]) -> dict[str, Any]:
    """One run in a fresh interpreter (its own model, threads and memory)."""
    done = subprocess.run(
        [sys.executable, str(BENCH / "indexing.py"), "--worker", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise RuntimeError(f"run {spec} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def compare(args: argparse.Namespace) -> None:
    today_root = str(args.today_root.resolve()) if args.today_root else str(ROOT)
    today: dict[str, Any] = {"root": today_root, **TODAY}
    if args.today_root:
        del today["precision"]  # that checkout's own build (fp32 before builds existed)
    new: dict[str, Any] = {"root": str(ROOT)}
    books = [args.book] if args.book else list(BOOKS)
    print(f"cpus {os.cpu_count()}, load average {os.getloadavg()[0]:.1f} at start")
    print(f"today: {today_root if args.today_root else 'this checkout'}, {json.dumps(TODAY)}")
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for round_number in range(args.rounds):
        order = [("today", today), ("new", new)]
        if round_number % 2:
            order.reverse()
        for book in books:
            for label, spec in order:
                result = spawn({**spec, "book": book, "pages": args.pages})
                results.setdefault((label, book), []).append(result)
                print(
                    f"  round {round_number + 1} {label:5s} {book}: {result['passages']} passages"
                    f" in {result['seconds']:.1f} s = {result['per_s']:.1f} passages/s"
                    f" (cpu {result['cpu']:.0f} s; {result['precision']}, model runs of"
                    f" {result['run']}, rounds of {result['round']}; load {result['load']:.1f})",
                    flush=True,
                )
    print(
        "| book | passages | today: s, passages/s, CPU ms/passage"
        " | new: s, passages/s, CPU ms/passage | speed-up: wall, CPU (median) |"
    )
    print("|---|---|---|---|---|")
    for book in books:
        old, ours = results[("today", book)], results[("new", book)]
        ratios = [a["seconds"] / b["seconds"] for a, b in zip(old, ours, strict=True)]
        cpu_ratios = [a["cpu"] / b["cpu"] for a, b in zip(old, ours, strict=True)]

        def cells(runs: list[dict[str, Any]]) -> str:
            return (
                f"{statistics.median(r['seconds'] for r in runs):.0f} s,"
                f" {statistics.median(r['per_s'] for r in runs):.1f},"
                f" {statistics.median(1000 * r['cpu'] / r['passages'] for r in runs):.0f}"
            )

        print(
            f"| {book} | {old[0]['passages']} | {cells(old)} | {cells(ours)} |"
            f" {statistics.median(ratios):.2f}x, {statistics.median(cpu_ratios):.2f}x |"
        )
    print(f"load average {os.getloadavg()[0]:.1f} at end")


# -- batch size, threads, spinning --------------------------------------------------------


def book_passages(name: str) -> list[str]:
    sys.path.insert(0, str(ROOT))
    from proxy.documents import DocumentParser
    from proxy.retrieval.chunking import chunk_document
    from proxy.retrieval.embeddings import DefaultEmbedder

    async def parse() -> list[str]:
        with tempfile.TemporaryDirectory() as directory:
            parser = DocumentParser(Path(directory), workers=1)
            try:
                path = CORPUS / BOOKS[name]
                document = await parser.parse(path.name, path.read_bytes())
            finally:
                await parser.close()
        count = DefaultEmbedder().count_tokens
        return [chunk.text for chunk in chunk_document(document, count_tokens=count)]

    return asyncio.run(parse())


def sessions(build: str, threads: int, spinning: bool) -> tuple[Any, Any]:
    """A session of one MiniLM build with these thread settings, and the tokenizer."""
    import onnxruntime

    from proxy.retrieval.embeddings import DefaultEmbedder

    embedder = DefaultEmbedder(precision=build)  # type: ignore[arg-type]
    embedder._load()  # makes the int8 build if need be
    options = onnxruntime.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", str(int(spinning)))
    options.inter_op_num_threads = 1
    options.intra_op_num_threads = threads
    source = model_files()
    path = source
    if build == "int8":
        from proxy.retrieval.minilm import file_digest, int8_name

        path = source.parent / int8_name(file_digest(source))
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session, embedder._tokenizer


def model_files() -> Path:
    from chromadb.utils.embedding_functions import ONNXMiniLM_L6_V2

    function = ONNXMiniLM_L6_V2()
    return Path(function.DOWNLOAD_PATH) / function.EXTRACTED_FOLDER_NAME / "model.onnx"


def sweep(args: argparse.Namespace) -> None:
    """Passages/s and CPU ms a passage against model-run size, threads and spinning, on a sample
    of the book's real passages sorted by length (as the background embeds them)."""
    import random

    from proxy.retrieval.minilm import vectors_of

    texts = book_passages(args.book or "moby-dick.epub")
    sample = sorted(random.Random(7).sample(texts, args.sample), key=len)
    print(
        f"cpus {os.cpu_count()}, load average {os.getloadavg()[0]:.1f} at start;"
        f" {len(sample)} passages of {args.book or 'moby-dick.epub'}"
    )
    sizes = [int(size) for size in args.sizes.split(",")]
    configs = [
        (build, threads, spinning)
        for build in args.builds.split(",")
        for threads in (1, 2)
        for spinning in (False, True)
    ]
    made = {config: sessions(*config) for config in configs}
    results: dict[tuple[Any, ...], list[tuple[float, float]]] = {}
    for round_number in range(args.rounds):
        keys = [(config, size) for config in configs for size in sizes]
        if round_number % 2:
            keys.reverse()
        for config, size in keys:
            session, tokenizer = made[config]
            cpu, started = time.process_time(), time.perf_counter()
            for start in range(0, len(sample), size):
                vectors_of(session, tokenizer, sample[start : start + size])
            wall = time.perf_counter() - started
            cpu = time.process_time() - cpu
            results.setdefault((config, size), []).append(
                (len(sample) / wall, 1000 * cpu / len(sample))
            )
    print(
        "| build | intra-op threads | spinning | model run | passages/s (best)"
        " | CPU ms/passage (best) |"
    )
    print("|---|---|---|---|---|---|")
    for (config, size), values in results.items():
        build, threads, spinning = config
        print(
            f"| {build} | {threads} | {'on' if spinning else 'off'} | {size} |"
            f" {max(v[0] for v in values):.1f} | {min(v[1] for v in values):.1f} |"
        )
    print(f"load average {os.getloadavg()[0]:.1f} at end")


# -- int8 against fp32 --------------------------------------------------------------------


def collapse(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def agreement(args: argparse.Namespace) -> None:
    """Cosine between the two builds' vectors of every passage of the tuning half's corpus
    documents (and the two books), and how each build ranks those passages for their questions
    (dense ranking alone)."""
    import numpy as np

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(Path.home() / ".cache" / "tiktoken"))
    from proxy.documents import DocumentParser
    from proxy.retrieval.chunking import chunk_document
    from proxy.retrieval.embeddings import DefaultEmbedder

    spec = json.loads((BENCH / "eval" / "tuning.json").read_text())
    fp32, int8 = DefaultEmbedder(precision="fp32"), DefaultEmbedder(precision="int8")

    async def run() -> None:
        cosines: list[float] = []
        same_first = overlap = found32 = found8 = 0
        ranks32: list[int] = []
        ranks8: list[int] = []
        # The tuning half's documents that lie in the corpus (the others are fetched by
        # bench/eval/documents.py), by their id, and the two books.
        documents = {
            key: {"path": info["source"].split(":", 1)[1]}
            for key, info in spec["documents"].items()
            if info["source"].startswith("corpus:")
        }
        questions = [q for q in spec["questions"] if q["doc"] in documents]
        for name in BOOKS:
            if not any(
                CORPUS / info["path"] == CORPUS / BOOKS[name] for info in documents.values()
            ):
                documents.setdefault(name, {"path": BOOKS[name]})
        with tempfile.TemporaryDirectory() as directory:
            parser = DocumentParser(Path(directory), workers=1)
            try:
                for name, info in documents.items():
                    path = CORPUS / info["path"]
                    document = await parser.parse(path.name, path.read_bytes())
                    texts = [
                        chunk.text
                        for chunk in chunk_document(document, count_tokens=fp32.count_tokens)
                    ]
                    a = np.asarray(await fp32.embed_documents(texts), dtype=np.float32)
                    b = np.asarray(await int8.embed_documents(texts), dtype=np.float32)
                    cosines.extend((a * b).sum(axis=1).tolist())
                    print(
                        f"  {name}: {len(texts)} passages, cosine min"
                        f" {(a * b).sum(axis=1).min():.4f}",
                        flush=True,
                    )
                    for question in (q for q in questions if q["doc"] == name):
                        q32 = np.asarray(await fp32.embed_query(question["q"]))
                        q8 = np.asarray(await int8.embed_query(question["q"]))
                        top32 = list(np.argsort(-(a @ q32))[:10])
                        top8 = list(np.argsort(-(b @ q8))[:10])
                        same_first += top32[0] == top8[0]
                        overlap += len(set(top32) & set(top8))
                        answer = collapse(question["answer"])
                        holding = [i for i, t in enumerate(texts) if answer in collapse(t)]
                        r32 = next((r for r, i in enumerate(top32, 1) if i in holding), 0)
                        r8 = next((r for r, i in enumerate(top8, 1) if i in holding), 0)
                        found32 += bool(r32)
                        found8 += bool(r8)
                        ranks32.append(r32)
                        ranks8.append(r8)
            finally:
                await parser.close()
        values = np.asarray(cosines)
        n = len(questions)
        print(
            f"cosine int8 to fp32 over {len(values)} passages: min {values.min():.4f},"
            f" 1st percentile {np.percentile(values, 1):.4f}, median {np.median(values):.4f}"
        )
        print(
            f"dense ranking of {n} questions: same best passage {same_first}/{n}, top-10 overlap"
            f" {overlap / n:.1f}/10; answer in the dense top 10: fp32 {found32}/{n},"
            f" int8 {found8}/{n}; MRR@10 fp32"
            f" {statistics.fmean(1 / r if r else 0 for r in ranks32):.3f},"
            f" int8 {statistics.fmean(1 / r if r else 0 for r in ranks8):.3f}"
        )

    asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--today-root", type=Path, help="a checkout whose own code is 'today'")
    parser.add_argument("--book", choices=sorted(BOOKS), help="one book only")
    parser.add_argument("--pages", type=int, help="index only the book's first pages")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--one", choices=["today", "new"], help="one run, for whole-process timing")
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--sizes", default="1,2,4,8,16,32", help="--sweep: model-run sizes")
    parser.add_argument("--builds", default="fp32,int8", help="--sweep: builds")
    parser.add_argument("--sample", type=int, default=64, help="--sweep: passages")
    parser.add_argument("--agreement", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(asyncio.run(index_once(json.loads(args.worker)))))
    elif args.one:
        root = (
            str(args.today_root.resolve()) if args.today_root and args.one == "today" else str(ROOT)
        )
        spec: dict[str, Any] = {"root": root, "book": args.book or "moby-dick.epub"}
        if args.one == "today":
            spec.update(TODAY)
            if args.today_root:
                del spec["precision"]
        print(json.dumps(asyncio.run(index_once({**spec, "pages": args.pages}))))
    elif args.sweep:
        sys.path.insert(0, str(ROOT))
        sweep(args)
    elif args.agreement:
        agreement(args)
    else:
        compare(args)


if __name__ == "__main__":
    main()
