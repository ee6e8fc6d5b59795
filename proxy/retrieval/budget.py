"""The passage budget: which retrieved passages fit into the model's context, and how many not."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Passage", "PassageBudget", "PassageSelection", "citation_line"]

Measure = Callable[[str], Awaitable[int]]
"""Measures a text in the unit of a budget, e.g. in the upstream model's tokens."""


def citation_line(number: int, text: str) -> str:
    """A passage as the retrieval prompt shows it to the model."""
    return f'Citation {number}: "{text}"'


def _unchanged(text: str) -> str:
    return text


@dataclass(frozen=True)
class Passage:
    """One retrieved passage: its file (`source`), its rank there (0 = best) and its text."""

    source: int
    rank: int
    text: str
    meta: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """File name, page, score: whatever the citation needs; the budget does not read it."""


@dataclass(frozen=True)
class PassageSelection:
    """The passages that fit, grouped by source in rank order; how many per source; how many not."""

    passages: list[Passage]
    per_source: list[int]
    left_out: int
    used: int = field(default=0, compare=False)  # of the budget, by the passages kept


class PassageBudget:
    """How much room the passages may take in a request, and which of them fit into it.

    Passages are measured as the model receives them: after the injection filter, which may
    change their length, and as a citation line with the longest number they could get, since
    which number a passage gets depends on which other passages fit.
    """

    SHARE_OF_CONTEXT_WINDOW = 0.5
    """The rest of a known window stays for the conversation, the instructions and the answer."""

    CHARACTERS_WITHOUT_KNOWN_WINDOW = 8_000
    """With no known window, nothing can be counted in tokens. 8,000 characters is about 2,000
    tokens of English: half of a 4,096-token window, the smallest window llama-server is still
    commonly run with, and about what the seed's one page of semantic search hands the model."""

    def __init__(self, limit: int, measure: Measure) -> None:
        if limit < 1:
            raise ValueError(f"a passage budget has to hold at least 1, not {limit}")
        self.limit = limit
        self._measure = measure

    def with_limit(self, limit: int) -> PassageBudget:
        """The same measure with another limit (room kept back for something else)."""
        return PassageBudget(limit, self._measure)

    @classmethod
    def in_characters(cls, limit: int) -> PassageBudget:
        """A budget that counts characters."""

        async def characters(text: str) -> int:
            return len(text)

        return cls(limit, characters)

    @classmethod
    def for_window(
        cls, context_window: int | None, count_tokens: Callable[[str], Awaitable[int]]
    ) -> PassageBudget:
        """Half of a known context window in the model's tokens, else a number of characters."""
        if context_window is None or context_window < 1:
            return cls.in_characters(cls.CHARACTERS_WITHOUT_KNOWN_WINDOW)
        return cls(max(1, int(context_window * cls.SHARE_OF_CONTEXT_WINDOW)), count_tokens)

    async def select(
        self,
        passages_by_source: Sequence[Sequence[Passage]],
        guard: Callable[[str], str] = _unchanged,
    ) -> PassageSelection:
        """Select the passages that fit: sources take turns, rank by rank.

        The best passage of each source comes before the second best of any, so that a source
        with many long passages cannot crowd out the others. A passage that does not fit into
        what is left is skipped and later ones still get their chance: there is no further page
        that could bring it later. A passage longer than the whole budget is shortened (and
        guarded again) until it fits or stops getting shorter. `passages_by_source` holds
        already guarded passages, each source in rank order.
        """
        candidates = sum(len(passages) for passages in passages_by_source)
        most = max((len(passages) for passages in passages_by_source), default=0)
        selected: list[list[Passage]] = [[] for _ in passages_by_source]
        remaining = self.limit
        left_out = 0

        for rank in range(most):
            for source, passages in enumerate(passages_by_source):
                if rank >= len(passages):
                    continue
                # A budget that is used up holds nothing more, so there is nothing to measure.
                if remaining == 0:
                    left_out += 1
                    continue
                passage = passages[rank]
                size = await self._measure_as_received(passage.text, candidates)
                while size > self.limit:
                    shorter = await self._shorten(passage, size, candidates, guard)
                    if shorter is None:
                        break
                    passage = shorter
                    size = await self._measure_as_received(passage.text, candidates)
                if size > remaining:
                    left_out += 1
                    continue
                selected[source].append(passage)
                remaining -= size

        return PassageSelection(
            passages=[passage for passages in selected for passage in passages],
            per_source=[len(passages) for passages in selected],
            left_out=left_out,
            used=self.limit - remaining,
        )

    async def _measure_as_received(self, text: str, candidates: int) -> int:
        return await self._measure(citation_line(candidates, text))

    async def _shorten(
        self, passage: Passage, size: int, candidates: int, guard: Callable[[str], str]
    ) -> Passage | None:
        """Shorten a passage longer than the whole budget by about as much as it exceeds it.

        The budget may count tokens while a passage is cut in characters. Both grow roughly in
        proportion, so the passage keeps the share of its characters that the budget holds of
        its size; where the proportion is off, the caller measures again and shortens again.
        None when nothing is left to cut, i.e. the passage would not get any shorter or empty.
        """
        characters = len(citation_line(candidates, passage.text))
        target = characters * self.limit // size
        overhead = len(citation_line(candidates, ""))
        keep = max(0, target - overhead)
        while True:
            # Cutting can split a neutralised token or an emoji sequence, or leave the start of
            # a token at the end: the guard has to see the text as it will be sent.
            text = guard(passage.text[:keep])
            excess = len(text) + overhead - target
            if excess <= 0 or keep == 0:
                break
            keep = max(0, keep - excess)
        if not text.strip() or len(text) + overhead >= characters:
            return None
        return dataclasses.replace(passage, text=text)
