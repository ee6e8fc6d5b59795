"""Indexing speed: the proxy's whole index of a book against Chroma's stock MiniLM embedding
the same passages, in one run.

    python bench/indexing.py                        # both books: stock and new, interleaved
    python bench/indexing.py --rounds 5             # five rounds each (medians, load averages)
    python bench/indexing.py --contenders "stock;new;new, not stepping back"
    python bench/indexing.py --today-root ../main --contenders "stock;today;new"
    python bench/indexing.py --pages 40 --rounds 2  # the first 40 pages of each book, twice
    python bench/indexing.py --one new --book moby-dick.epub   # one whole-process run
    python bench/indexing.py --sweep                # passages/s against run size, threads, lanes
    python bench/indexing.py --agreement            # int8 against fp32: cosines and rankings
    python bench/indexing.py --parse-vs-embed       # per document: parsing against embedding

Each run is a process of its own, timed after its model is loaded. "stock" is Chroma's
all-MiniLM-L6-v2 as shipped (`ONNXMiniLM_L6_V2()(texts)`: fp32, runs of 32 passages padded to
256 tokens, ONNX Runtime's default threads) embedding the passages the proxy cuts from the
book — embedding only, nothing stored. "new" is this checkout's whole index of the same book
(`Retriever.index_document`: background rounds at the background's priority, vectors upserted
into an embedded Chroma store in a fresh directory); "new, not stepping back" the same with
the background lanes at the request path's priority (on a machine busy with other work, the
background gives way to it by design). "today" is another checkout's whole index
(`--today-root`), or fp32 with 64-passage runs (this checkout's code). Runs alternate (stock,
new, new, stock, ...) so that a machine getting busier or quieter favours neither; the ratio
is taken within each round, and its median reported with the load averages seen. Prints
numbers only.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH / "eval"))
sys.path.insert(1, str(ROOT))

from documents import find_corpus  # noqa: E402
from reporting import recorded  # noqa: E402

from bench.corpus import ENV, add_corpus_option, corpus_or_exit  # noqa: E402

CORPUS = find_corpus()
BOOKS = {"moby-dick.epub": "epub/moby-dick.epub", "freeculture.pdf": "pdf/freeculture.pdf"}
TODAY = {"precision": "fp32", "run": 64, "round": 4}
"""Today's settings: fp32, `embeddings.batch_size` 64, `BACKGROUND_BATCH` 4."""


# -- one indexing run, in its own process ---------------------------------------------


async def book_document(spec: dict[str, Any], directory: Path) -> Any:
    """The book parsed by the code under test (its first `pages` pages, if given)."""
    from proxy.documents.model import ParsedDocument
    from proxy.documents.parser import DocumentParser

    path = CORPUS / BOOKS[spec["book"]]
    parser = DocumentParser(directory / "parsed", workers=1)
    try:
        document: ParsedDocument = await parser.parse(path.name, path.read_bytes())
    finally:
        await parser.close()
    if spec.get("pages"):
        pages = document.pages[: spec["pages"]]
        document = ParsedDocument(
            document.name, document.sha256, document.kind, document.library, pages
        )
    return document


