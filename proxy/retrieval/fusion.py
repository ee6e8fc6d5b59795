"""Reciprocal rank fusion: one ranking from several, by rank alone (scores are not comparable)."""

from __future__ import annotations

from collections.abc import Sequence

RRF_K = 60
"""The constant of Cormack et al. (2009): a passage's fused score is the sum of 1/(k + rank)."""


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[int]], k: int = RRF_K, weights: Sequence[float] | None = None
) -> list[tuple[int, float]]:
    """Items of all rankings (best first), by summed 1/(k + rank), each ranking's terms times
    its weight (1 when none are given); ties keep first-seen order."""
    scores: dict[int, float] = {}
    for number, ranking in enumerate(rankings):
        weight = 1.0 if weights is None else weights[number]
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
    return sorted(scores.items(), key=lambda pair: -pair[1])


POOL = 50
"""Candidates each ranking contributes before fusion: far more than any budget holds."""


def best_scored(scores: dict[int, float]) -> list[int]:
    """The `POOL` best-scored passages, best first; equal scores in document order, so that the
    same index always gives the same ranking."""
    return sorted(scores, key=lambda i: (-scores[i], i))[:POOL]


def weighted_fusion(rankings: list[tuple[list[int], float]]) -> list[tuple[int, float | None]]:
    """One ranking as it is (no fused score); several fused by reciprocal rank, each at its
    weight."""
    if len(rankings) == 1:
        return [(i, None) for i in rankings[0][0]]
    orders = [order for order, _ in rankings]
    weights = [weight for _, weight in rankings]
    return [(i, fused) for i, fused in reciprocal_rank_fusion(orders, weights=weights)]
