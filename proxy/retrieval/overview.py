"""Questions about a document as a whole ("what does the report conclude?"): told apart from
questions about something in it, and answered with the passages a reader turns to for them."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence

import numpy as np

from proxy.retrieval.chunking import Chunk
from proxy.retrieval.headings import SEPARATOR

OVERVIEW_QUESTIONS = (
    "What is this document about?",
    "Summarize this document.",
    "What does this document conclude?",
    "What are the main points of this document?",
    "Give me an overview of this document.",
    "What are the key findings?",
    # MiniLM reads German too (poorly, but paraphrases of these score 0.58-0.69).
    "Worum geht es in diesem Dokument?",
    "Fasse dieses Dokument zusammen.",
    "Was ist das Fazit dieses Dokuments?",
)
"""What such questions look like. No passage is close to them in meaning (an embedding model
places "Conclusions: this paper described..." near its topic, not near "what does it conclude"),
so a question close to one of them is routed by its form instead."""

MINILM_OVERVIEW_AFFINITY = 0.55
"""The cosine to the nearest of OVERVIEW_QUESTIONS at which MiniLM's question is one of them.
Measured (docs/retrieval.md): written questions about a whole document score 0.56-0.77, the
evaluation's 91 tuning questions at most 0.47 (the English ones 0.36), "What is the conclusion
of the trial in chapter 3?" 0.52; German ones 0.58-0.69 against at most 0.54 ("Worum geht es im
dritten Kapitel?"). MiniLM does not read other languages: their questions score low, and are
routed through their translation (a document's in a language it reads) or by e5 (below)."""

E5_OVERVIEW_AFFINITY = 0.84
"""The same for multilingual-e5-small's raw cosine, for a question in a language MiniLM does not
read (Russian). e5 sits high for any pair: its scale is not MiniLM's. Measured on 2026-12-02
(docs/retrieval.md): five Russian questions about a whole document 0.85-0.90, four about
something in one 0.80-0.83 ("О чём говорится в третьей главе?" 0.83): 0.84 between them. Then
checked on questions written afterwards: 4 of 8 about a whole document reach it (0.87-0.89; the
rest 0.80-0.83), none of 5 about something in one (at most 0.84: "Чем закончилась история?"
0.837), nor any of the tuning half's 13 Russian questions (at most 0.80). A question not routed is
ranked as any other."""

OPENING_PASSAGES = 1
"""A document's first passage: its title, abstract or opening lines."""

MOST_SUMMARY_SECTIONS = 2

_SUMMARY_WORDS = (
    # English, German, French, Spanish, Italian, Portuguese, Dutch, Russian, Scandinavian.
    r"abstract|summary|executive summary|conclusions?|concluding remarks|in conclusion"
    r"|discussion and conclusions?|summary and conclusions?|conclusions? and future work"
    r"|zusammenfassung|fazit|schlussfolgerungen?|schluss(?:bemerkungen)?|ausblick"
    r"|résumé|resume|conclusions? générales?|synthèse"
    r"|resumen|conclusi[oó]n(?:es)?|riassunto|conclusioni|sommario"
    r"|resumo|conclus[aã]o|conclusões|samenvatting|conclusies?"
    r"|аннотация|резюме|заключение|выводы|итоги"
    r"|sammanfattning|slutsatser?|sammendrag|konklusion(?:er)?|sammenfatning"
)
_NUMBERING = r"(?:(?:\d+(?:\.\d+)*|[ivxlc]+|[a-z])[.):]?\s+)?"
_SUMMARY_HEADING = re.compile(
    rf"^\s*(?:chapter\s+\d+\s*[:.]?\s*)?{_NUMBERING}(?:{_SUMMARY_WORDS})\s*[.:]?\s*$",
    re.IGNORECASE,
)


def is_overview(affinities: Sequence[float], least: float | None) -> bool:
    """Whether a question is about its document as a whole: its cosine (or its translation's)
    to the nearest overview question reaches `least` (None: never)."""
    return least is not None and any(score >= least for score in affinities)


Embed = Callable[[str], Awaitable[list[float]]]
"""A text's vector as the embedder makes a query's."""


class OverviewRouter:
    """Tells a question about its document as a whole by its cosine to the nearest overview
    question; those are embedded once, by the first question's embedder."""

    def __init__(self, least: float) -> None:
        self.least = least
        self._known: np.ndarray | None = None

    async def routes(self, texts: Sequence[str], embed: Embed) -> bool:
        """Whether the question (or its translation: `texts`) is an overview question."""
        return is_overview(await self.affinities(texts, embed), self.least)

    async def affinities(self, texts: Sequence[str], embed: Embed) -> list[float]:
        """Each text's cosine to the nearest overview question."""
        if not texts:
            return []
        if self._known is None:
            self._known = np.array([_unit(await embed(text)) for text in OVERVIEW_QUESTIONS])
        return [float((self._known @ _unit(await embed(text))).max()) for text in texts]


def _unit(vector: list[float]) -> np.ndarray:
    array = np.asarray(vector, dtype=np.float32)
    return array / max(float(np.linalg.norm(array)), 1e-12)


def is_summary_heading(line: str) -> bool:
    """A heading that names a document's summary or conclusion ("7. Conclusions", "Fazit")."""
    return len(line) <= 60 and _SUMMARY_HEADING.match(line) is not None


def overview_passages(chunks: Sequence[Chunk]) -> list[int]:
    """The passages a reader turns to for a document as a whole, in the document's order: its
    opening, and where each of its first summary or conclusion sections starts."""
    chosen = list(range(min(OPENING_PASSAGES, len(chunks))))
    seen_sections: set[str] = set()
    summaries: list[int] = []
    for i, chunk in enumerate(chunks):
        if len(summaries) == MOST_SUMMARY_SECTIONS:
            break
        inner = chunk.section.rsplit(SEPARATOR, 1)[-1].strip() if chunk.section else ""
        first = next((line for line in chunk.text.splitlines() if line.strip()), "")
        if is_summary_heading(first):
            key = first.strip().casefold()
        elif inner and is_summary_heading(inner):
            key = inner.casefold()
        else:
            continue
        if key not in seen_sections:
            seen_sections.add(key)
            summaries.append(i)
    return sorted(set(chosen) | set(summaries))
