"""Tests of the passage budget ported from the C# seed (passage-budget.cs)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from proxy.guard.neutralise import neutralise
from proxy.retrieval.budget import Passage, PassageBudget, PassageSelection, citation_line


def passage(source: int, rank: int, text: str) -> Passage:
    return Passage(source, rank, text, {"file": f"file{source}.pdf", "page": rank + 1})


def doubling(cut: str) -> str:
    """A guard that lengthens text, as redacting a short phrase into a longer marker does."""
    return cut.replace("!", "!!")


def cost(text: str, candidates: int) -> int:
    """Characters of a passage as the model receives it, numbered as the last candidate."""
    return len(citation_line(candidates, text))


class Recorder:
    """A character measure that remembers what it was asked to measure."""

    def __init__(self) -> None:
        self.measured: list[str] = []

    async def __call__(self, text: str) -> int:
        self.measured.append(text)
        return len(text)


def test_citation_line_is_the_retrieval_prompt_shape() -> None:
    assert citation_line(2, "some text") == 'Citation 2: "some text"'


def test_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="has to hold at least 1, not 0"):
        PassageBudget.in_characters(0)
    with pytest.raises(ValueError):
        PassageBudget(-5, Recorder())


async def test_sources_take_turns_rank_by_rank() -> None:
    a = [passage(0, rank, f"a{rank} " * 10) for rank in range(3)]
    b = [passage(1, 0, "b0 " * 10)]
    c = [passage(2, rank, f"c{rank} " * 10) for rank in range(2)]
    n = 6
    # Room for exactly four: a0, b0, c0 (rank 0 of each source), then a1 (rank 1 of the first).
    limit = sum(cost(p.text, n) for p in (a[0], b[0], c[0], a[1]))
    selection = await PassageBudget.in_characters(limit).select([a, b, c])
    assert selection == PassageSelection([a[0], a[1], b[0], c[0]], [2, 1, 1], left_out=2)


async def test_a_passage_that_does_not_fit_is_skipped_and_later_ones_get_their_chance() -> None:
    n = 3
    big, middle, small = "x" * 60, "y" * 50, "z" * 30
    limit = cost(big, n) + cost(small, n)
    sources = [[passage(0, 0, big)], [passage(1, 0, middle)], [passage(2, 0, small)]]
    selection = await PassageBudget.in_characters(limit).select(sources)
    assert [p.text for p in selection.passages] == [big, small]
    assert selection.per_source == [1, 0, 1]
    assert selection.left_out == 1


async def test_a_used_up_budget_counts_the_rest_as_left_out_without_measuring() -> None:
    texts = ["one", "two", "three", "four", "five"]
    n = len(texts)
    measure = Recorder()
    budget = PassageBudget(cost("one", n) + cost("two", n), measure)
    sources = [[passage(0, rank, text) for rank, text in enumerate(texts)]]
    selection = await budget.select(sources)
    assert [p.text for p in selection.passages] == ["one", "two"]
    assert selection.left_out == 3
    assert measure.measured == [citation_line(n, "one"), citation_line(n, "two")]


async def test_passages_are_measured_with_the_longest_header() -> None:
    measure = Recorder()
    sources = [[passage(0, rank, f"p{rank}") for rank in range(12)]]
    await PassageBudget(10_000, measure).select(sources)
    assert all(text.startswith("Citation 12: ") for text in measure.measured)


async def test_one_huge_passage_is_shortened_to_fit() -> None:
    text = "word " * 400
    selection = await PassageBudget.in_characters(300).select([[passage(0, 0, text)]])
    (kept,) = selection.passages
    assert cost(kept.text, 1) <= 300
    assert text.startswith(kept.text)
    # Cut to about chars * limit / size: here the measure is characters, so all of the budget.
    assert cost(kept.text, 1) >= 290
    assert kept.meta == {"file": "file0.pdf", "page": 1}
    assert selection.per_source == [1]
    assert selection.left_out == 0


async def test_a_shortened_passage_still_has_to_fit_into_what_is_left() -> None:
    small, huge = "s" * 50, "h" * 5_000
    limit = 200
    sources = [[passage(0, 0, small)], [passage(1, 0, huge)]]
    selection = await PassageBudget.in_characters(limit).select(sources)
    # The huge one is cut to the whole budget, then no longer fits beside the small one.
    assert [p.text for p in selection.passages] == [small]
    assert selection.left_out == 1


async def test_shortening_repeats_while_too_long_and_getting_shorter() -> None:
    # Tokens are not characters: the expensive part comes first, so one proportional cut
    # keeps too much, and the passage is shortened again.
    async def tokens(text: str) -> int:
        return len(text) + 9 * text.count("x")

    measure_calls: list[int] = []

    async def measure(text: str) -> int:
        size = await tokens(text)
        measure_calls.append(size)
        return size

    text = "x" * 50 + "y" * 950
    selection = await PassageBudget(200, measure).select([[passage(0, 0, text)]])
    (kept,) = selection.passages
    assert await tokens(citation_line(1, kept.text)) <= 200
    assert len(measure_calls) >= 4  # the original and at least three shortened versions
    assert measure_calls == sorted(measure_calls, reverse=True)


async def test_shortened_text_is_guarded_again() -> None:
    n = 1
    limit = 40
    keep = limit - cost("", n)
    # The cut ends right after `<`: the start of a control token, which the guard breaks.
    text = "a" * (keep - 1) + "<|im_start|> and more text after the cut"
    text = neutralise(text).text  # passages come already guarded...
    text = text.replace("‹", "<", 1)  # ...but the cut can make a new partial token appear
    selection = await PassageBudget.in_characters(limit).select(
        [[passage(0, 0, text)]], guard=lambda t: neutralise(t).text
    )
    (kept,) = selection.passages
    assert kept.text == "a" * (keep - 1) + "‹"

    upper = await PassageBudget.in_characters(limit).select(
        [[passage(0, 0, "b" * 100)]], guard=str.upper
    )
    assert upper.passages[0].text == "B" * keep


async def test_budget_of_one_holds_nothing_and_ends() -> None:
    sources = [[passage(0, 0, "a" * 500), passage(0, 1, "b")], [passage(1, 0, "c" * 10)]]
    selection = await PassageBudget.in_characters(1).select(sources)
    assert selection == PassageSelection([], [0, 0], left_out=3)


async def test_empty_sources() -> None:
    budget = PassageBudget.in_characters(100)
    assert await budget.select([]) == PassageSelection([], [], 0)
    only = passage(1, 0, "text")
    assert await budget.select([[], [only], []]) == PassageSelection([only], [0, 1, 0], 0)


async def test_unknown_window_counts_characters() -> None:
    async def never(text: str) -> int:
        raise AssertionError("tokens must not be counted without a known window")

    for window in (None, 0):
        budget = PassageBudget.for_window(window, never)
        assert budget.limit == PassageBudget.CHARACTERS_WITHOUT_KNOWN_WINDOW == 8_000
        text = "z" * 3_000
        selection = await budget.select([[passage(0, rank, text) for rank in range(3)]])
        assert selection.per_source == [2]
        assert selection.left_out == 1


async def test_known_window_counts_half_of_it_in_tokens() -> None:
    calls: list[str] = []

    async def count(text: str) -> int:
        calls.append(text)
        return len(text.split())

    budget = PassageBudget.for_window(4096, count)
    assert budget.limit == 2048
    assert PassageBudget.for_window(1, count).limit == 1
    await budget.select([[passage(0, 0, "a b c")]])
    assert calls == [citation_line(1, "a b c")]


async def test_token_budget_with_tiktoken_shortens_more_than_once(cl100k: Any) -> None:
    async def tokens(text: str) -> int:
        return len(cl100k.encode(text, disallowed_special=()))

    rounds: list[int] = []

    async def measure(text: str) -> int:
        size = await tokens(text)
        rounds.append(size)
        return size

    digits = random.Random(7)
    head = " ".join(digits.choice("0123456789") for _ in range(200))  # ~1 token a character
    tail = "the quick brown fox jumps over the lazy dog. " * 100  # ~0.2 tokens a character
    limit = 150
    other = passage(1, 0, "short passage of the second file")
    selection = await PassageBudget(limit, measure).select([[passage(0, 0, head + tail)], [other]])
    kept = selection.passages[0]
    assert (head + tail).startswith(kept.text)
    assert await tokens(citation_line(2, kept.text)) <= limit
    assert len(rounds) >= 3 + 1  # original, two or more cuts, and the other passage
    assert selection.per_source == [1, 0]  # the first file took the whole budget
    assert selection.left_out == 1


async def test_a_source_with_fewer_passages_does_not_end_a_round() -> None:
    # At rank 1 the first source has nothing left; the second one's rank-1 passage still goes.
    short = [passage(0, 0, "a")]
    longer = [passage(1, 0, "b"), passage(1, 1, "c")]
    selection = await PassageBudget.in_characters(1_000).select([short, longer])
    assert selection == PassageSelection([short[0], *longer], [1, 2], 0)


async def test_a_passage_exactly_the_size_of_the_budget_is_kept_whole() -> None:
    text = "w!" * 20
    measure = Recorder()
    budget = PassageBudget(cost(text, 1), measure)
    # Not even offered for cutting (which would guard it again, and this guard would change it).
    selection = await budget.select([[passage(0, 0, text)]], guard=doubling)
    assert [p.text for p in selection.passages] == [text]
    assert measure.measured == [citation_line(1, text)]  # measured once, never cut


async def test_a_used_up_budget_counts_every_other_source_as_left_out() -> None:
    sources = [[passage(n, 0, "p" * 10)] for n in range(3)]
    selection = await PassageBudget.in_characters(cost("p" * 10, 3)).select(sources)
    assert selection == PassageSelection([sources[0][0]], [1, 0, 0], left_out=2)


async def test_a_guarded_cut_that_fits_by_one_character_is_kept() -> None:
    # The first cut, guarded, is one character over its target; cut again, it fits.
    selection = await PassageBudget.in_characters(17).select(
        [[passage(0, 0, "ab!" * 20)]], guard=doubling
    )
    assert [p.text for p in selection.passages] == ["ab"]


async def test_a_budget_smaller_than_a_citation_line_holds_nothing() -> None:
    # No room even for `Citation 1: ""`: nothing is cut down to a stub.
    budget = PassageBudget.in_characters(cost("", 1) - 2)
    selection = await budget.select([[passage(0, 0, "a" * 100)]])
    assert selection == PassageSelection([], [0], left_out=1)


async def test_a_cut_the_guard_lengthens_is_cut_again_before_it_is_measured() -> None:
    # A guard can make a cut longer (a redacted phrase becomes a longer marker): the cut is
    # shortened until the guarded text fits, before the passage is measured again.
    measure = Recorder()
    limit = 60
    text = "ab!" * 100

    selection = await PassageBudget(limit, measure).select([[passage(0, 0, text)]], guard=doubling)
    (kept,) = selection.passages
    assert kept.text == doubling(kept.text.replace("!!", "!"))  # the guarded cut
    assert text.startswith(kept.text.replace("!!", "!"))
    # The first cut keeps 60 - 14 (`Citation 1: ""`) = 46 characters, 61 once guarded: 15 too
    # many. The second keeps 46 - 15 = 31, 41 once guarded: 41 + 14 = 55 fits.
    assert kept.text == doubling(text[:31]) and cost(kept.text, 1) == 55
    assert len(measure.measured) == 2  # the original, then the one cut that fits


async def test_a_cut_the_guard_makes_no_shorter_is_left_out() -> None:
    # If the guarded cut is as long as the passage was, shortening cannot help.
    text = "c" * 100

    def padding(cut: str) -> str:
        return cut.ljust(len(text), "c")

    for guard in (padding, lambda cut: cut + "c" * 1_000):
        selection = await PassageBudget.in_characters(50).select(
            [[passage(0, 0, text)]], guard=guard
        )
        assert selection == PassageSelection([], [0], left_out=1)


async def test_the_selection_says_how_much_of_the_budget_the_kept_passages_use() -> None:
    passages = [[passage(0, 0, "a" * 30), passage(0, 1, "b" * 500), passage(0, 2, "c" * 10)]]
    budget = PassageBudget(200, Recorder())
    selection = await budget.select(passages)
    assert [p.text for p in selection.passages] == ["a" * 30, "c" * 10]
    assert selection.used == cost("a" * 30, 3) + cost("c" * 10, 3)
    narrowed = budget.with_limit(50)
    assert narrowed.limit == 50
    assert (await narrowed.select(passages)).used == cost("a" * 30, 3)
