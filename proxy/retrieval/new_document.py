"""A document's scores by meaning for a question: from its complete index or, for a document new
to the index, from its best candidates or from its whole embedded before the answer."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from itertools import zip_longest

import numpy as np
import structlog

from proxy.documents.model import ParsedDocument
from proxy.retrieval.fusion import POOL
from proxy.retrieval.indexing import STORE_DOWN, Indexer, Vectors
from proxy.retrieval.passages import DocumentPassages
from proxy.retrieval.space import Scorer, Space
from proxy.tasks import cancel_and_wait

log = structlog.get_logger(__name__)

STATUS_EVERY_S = 1.0
OPENING_PASSAGES = 3
"""A new document's first passages are always among its first question's candidates."""
CANDIDATE_S = 1.0
MOST_CANDIDATES = 64
"""A new document's question ranks by meaning as many of its lexical candidates as take about a
second to embed, at least `new_document_candidates`, at most 64: with MiniLM on two busy
cores ~25, idle ~64; with e5, 16. More candidates ranked by meaning bring an answer the words
rank 20th-50th into the fused ranking (docs/retrieval.md)."""
CHARS_PER_TOKEN = 4
"""About as many characters as a word piece or a cl100k token holds in English prose."""
PREVIEW_TOKENS = 128
"""A new document's candidates are ranked by the vectors of their first 128 tokens: half the
cost of whole passages, for the same hits on the eval (docs/retrieval.md)."""

COMPLETE = "complete"
WHOLE_NOW = "whole before the answer"
PARTLY = "in part, the rest in the background"
BY_WORDS = "by its words"
INDEXING = (COMPLETE, WHOLE_NOW, PARTLY, BY_WORDS)
"""How a document's passages were ranked by meaning for a question: from an index complete
before it, embedded whole while it waited (a small document), from its candidates with the
rest embedded in the background (a large one), or not at all (a language not embedded)."""

Status = Callable[[str], None]


@dataclass(frozen=True)
class NewDocuments:
    """How a document not yet indexed in full is ranked by meaning for a question: embedded
    whole first when that is cheap, else from its best candidates while the rest is embedded
    in the background (the proxy's settings, read from the Retriever at each search)."""

    new_document_candidates: int = 16
    """At least this many lexical candidates are ranked by meaning; a document no larger is
    embedded whole."""
    candidate_s: float = 0.0
    """As many candidates as the embedder embeds in this long (0: `new_document_candidates`
    exactly)."""
    whole_document_s: float = 0.0
    """A document whose embedding would take at most this long is embedded whole first."""
    background: bool = True
    """False: a new document is ranked from its candidates alone, nothing embedded whole nor
    in the background (benchmarks of the first question)."""

    async def scorer(
        self,
        space: Space,
        document: ParsedDocument,
        passages: DocumentPassages,
        queries: list[str],
        status: Status,
        also: Sequence[int] = (),
    ) -> tuple[Scorer, int, str]:
        """A scorer giving passages' cosines in the space for a query vector, the index's
        readiness, and how the document was ranked by meaning (INDEXING)."""
        vectors = await space.index.vectors(document.sha256, space.settings)
        how = COMPLETE
        if vectors is None:
            progress = space.indexer.progress(passages)
            line = lambda: f"Indexing file {document.name}... ({progress.percent}%)"  # noqa: E731
            async with _ticking(status, line):
                if not self.background:
                    scorer = await self._candidates(space.indexer, passages, queries, also)
                    return scorer, progress.percent, PARTLY
                small = len(passages.chunks) <= self.new_document_candidates
                if not (small or self.whole_now(space, passages)):
                    scorer = await self._candidates(space.indexer, passages, queries, also)
                    # The candidates measured the embedder's pace if nothing had before.
                    if not self.whole_now(space, passages):
                        space.indexer.complete_later(document, passages)
                        return scorer, progress.percent, PARTLY
                try:
                    await space.indexer.complete_now(document, passages)
                except STORE_DOWN:
                    # The store took no more: the background stores what was embedded (kept,
                    # not embedded again) and the rest once the store is back.
                    space.indexer.complete_later(document, passages)
                    raise
                vectors = await space.index.vectors(document.sha256, space.settings)
                how = WHOLE_NOW
        if vectors is None:
            raise RuntimeError(f"{document.name} was indexed but its vectors are missing")
        rows = [int(key.rsplit(":", 1)[1]) for key in vectors.ids]

        def score_all(query_vector: list[float]) -> dict[int, float]:
            scores = vectors.scores(query_vector)
            return {row: float(score) for row, score in zip(rows, scores, strict=True)}

        return score_all, 100, how

    def candidates_for(self, indexer: Indexer) -> int:
        """How many lexical candidates a new document's question ranks by meaning: as many as
        the embedder ranks in about `candidate_s` at its measured pace (heads of PREVIEW_TOKENS,
        side by side on its lanes), within new_document_candidates and MOST_CANDIDATES."""
        least = self.new_document_candidates
        pace = indexer.pace.seconds_per_char
        if pace is None or not self.candidate_s:
            return least
        affordable = int(self.candidate_s / (pace * PREVIEW_TOKENS * CHARS_PER_TOKEN))
        return max(least, min(MOST_CANDIDATES, affordable))

    def whole_now(self, space: Space, passages: DocumentPassages) -> bool:
        """Whether embedding the rest of a document before answering costs no more than
        `whole_document_s`, at the pace the embedder was measured at (docs/retrieval.md).
        Never where proxies share the index (leases): the one holding the document's lease
        indexes it, in the background, and the others would embed it again."""
        if space.indexer.leases is not None or self.whole_document_s <= 0:
            return False
        cost = space.indexer.whole_now_costs(passages)
        log.debug("whole document now", file=passages.name, estimate_s=cost)
        return cost is not None and cost <= self.whole_document_s

    async def _candidates(
        self,
        indexer: Indexer,
        passages: DocumentPassages,
        queries: list[str],
        also: Sequence[int] = (),
    ) -> Scorer:
        """A new document: dense scores for its best lexical candidates and whatever passages
        were embedded already, while the rest is indexed in the background."""
        count = self.candidates_for(indexer)
        # One search per query, deep enough for the candidates and for the background's order.
        searched = [passages.lexical.ranked(text, max(POOL, count))[0] for text in queries]
        found = [hits[:count] for hits in searched]
        # The queries' candidates take turns: a translation's best come before the tail of
        # the question's own.
        lexical = list(
            dict.fromkeys(i for rank in zip_longest(*found) for i in rank if i is not None)
        )
        wanted = first_question_candidates(lexical, len(passages.chunks), count)
        # The place the question names, if any: its passages are ranked by meaning too.
        wanted = list(dict.fromkeys([*wanted, *also]))
        # The background embeds what lies around this question's candidates and lexical hits
        # first: the next question on the same part finds them with dense scores.
        hits = [i for ranked in searched for i in ranked[:POOL]]
        indexer.prefer(passages, [*wanted, *hits])
        made: Vectors = dict(indexer.progress(passages).vectors)
        made.update(await indexer.previews_for(passages, wanted, PREVIEW_TOKENS))

        def score_made(query_vector: list[float]) -> dict[int, float]:
            if not made:
                return {}
            keys = list(made)
            matrix = np.asarray([made[k] for k in keys], dtype=np.float32)
            matrix /= np.clip(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12, None)
            vector = np.asarray(query_vector, dtype=np.float32)
            scores = matrix @ (vector / max(float(np.linalg.norm(vector)), 1e-12))
            return {key: float(score) for key, score in zip(keys, scores, strict=True)}

        return score_made


def first_question_candidates(lexical: list[int], total: int, count: int) -> list[int]:
    """Which passages of a new document get a dense score for its first question.

    The best lexical matches first; then the document's opening passages (a title, an abstract,
    an introduction: what a question like "what is this about?" needs, and it shares no word
    with them); then passages spread evenly through the document, so that a question whose words
    match nothing still has `count` candidates to be ranked among.
    """
    picked = dict.fromkeys(lexical[:count])
    for index in range(min(OPENING_PASSAGES, total)):
        picked.setdefault(index)
    for slot in range(count):
        if len(picked) >= count:
            break
        picked.setdefault(slot * total // count)
    return list(picked)


@contextlib.asynccontextmanager
async def _ticking(status: Status, line: Callable[[], str]) -> AsyncIterator[None]:
    """`line()` as a status now, every second while the block runs, and when it ends."""
    status(line())

    async def tick() -> None:
        while True:
            await asyncio.sleep(STATUS_EVERY_S)
            status(line())

    task = asyncio.create_task(tick())
    try:
        yield
    finally:
        await cancel_and_wait(task)
        status(line())
