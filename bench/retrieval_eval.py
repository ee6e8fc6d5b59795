"""Retrieval quality: does the answering passage reach the model? Hit rate and MRR per method.

    python bench/retrieval_eval.py                         # every method of this checkout
    python bench/retrieval_eval.py --methods "dense;hybrid"  # some of them (; between)
    python bench/retrieval_eval.py --proxy-root ../main --methods today   # another checkout
    python bench/retrieval_eval.py --calibrate default     # + the threshold calibration table

The questions (`bench/retrieval_questions.json`) are written in a user's own words over seven
corpus documents (`../shared/corpus`): a 352-page book, a two-column paper, two HTML pages, an
EPUB novel, German lecture notes and a Russian title block, with English questions on the
German and Russian ones too. Each carries a phrase of the document that answers it.

Every question goes through the real pipeline: `POST /v1/enrich/preview` of a proxy in front of
a fake llama.cpp upstream with a 4,096-token window (counted with cl100k), the document attached
as a file part and `strategy: retrieval` forced. A question is a **hit** when its answer phrase
(whitespace collapsed) is in the text that would be forwarded upstream; its reciprocal rank is
1/N for the first `Citation N` that holds the phrase. Documents are indexed completely before
the questions are asked (the first question on each is timed separately). Prints tables and
asserts nothing.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
CORPUS = BENCH.parent.parent / "shared" / "corpus"
QUESTIONS = BENCH / "retrieval_questions.json"

CITATION = re.compile(r'^Citation \d+: "', re.M)
CITATIONS_END = '"\n\nUse the citations above'

MIME = {".pdf": "application/pdf", ".html": "text/html", ".epub": "application/epub+zip"}

# Each method is a set of settings over the defaults of the checkout under test.
METHODS: dict[str, dict[str, Any]] = {
    "today": {},  # main's defaults, for --proxy-root ../main
    "dense": {"retrieval": {"ranking": "dense", "fill": "none"}},
    "dense+fill": {"retrieval": {"ranking": "dense", "fill": "passages"}},
    "lexical+fill": {"retrieval": {"ranking": "lexical", "fill": "passages"}},
    "hybrid": {"retrieval": {"ranking": "hybrid", "fill": "none"}},
    "hybrid+fill": {"retrieval": {"ranking": "hybrid", "fill": "passages"}},
    "hybrid+neighbours": {"retrieval": {"ranking": "hybrid", "fill": "neighbours"}},
    "hybrid+fill+rerank": {"retrieval": {"ranking": "hybrid", "fill": "passages", "rerank": {}}},
    "default": {},
    # The default embedder's two builds (README, "Embedding backends"); "default" is int8 on a
    # CPU with VNNI or AMX, fp32 elsewhere.
    "default, fp32 MiniLM": {"embeddings": {"precision": "fp32"}},
    "default, int8 MiniLM": {"embeddings": {"precision": "int8"}},
    "hybrid+fill, passages of 128": {"retrieval": {"chunk_tokens": 128, "chunk_overlap": 16}},
    # Every question as if it were the first on a new document: lexical candidates only.
    "new-document K=8": {"retrieval": {"new_document_candidates": 8}, "first": True},
    "new-document K=16": {"retrieval": {"new_document_candidates": 16}, "first": True},
    "new-document K=64": {"retrieval": {"new_document_candidates": 64}, "first": True},
    "new-document K=16, fp32 MiniLM": {
        "retrieval": {"new_document_candidates": 16},
        "embeddings": {"precision": "fp32"},
        "first": True,
    },
    "new-document K=16, int8 MiniLM": {
        "retrieval": {"new_document_candidates": 16},
        "embeddings": {"precision": "int8"},
        "first": True,
    },
}
DEFAULT_METHODS = ";".join(name for name in METHODS if name != "today")


def collapse(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def file_part(path: Path) -> dict[str, Any]:
    data = base64.b64encode(path.read_bytes()).decode()
    mime = MIME.get(path.suffix, "application/octet-stream")
    return {
        "type": "file",
        "file": {"filename": path.name, "file_data": f"data:{mime};base64,{data}"},
    }


def body(part: dict[str, Any], query: str, threshold: float | None = None) -> dict[str, Any]:
    enrich: dict[str, Any] = {"strategy": "retrieval"}
    if threshold is not None:
        enrich["affinity_threshold"] = threshold
    content = [{"type": "text", "text": query}, part]
    return {"model": "m", "messages": [{"role": "user", "content": content}], "enrich": enrich}


def forwarded(preview: dict[str, Any]) -> str:
    content = preview["upstream"]["body"]["messages"][-1]["content"]
    return str(content[0]["text"] if isinstance(content, list) else content)


def citations(prompt: str) -> list[str]:
    """The passages of a citation prompt, in order (passages may hold quotes and newlines)."""
    starts = [match.end() for match in CITATION.finditer(prompt)]
    if not starts:
        return []
    ends = [match.start() - 3 for match in CITATION.finditer(prompt)][1:]  # '"\n\n' before
    ends.append(prompt.index(CITATIONS_END))
    return [prompt[start:end] for start, end in zip(starts, ends, strict=True)]


def judge(preview: dict[str, Any], answer: str) -> tuple[bool, float, int]:
    """Hit, reciprocal rank and the forwarded passages' size in characters."""
    passages = citations(forwarded(preview))
    phrase = collapse(answer)
    rank = next((i for i, text in enumerate(passages, 1) if phrase in collapse(text)), None)
    return rank is not None, (1.0 / rank if rank else 0.0), sum(len(p) for p in passages)