async def index_once(spec: dict[str, Any]) -> dict[str, Any]:
    """Index one book with the code under `spec["root"]` and the given settings."""
    sys.path.insert(0, spec["root"])
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(Path.home() / ".cache" / "tiktoken"))
    from proxy.retrieval.embeddings import DefaultEmbedder
    from proxy.retrieval.index import VectorIndex
    from proxy.retrieval.retriever import Retriever

    settings: dict[str, Any] = {}
    if spec.get("precision"):
        settings["precision"] = spec["precision"]
    if spec.get("run"):
        settings["batch_size"] = spec["run"]
    if "nice" in spec:
        settings["background_nice"] = spec["nice"]
    embedder = DefaultEmbedder(**settings)
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        document = await book_document(spec, directory)
        retriever = Retriever(
            index=VectorIndex.embedded(directory / "chroma", embedder),
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
            load = os.getloadavg()[0]
            cpu, started = time.process_time(), time.perf_counter()
            indexed = await retriever.index_document(document)
            seconds = time.perf_counter() - started
            cpu = time.process_time() - cpu
        finally:
            await retriever.close()
    return result_of(spec, len(passages.chunks), seconds, cpu, load) | {
        "indexed": indexed,
        "precision": getattr(embedder, "precision", "fp32"),
        "run": embedder.batch_size,
        "lanes": getattr(embedder, "lanes", 1),
        "round": retriever.indexer.batch,
    }


async def stock_once(spec: dict[str, Any]) -> dict[str, Any]:
    """Chroma's stock MiniLM embedding the passages this checkout cuts from the book."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(Path.home() / ".cache" / "tiktoken"))
    from chromadb.utils.embedding_functions import ONNXMiniLM_L6_V2

    from proxy.retrieval.chunking import chunk_document
    from proxy.retrieval.embeddings import DefaultEmbedder

    with tempfile.TemporaryDirectory() as name:
        document = await book_document(spec, Path(name))
    count = DefaultEmbedder().count_tokens
    texts = [chunk.embedded for chunk in chunk_document(document, count_tokens=count)]
    function = ONNXMiniLM_L6_V2(preferred_providers=["CPUExecutionProvider"])
    function(["the model is loaded before the clock starts"])
    load = os.getloadavg()[0]
    cpu, started = time.process_time(), time.perf_counter()
    vectors = function(texts)
    seconds = time.perf_counter() - started
    cpu = time.process_time() - cpu
    assert len(vectors) == len(texts)
    return result_of(spec, len(texts), seconds, cpu, load) | {
        "precision": "fp32",
        "run": 32,
        "lanes": 1,
        "round": 0,
    }


def result_of(
    spec: dict[str, Any], count: int, seconds: float, cpu: float, load: float
) -> dict[str, Any]:
    return {
        "book": spec["book"],
        "passages": count,
        "seconds": seconds,
        "cpu": cpu,
        "per_s": count / seconds,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "load": load,
        "code": str(Path(sys.modules["proxy"].__file__ or "").parent.parent),
    }


def run_spec(spec: dict[str, Any]) -> dict[str, Any]:
    if spec.get("kind") == "stock":
        return asyncio.run(stock_once(spec))
    return asyncio.run(index_once(spec))


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


def contenders(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The runs compared, by name."""
    here = str(ROOT)
    known: dict[str, dict[str, Any]] = {
        "stock": {"kind": "stock", "root": here},
        "new": {"kind": "index", "root": here},
        "new, not stepping back": {"kind": "index", "root": here, "nice": 0},
    }
    if args.today_root:
        known["today"] = {"kind": "index", "root": str(args.today_root.resolve())}
    else:
        known["today"] = {"kind": "index", "root": here, **TODAY}
    names = [name.strip() for name in args.contenders.split(";") if name.strip()]
    unknown = [name for name in names if name not in known]
    if unknown or len(names) < 2:
        raise SystemExit(f"--contenders: two or more of {', '.join(known)} (got {names})")
    return {name: known[name] for name in names}


def compare(args: argparse.Namespace) -> None:
    runs = contenders(args)
    books = [args.book] if args.book else list(BOOKS)
    base = next(iter(runs))
    print(f"cpus {os.cpu_count()}, load average {os.getloadavg()[0]:.1f} at start")
    print("contenders: " + "; ".join(f"{name} {json.dumps(spec)}" for name, spec in runs.items()))
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for round_number in range(args.rounds):
        order = list(runs.items())
        if round_number % 2:
            order.reverse()
        for book in books:
            for label, spec in order:
                result = spawn({**spec, "book": book, "pages": args.pages})
                results.setdefault((label, book), []).append(result)
                print(
                    f"  round {round_number + 1} {label}, {book}: {result['passages']} passages"
                    f" in {result['seconds']:.1f} s = {result['per_s']:.1f} passages/s"
                    f" (cpu {result['cpu']:.1f} s; {result['precision']}, runs of"
                    f" {result['run']} on {result['lanes']} lane(s); load {result['load']:.1f})",
                    flush=True,
                )
    print(
        "\n| book | passages | run | s (median) | passages/s | CPU ms/passage |"
        f" against {base}: wall, CPU (median of the rounds' ratios) | load average (runs) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for book in books:
        first = results[(base, book)]
        for label in runs:
            mine = results[(label, book)]
            wall = [a["seconds"] / b["seconds"] for a, b in zip(first, mine, strict=True)]
            cpu = [a["cpu"] / b["cpu"] for a, b in zip(first, mine, strict=True)]
            loads = [r["load"] for r in mine]
            print(
                f"| {book} | {mine[0]['passages']} | {label} |"
                f" {statistics.median(r['seconds'] for r in mine):.1f} |"
                f" {statistics.median(r['per_s'] for r in mine):.1f} |"
                f" {statistics.median(1000 * r['cpu'] / r['passages'] for r in mine):.0f} |"
                f" {statistics.median(wall):.2f}x, {statistics.median(cpu):.2f}x |"
                f" {min(loads):.1f}–{max(loads):.1f} |"
            )
    print(f"load average {os.getloadavg()[0]:.1f} at end")


# -- batch size, threads, spinning --------------------------------------------------------


def book_passages(name: str) -> list[str]:
    sys.path.insert(0, str(ROOT))
    from proxy.documents.parser import DocumentParser
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
        return [chunk.embedded for chunk in chunk_document(document, count_tokens=count)]

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
    """Passages/s and CPU ms a passage against model-run size, runs side by side, threads and
    spinning, on a sample of the book's real passages sorted by length."""
    import random

    from proxy.retrieval.minilm import vectors_of

    texts = book_passages(args.book or "moby-dick.epub")
    sample = sorted(random.Random(7).sample(texts, args.sample), key=len)
    print(
        f"cpus {os.cpu_count()}, load average {os.getloadavg()[0]:.1f} at start;"
        f" {len(sample)} passages of {args.book or 'moby-dick.epub'}"
    )
    sizes = [int(size) for size in args.sizes.split(",")]
    # (lanes, intra-op threads, spinning): one run at a time on one or two threads, or two
    # runs side by side on one thread each (what the default embedder does on 2 cores).
    shapes = [(1, 1, False), (1, 2, False), (1, 2, True), (2, 1, False)]
    configs = [(build, *shape) for build in args.builds.split(",") for shape in shapes]
    made = {config: sessions(config[0], config[2], config[3]) for config in configs}
    lanes = ThreadPoolExecutor(2)
    results: dict[tuple[Any, ...], list[tuple[float, float]]] = {}
    for round_number in range(args.rounds):
        keys = [(config, size) for config in configs for size in sizes]
        if round_number % 2:
            keys.reverse()
        for config, size in keys:
            session, tokenizer = made[config]
            runs = [sample[start : start + size] for start in range(0, len(sample), size)]
            cpu, started = time.process_time(), time.perf_counter()
            if config[1] == 1:
                for run in runs:
                    vectors_of(session, tokenizer, run)
            else:
                embed = functools.partial(vectors_of, session, tokenizer)
                list(lanes.map(embed, runs))
            wall = time.perf_counter() - started
            cpu = time.process_time() - cpu
            results.setdefault((config, size), []).append(
                (len(sample) / wall, 1000 * cpu / len(sample))
            )
    print(
        "| build | runs side by side | intra-op threads | spinning | model run"
        " | passages/s (median) | CPU ms/passage (median) |"
    )
    print("|---|---|---|---|---|---|---|")
    for (config, size), values in results.items():
        build, side_by_side, threads, spinning = config
        print(
            f"| {build} | {side_by_side} | {threads} | {'on' if spinning else 'off'} | {size} |"
            f" {statistics.median(v[0] for v in values):.1f} |"
            f" {statistics.median(v[1] for v in values):.1f} |"
        )
    print(f"load average {os.getloadavg()[0]:.1f} at end")


# -- parsing against embedding, per document ------------------------------------------------

SIZES = (
    "pdf/issue20232.pdf",
    "pdf/small-table.pdf",
    "docx/blk-paras-and-tables.docx",
    "pdf/multicolumn.pdf",
    "html/ietf-remotestorage.html",
    "pdf/tracemonkey.pdf",
    "html/wikipedia-mozilla.html",
    "pdf/pdkids.pdf",
    "epub/alice.epub",
    "pdf/GeoTopo-komprimiert.pdf",
    "pdf/freeculture.pdf",
    "epub/moby-dick.epub",
)
"""Corpus documents from one page to a 612-page novel, in several formats and two languages."""


def parse_vs_embed(args: argparse.Namespace) -> None:
    """For each document: parsing it (a warm parser, nothing cached), cutting it into passages
    with its lexical index, and embedding every passage on a request's lanes (the embedder its
    language goes to), in seconds and per page and passage: what a question waits for if the
    whole document is embedded before it is answered."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(Path.home() / ".cache" / "tiktoken"))
    from proxy.config import load_settings
    from proxy.documents.parser import DocumentParser
    from proxy.wiring import make_retriever

    async def run() -> None:
        with tempfile.TemporaryDirectory() as name:
            directory = Path(name)
            settings = load_settings(
                None, environ={}, overrides={"server": {"data_dir": str(directory)}}
            )
            retriever = make_retriever(settings)
            parser = DocumentParser(directory / "parsed", workers=2)
            try:
                warm = CORPUS / "pdf" / "multicolumn.pdf"
                await parser.parse(warm.name, warm.read_bytes())  # workers up, libraries loaded
                for space in [retriever.primary, retriever.second]:
                    if space is not None:  # models loaded before the clock starts
                        await space.embedder.embed_documents(["warm up"])
                print(
                    "| document | pages | passages | embedder | parse s | passages s"
                    " | embed s | embed ms/passage | embed / parse | load |"
                )
                print("|---|---|---|---|---|---|---|---|---|---|")
                for relative in SIZES:
                    path = CORPUS / relative
                    data = path.read_bytes()
                    started = time.perf_counter()
                    document = await parser.parse(path.name, data)
                    parsed = time.perf_counter() - started
                    started = time.perf_counter()
                    passages = await retriever.passages(document)
                    cut = time.perf_counter() - started
                    space = retriever.space_for(passages.lexical.language) or retriever.primary
                    texts = [chunk.embedded for chunk in passages.chunks]
                    started = time.perf_counter()
                    await space.embedder.embed_documents(texts)
                    embedded = time.perf_counter() - started
                    print(
                        f"| {path.name} | {len(document.pages)} | {len(texts)} |"
                        f" {space.embedder.name.split('-')[-1]} | {parsed:.2f} | {cut:.2f} |"
                        f" {embedded:.2f} | {1000 * embedded / max(1, len(texts)):.0f} |"
                        f" {embedded / parsed:.1f} | {os.getloadavg()[0]:.1f} |",
                        flush=True,
                    )
            finally:
                await parser.close()
                await retriever.close()

    asyncio.run(run())


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
    from proxy.documents.parser import DocumentParser
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
    parser.add_argument(
        "--contenders", default="stock;new", help="runs to compare, joined by ; (the first: base)"
    )
    parser.add_argument("--book", choices=sorted(BOOKS), help="one book only")
    parser.add_argument("--pages", type=int, help="index only the book's first pages")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--one",
        choices=["stock", "today", "new", "new, not stepping back"],
        help="one run, for whole-process timing",
    )
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--sizes", default="1,2,4,8,16,32", help="--sweep: model-run sizes")
    parser.add_argument("--builds", default="fp32,int8", help="--sweep: builds")
    parser.add_argument("--sample", type=int, default=64, help="--sweep: passages")
    parser.add_argument("--agreement", action="store_true")
    parser.add_argument("--parse-vs-embed", action="store_true", help="per corpus document")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument(
        "--out", type=Path, help="also write what is printed here (e.g. bench/results/retrieval/…)"
    )
    add_corpus_option(parser)
    args = parser.parse_args()
    if args.corpus:  # also for the workers this run starts, which read it from there
        global CORPUS
        CORPUS = corpus_or_exit(args.corpus)
        os.environ[ENV] = str(CORPUS)
    with recorded(args.out):
        measure(args)


def measure(args: argparse.Namespace) -> None:
    """The run `main` was asked for."""
    if args.worker:
        print(json.dumps(run_spec(json.loads(args.worker))))
    elif args.one:
        args.contenders = f"{args.one};stock"
        spec = contenders(args)[args.one]
        book = args.book or "moby-dick.epub"
        print(json.dumps(run_spec({**spec, "book": book, "pages": args.pages})))
    elif args.sweep:
        sys.path.insert(0, str(ROOT))
        sweep(args)
    elif args.agreement:
        agreement(args)
    elif args.parse_vs_embed:
        parse_vs_embed(args)
    else:
        compare(args)


if __name__ == "__main__":
    main()
