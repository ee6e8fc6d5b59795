"""Embedding backends: Chroma's built-in MiniLM on CPU (here), or any OpenAI-compatible server
(proxy.retrieval.embedding_server), chosen by `embeddings.backend`."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import structlog

from proxy.errors import ProxyError
from proxy.retrieval.embedding_server import OpenAIEmbedder
from proxy.retrieval.minilm import (
    INT8_RECIPE,
    Build,
    Precision,
    build_int8,
    choose_build,
    discard_private,
    lowest_cosine,
    machine_flags,
    vectors_of,
)
from proxy.retrieval.minilm_files import minilm_files

log = structlog.get_logger(__name__)

# Calibrated on corpus documents (tests/retrieval/test_calibration.py): passages answering
# 16 questions scored 0.23–0.78 with MiniLM (median 0.6), the best passage for unrelated
# questions 0.00–0.32 (median 0.13). A dropped answer costs more than a stray citation
# (the prompt says "only if they are relevant"), so the threshold sits below every answer.
MINILM_THRESHOLD = 0.2
MINILM_LANGUAGES = frozenset(
    {"english", "german", "french", "spanish", "italian", "portuguese", "dutch", "swedish"}
    | {"danish", "norwegian", "turkish"}
)
"""all-MiniLM-L6-v2 was trained on English; Latin-script languages share its word pieces and
get useful cosines (German questions on German notes: 11/19 found with them, 7/19 by words
alone), Cyrillic is spelled letter by letter and its cosines are noise (docs/retrieval.md),
so Russian text is ranked by its words."""
_DEFAULT_SETTINGS = {"batch_size", "default_threshold", "precision", "threads", "lanes"}


class Embedder(Protocol):
    """Turns passages and queries into vectors; `name` names the Chroma collection.

    `fingerprint` changes whenever the same text would get another vector (model, prefixes):
    documents indexed under another fingerprint are indexed again. `count_tokens` measures a
    passage the way the model reads it, so that passages fit what it embeds.
    """

    name: str
    default_threshold: float

    @property
    def fingerprint(self) -> str: ...

    def count_tokens(self, text: str) -> int: ...

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]: ...

    async def embed_query(self, text: str) -> list[float]: ...


class TurnLock:
    """A lock taken in the order asked (threading.Lock promises no order: a background round's
    next run could go before a query that was already waiting)."""

    def __init__(self) -> None:
        self._turns = threading.Condition()
        self.asked = 0
        self._serving = 0

    def __enter__(self) -> None:
        with self._turns:
            turn = self.asked
            self.asked += 1
            while turn != self._serving:
                self._turns.wait()

    def __exit__(self, *_: object) -> None:
        with self._turns:
            self._serving += 1
            self._turns.notify_all()


class WordPieceCounter:
    """Counts a text's tokens by whitespace-separated words, each tokenized once and cached.

    BERT-style tokenizers never join tokens across whitespace, so a text's count is the sum of
    its words' counts: exact, and ~10x faster than tokenizing every candidate passage whole
    (chunking measures the same words many times).
    """

    def __init__(self, tokenize: Callable[[str], int], max_words: int = 200_000) -> None:
        self._tokenize = tokenize
        self._words: dict[str, int] = {}
        self._max_words = max_words
        self._lock = threading.Lock()

    def __call__(self, text: str) -> int:
        words = self._words
        total = 0
        for word in text.split():
            count = words.get(word)
            if count is None:
                count = self._tokenize(word)
                with self._lock:
                    if len(words) >= self._max_words:
                        words.clear()  # a bound on memory; counting stays exact
                    words[word] = count
            total += count
        return total


MODEL_RUN = 1
"""Passages per MiniLM run. Measured on 2 cores (bench/indexing.py --sweep, real passages of
the books sorted by length): one passage a run costs the least CPU per passage, int8 and fp32
alike, 15-30% less than runs of 8-32 (a passage's activations stay in the CPU's caches; more
passages spill out of them), and wastes nothing on padding. It also makes a passage's vector
the same whatever is embedded beside it: the int8 build quantizes a run's activations with one
scale, which in a run of several passages would depend on the others."""

BACKGROUND_NICE = 10
"""How far background indexing steps back for everything else on the machine (Linux nice
value of its threads): a parse, a request's own embedding, the upstream answering on the same
cores take the CPU first; with nothing else waiting it has every core."""


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity; a container's CPU set)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


def step_back(nice: int = BACKGROUND_NICE) -> None:
    """Lower the calling thread's priority by `nice` (Linux: a thread's own nice value;
    elsewhere `setpriority` would reach the whole process, so nothing is done)."""
    if sys.platform != "linux" or nice <= 0:
        return
    try:
        own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, own + nice))
    except OSError:
        pass  # not allowed here: the background runs at the request path's priority


class DefaultEmbedder:
    """Chroma's all-MiniLM-L6-v2 (ONNX, 384 dims) on CPU, off the event loop.

    `precision` picks the build (see proxy.retrieval.minilm): `fp32`, Chroma's file as shipped;
    `int8`, a quantized build made once beside it; `auto`, int8 where the CPU has 8-bit dot
    products (VNNI, AMX), else fp32.

    Passages are embedded on `lanes` model runs side by side (default: one per usable core),
    each on one thread of its own: separate passages need no synchronisation between threads,
    where ONNX Runtime's intra-op threads meet after every operator. A request's embedding
    (`embed_documents`, `embed_query`) has lanes of its own at the normal priority; background
    indexing (`embed_in_background`) runs on lanes that step back for everything else
    (BACKGROUND_NICE), so it never stands between a request and the model.
    """

    name = "default-all-MiniLM-L6-v2"

    MAX_TOKENS = 256
    """MiniLM reads this many word pieces, [CLS] and [SEP] included; the rest is cut off."""

    def __init__(
        self,
        *,
        batch_size: int = MODEL_RUN,
        default_threshold: float = MINILM_THRESHOLD,
        precision: Precision = "auto",
        threads: int = 0,
        lanes: int = 0,
        background_nice: int = BACKGROUND_NICE,
    ):
        self.batch_size = batch_size
        self.default_threshold = default_threshold
        self.precision: Build = choose_build(precision, machine_flags())
        self.lanes = lanes or usable_cores()
        # ONNX Runtime's intra-op threads per run: the cores left to each lane.
        self.threads = threads or max(1, usable_cores() // self.lanes)
        self.background_nice = background_nice
        self._model: Any = None
        self._tokenizer: Any = None
        self._counter: WordPieceCounter | None = None
        # The session is made once and kept for the process (making one costs ~0.15 s, as much
        # as a few passages); ONNX Runtime runs one session from several threads at once.
        self._loading = threading.Lock()
        self._foreground: ThreadPoolExecutor | None = None
        self._background: ThreadPoolExecutor | None = None

    @property
    def fingerprint(self) -> str:
        # fp32 keeps the fingerprint it always had: indexes made before stay valid.
        if self.precision == "fp32":
            return self.name
        return f"{self.name}|{INT8_RECIPE}"

    def unavailable(self) -> ProxyError | None:
        """Why the model cannot embed now (its files missing or being fetched), or None: a
        few stat() calls, no network."""
        from chromadb.utils.embedding_functions import ONNXMiniLM_L6_V2

        folder = Path(ONNXMiniLM_L6_V2.DOWNLOAD_PATH) / ONNXMiniLM_L6_V2.EXTRACTED_FOLDER_NAME
        return minilm_files(folder).unavailable()

    def count_tokens(self, text: str) -> int:
        """Word pieces without [CLS]/[SEP], by MiniLM's own tokenizer (loaded without the model)."""
        if self._counter is None:
            tokenizer = _minilm_tokenizer()
            self._counter = WordPieceCounter(
                lambda word: len(tokenizer.encode(word, add_special_tokens=False).ids)
            )
        return self._counter(text)

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors of passages a request waits for: on the request path's lanes."""
        return await self._embed(texts, self._lanes(background=False))

    async def embed_in_background(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors of passages nobody waits for: on the lanes that step back."""
        return await self._embed(texts, self._lanes(background=True))

    async def embed_query(self, text: str) -> list[float]:
        loop = asyncio.get_running_loop()
        return (await loop.run_in_executor(self._lanes(False), self._embed_sync, [text]))[0]

    async def close(self) -> None:
        for pool in (self._foreground, self._background):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
        self._foreground = self._background = None
        self._model = self._tokenizer = None

    async def _embed(self, texts: Sequence[str], lanes: ThreadPoolExecutor) -> list[list[float]]:
        # Runs of several passages (embeddings.batch_size) take passages of similar lengths:
        # MiniLM pads a run to its longest.
        order = sorted(range(len(texts)), key=lambda i: self.count_tokens(texts[i]))
        runs = [order[at : at + self.batch_size] for at in range(0, len(order), self.batch_size)]
        loop = asyncio.get_running_loop()
        embedded = await asyncio.gather(
            *(
                loop.run_in_executor(lanes, self._embed_sync, [texts[i] for i in run])
                for run in runs
            )
        )
        vectors: list[list[float]] = [[] for _ in texts]
        for run, made in zip(runs, embedded, strict=True):
            for i, vector in zip(run, made, strict=True):
                vectors[i] = vector
        return vectors

    def _lanes(self, background: bool) -> ThreadPoolExecutor:
        if background:
            if self._background is None:
                self._background = ThreadPoolExecutor(
                    self.lanes,
                    thread_name_prefix="minilm-background",
                    initializer=step_back,
                    initargs=(self.background_nice,),
                )
            return self._background
        if self._foreground is None:
            self._foreground = ThreadPoolExecutor(self.lanes, thread_name_prefix="minilm")
        return self._foreground

    def _embed_sync(self, texts: list[str]) -> list[list[float]]:
        model, tokenizer = self._load()
        result: list[list[float]] = vectors_of(model, tokenizer, texts).tolist()
        return result

    def _load(self) -> tuple[Any, Any]:
        with self._loading:
            if self._model is None:
                from chromadb.utils.embedding_functions import ONNXMiniLM_L6_V2

                function = ONNXMiniLM_L6_V2()
                folder = Path(function.DOWNLOAD_PATH) / function.EXTRACTED_FOLDER_NAME
                # Fetched at start-up if at all (proxy.retrieval.minilm_files): a question
                # never waits for a download, it is told at once that the model is missing.
                minilm_files(folder).require()
                source = folder / "model.onnx"
                # Chroma pads every input to 256 tokens, so a 10-token query cost as much as
                # a full passage (9x slower measured); padding to the run's longest input
                # gives the same vectors (attention-masked pooling) for a fraction of the work.
                function.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
                tokenizer = function.tokenizer
                if self.precision == "int8":
                    self._model = self._int8_session(source, tokenizer)
                else:
                    self._model = self._session(source)
                self._tokenizer = tokenizer
            return self._model, self._tokenizer

    def _int8_session(self, source: Path, tokenizer: Any) -> Any:
        """A session of the int8 build, made first if need be (checked against fp32's vectors);
        a kept build that no longer loads is made again, once."""

        def agreement(built: Path) -> float:
            return lowest_cosine(self._session(source), self._session(built), tokenizer)

        path, kept = build_int8(source, agreement)
        if kept:
            try:
                return self._session(path)
            except Exception as error:
                log.warning("int8 embedding model unreadable: made again", error=str(error)[:300])
                path.unlink(missing_ok=True)
                path, kept = build_int8(source, agreement)
        try:
            return self._session(path)
        finally:
            if not kept:  # a private copy: the session holds the model now
                discard_private(path)

    def _session(self, path: Path) -> Any:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        # Spinning threads wait for work by burning CPU: on 2 cores shared with a parser,
        # a background indexer or llama.cpp that made a batch ~1.4x slower, and doubled the
        # CPU time per passage with 2 intra-op threads (bench/indexing.py --sweep).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.inter_op_num_threads = 1
        options.intra_op_num_threads = self.threads
        # Errors only: loading the int8 build warns once per unused constant the quantizer
        # left (a screenful on stderr at every start, harmless). Those warnings come from
        # ONNX Runtime's process-wide logger, which the session's own level does not reach.
        options.log_severity_level = 3
        onnxruntime.set_default_logger_severity(3)
        return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


MINILM_TOKENIZER = Path(__file__).with_name("data") / "all-MiniLM-L6-v2.tokenizer.json"
"""MiniLM's tokenizer, shipped with the proxy (the same bytes as in Chroma's archive): passages
are sized in its word pieces whether or not the model itself is on disk yet."""


def _minilm_tokenizer() -> Any:
    """MiniLM's tokenizer, from the file shipped with the proxy."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(MINILM_TOKENIZER))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def make_embedder(backend: str, **settings: Any) -> Embedder:
    """The embedder for `embeddings.backend` (`default` or `openai`) and its settings."""
    given = {key: value for key, value in settings.items() if value is not None}
    if backend == "default":
        # The server settings (base_url, model, ...) may be configured and stay unused here.
        return DefaultEmbedder(**{k: v for k, v in given.items() if k in _DEFAULT_SETTINGS})
    if backend == "openai":
        return OpenAIEmbedder(**given)
    raise ValueError(f"unknown embeddings backend {backend!r} (expected 'default' or 'openai')")


async def close_embedder(embedder: Embedder) -> None:
    """Release what `embedder` holds (an HTTP client pool), if anything."""
    close = getattr(embedder, "close", None)
    if close is not None:
        await close()