def ready(preview: dict[str, Any]) -> bool:
    record = preview["decision"].get("retrieval") or {}
    indexed = record.get("indexed")  # absent in checkouts that index before answering
    return indexed is None or all(value >= 100 for value in indexed.values())


class Proxy:
    """A proxy of the checkout under test in front of a fake llama.cpp upstream (4,096 tokens)."""

    def __init__(self, data_dir: Path, overrides: dict[str, Any], reranker: str | None) -> None:
        from proxy.config import load_settings
        from proxy.http.app import make_app
        from tests.fakes.servers import ServerThread
        from tests.fakes.upstream import FakeUpstream

        overrides = {key: value for key, value in overrides.items() if key != "first"}

        self.servers = ServerThread()
        upstream = FakeUpstream(n_ctx=WINDOW[0])
        upstream_url = self.servers.serve(upstream.app())
        sections: dict[str, Any] = {
            "upstream": {"base_url": upstream_url, "tokenizer": "tiktoken"},
            "server": {"data_dir": str(data_dir), "max_body_mb": 64},
            "documents": {"max_file_mb": 60},
        }
        for key, value in json.loads(json.dumps(overrides)).items():
            if key == "retrieval" and "rerank" in value:
                value["rerank"] = {"base_url": reranker, "model": "stand-in", **value["rerank"]}
            sections[key] = {**sections.get(key, {}), **value}
        settings = load_settings(None, environ={}, overrides=sections)
        self.app = make_app(settings)
        self.base = self.servers.serve(self.app)

    def forget_dense_index(self) -> None:
        """From now on every question is answered as the first on a new document: from its
        lexical candidates alone, embedded for that question (nothing indexed in the back)."""
        from proxy.http.keys import SERVICES

        async def forget() -> None:
            retriever = await self.app[SERVICES].retriever()
            retriever.background = False
            await retriever.indexer.close()  # stops background indexing
            retriever.indexer._progress.clear()
            retriever.index._cache.clear()
            manifest = retriever.index.manifest()
            records = await retriever.index.call(lambda: manifest.get()["ids"])
            if records:
                await retriever.index.call(lambda: manifest.delete(ids=records))

        self.servers.call(forget())

    def preview(self, payload: dict[str, Any]) -> dict[str, Any]:
        import httpx

        response = httpx.post(self.base + "/v1/enrich/preview", json=payload, timeout=600)
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def close(self) -> None:
        self.servers.close()


def start_reranker() -> tuple[Any, str]:
    """A stand-in reranker: `/v1/rerank` scoring by MiniLM cosine (no reranking GGUF is to be
    had from the package registries here)."""
    from tests.fakes.reranker import FakeReranker
    from tests.fakes.servers import ServerThread

    servers = ServerThread()
    fake = FakeReranker(scorer="minilm")
    return servers, servers.serve(fake.app()) + "/v1"


def run_method(
    name: str,
    questions: list[dict[str, Any]],
    documents: dict[str, Any],
    data_dir: Path,
    reranker: str | None,
    calibrate: bool,
) -> dict[str, Any]:
    proxy = Proxy(data_dir, METHODS[name], reranker)
    parts = {doc: file_part(CORPUS / info["path"]) for doc, info in documents.items()}
    first: dict[str, float] = {}
    try:
        for doc, part in parts.items():
            started = time.perf_counter()
            preview = proxy.preview(body(part, "What is this document about?"))
            first[doc] = time.perf_counter() - started
            while not METHODS[name].get("first") and not ready(preview):
                # the index finishes first: quality is measured on complete indexes
                time.sleep(2)
                preview = proxy.preview(body(part, "What is this document about?"))
        rows = []
        first_question = bool(METHODS[name].get("first"))
        for question in questions:
            if first_question:
                proxy.forget_dense_index()
            started = time.perf_counter()
            preview = proxy.preview(body(parts[question["doc"]], question["q"]))
            seconds = time.perf_counter() - started
            hit, rr, size = judge(preview, question["answer"])
            rows.append({**question, "hit": hit, "rr": rr, "seconds": seconds, "chars": size})
        calibration = measure_calibration(proxy, questions, parts) if calibrate else None
    finally:
        proxy.close()
    return {"method": name, "rows": rows, "first": first, "calibration": calibration}


