"""Reciprocal rank fusion: rank alone decides, agreement wins, ties keep first-seen order."""

from __future__ import annotations

from proxy.retrieval.fusion import RRF_K, reciprocal_rank_fusion


def test_an_item_both_rankings_like_beats_one_only_one_ranks_first() -> None:
    fused = reciprocal_rank_fusion([[1, 2, 3], [4, 2, 5]])
    assert [item for item, _ in fused][:2] == [2, 1]
    assert dict(fused)[2] == 1 / (RRF_K + 2) + 1 / (RRF_K + 2)


def test_scores_are_by_rank_not_by_the_rankings_own_scores() -> None:
    fused = dict(reciprocal_rank_fusion([[7], [8]]))
    assert fused[7] == fused[8] == 1 / (RRF_K + 1)


def test_ties_keep_first_seen_order_and_every_item_appears_once() -> None:
    fused = reciprocal_rank_fusion([[1, 2], [2, 1], [3]])
    assert [item for item, _ in fused] == [1, 2, 3]
    assert reciprocal_rank_fusion([]) == []
