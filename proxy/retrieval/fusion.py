"""Reciprocal rank fusion: one ranking from several, by rank alone (scores are not comparable)."""

from __future__ import annotations

from collections.abc import Sequence

RRF_K = 60
"""The constant of Cormack et al. (2009): a passage's fused score is the sum of 1/(k + rank)."""


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[int]], k: int = RRF_K
) -> list[tuple[int, float]]:
    """Items of all rankings (best first), by summed 1/(k + rank); ties keep first-seen order."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda pair: -pair[1])