def measure_calibration(
    proxy: Proxy, questions: list[dict[str, Any]], parts: dict[str, dict[str, Any]]
) -> dict[str, list[float]]:
    """Scores with no threshold: of the passage that answers, and of the best passage for a
    question about another document."""
    answering: list[float] = []
    unrelated: list[float] = []
    docs = sorted(parts)
    for i, question in enumerate(questions):
        preview = proxy.preview(body(parts[question["doc"]], question["q"], threshold=0.0))
        scores = [result["score"] for result in preview["search_results"]]
        for text, score in zip(citations(forwarded(preview)), scores, strict=False):
            if collapse(question["answer"]) in collapse(text):
                answering.append(score)
                break
        other = docs[(docs.index(question["doc"]) + 1 + i % (len(docs) - 1)) % len(docs)]
        preview = proxy.preview(body(parts[other], question["q"], threshold=0.0))
        scores = [result["score"] for result in preview["search_results"]]
        unrelated.append(max(scores, default=0.0))
    return {"answering": answering, "unrelated": unrelated}


def summarise(result: dict[str, Any]) -> str:
    rows = result["rows"]

    def part(selected: list[dict[str, Any]]) -> str:
        hits = sum(row["hit"] for row in selected)
        return f"{hits}/{len(selected)}"

    english = [r for r in rows if r["lang"] == "en" and r["doc"] not in NON_ENGLISH]
    german = [r for r in rows if r["doc"] == "GeoTopo-komprimiert.pdf"]
    russian = [r for r in rows if r["doc"] == "issue20232.pdf"]
    hits = sum(row["hit"] for row in rows)
    mrr = statistics.fmean(row["rr"] for row in rows)
    per_q = statistics.median(row["seconds"] for row in rows)
    chars = statistics.fmean(row["chars"] for row in rows)
    return (
        f"| {result['method']} | {hits}/{len(rows)} ({hits / len(rows):.0%}) | {mrr:.2f} | "
        f"{part(english)} | {part(german)} | {part(russian)} | {chars:,.0f} | "
        f"{per_q * 1000:.0f} ms |"
    )


WINDOW = [4096]  # --window

NON_ENGLISH = {"GeoTopo-komprimiert.pdf", "issue20232.pdf"}


def calibration_table(result: dict[str, Any]) -> str:
    calibration = result["calibration"]
    if not calibration:
        return ""
    lines = [f"\ncalibration ({result['method']}, score = the passage's `score` in search_results)"]
    for label, values in calibration.items():
        if values:
            quartiles = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
            lines.append(
                f"| {label} ({len(values)}) | {min(values):.2f} – {max(values):.2f} | "
                f"median {statistics.median(values):.2f} | quartiles {quartiles[0]:.2f}, "
                f"{quartiles[2]:.2f} |"
            )
    for threshold in (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3):
        kept = sum(score > threshold for score in calibration["answering"])
        stray = sum(score > threshold for score in calibration["unrelated"])
        lines.append(
            f"| threshold {threshold:.2f} | answers kept {kept}/{len(calibration['answering'])}"
            f" | unrelated questions still given a passage {stray}/"
            f"{len(calibration['unrelated'])} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default=DEFAULT_METHODS)
    parser.add_argument("--proxy-root", type=Path, default=BENCH.parent)
    parser.add_argument("--data-dir", type=Path, help="reuse indexes between runs")
    parser.add_argument(
        "--calibrate", default="", help="methods to also calibrate the threshold with, e.g. default"
    )
    parser.add_argument("--json", type=Path, help="write every row here")
    parser.add_argument("--window", type=int, default=4096, help="the model's context window")
    args = parser.parse_args()
    WINDOW[0] = args.window
    sys.path.insert(0, str(args.proxy_root.resolve()))
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(Path.home() / ".cache" / "tiktoken"))

    spec = json.loads(QUESTIONS.read_text())
    questions, documents = spec["questions"], spec["documents"]
    names = [name.strip() for name in args.methods.split(";") if name.strip()]
    reranker_servers, reranker = None, None
    if any("rerank" in json.dumps(METHODS[name]) for name in names):
        reranker_servers, reranker = start_reranker()
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="retrieval-eval-"))
    results = []
    try:
        for name in names:
            started = time.perf_counter()
            calibrate = name in args.calibrate.split(";")
            results.append(run_method(name, questions, documents, data_dir, reranker, calibrate))
            print(f"{name}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
            print(summarise(results[-1]), file=sys.stderr, flush=True)
    finally:
        if reranker_servers is not None:
            reranker_servers.close()

    print(f"{len(questions)} questions over {len(documents)} documents; window {args.window:,}")
    print(
        "| method | hit rate | MRR | English (36) | German doc (9) | Russian doc (3) "
        "| forwarded chars/question | median time/question |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for result in results:
        print(summarise(result))
    for result in results:
        first = ", ".join(f"{doc} {seconds:.1f} s" for doc, seconds in result["first"].items())
        print(f"first question per document ({result['method']}): {first}")
    for result in results:
        misses = [f"{r['doc']}: {r['q']}" for r in result["rows"] if not r["hit"]]
        print(f"\nmissed by {result['method']} ({len(misses)}):\n  " + "\n  ".join(misses))
    for result in results:
        print(calibration_table(result))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
