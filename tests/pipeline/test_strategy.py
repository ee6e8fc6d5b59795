"""choose_strategy and its arithmetic, with plain numbers (docs/strategy.md)."""

from __future__ import annotations

import pytest

from proxy.pipeline.strategy import (
    INJECT,
    NONE,
    RETRIEVAL,
    available_tokens,
    choose_strategy,
    measure_context,
    route,
)


def test_measure_context() -> None:
    measure = measure_context(1024, 4096)
    assert measure.total_tokens_in_context == 1024
    assert measure.model_context_length == 4096
    assert measure.model_remaining_context_length == 3072
    assert measure.context_occupied_percent == 25.0


def test_a_window_of_zero_is_full() -> None:
    measure = measure_context(0, 0)
    assert measure.context_occupied_percent == 100.0
    assert available_tokens(measure) == 0


def test_available_is_floor_of_formula() -> None:
    # floor(3072 * 0.7 * (1 - 0.25)) = floor(1612.8) = 1612
    assert available_tokens(measure_context(1024, 4096)) == 1612


def test_exactly_at_the_limit_injects() -> None:
    measure = measure_context(1024, 4096)
    assert choose_strategy(1600, 12, measure) == INJECT
    assert choose_strategy(1600, 13, measure) == RETRIEVAL


def test_zero_remaining_retrieves() -> None:
    measure = measure_context(4096, 4096)
    assert available_tokens(measure) == 0
    assert choose_strategy(0, 1, measure) == RETRIEVAL
    assert choose_strategy(0, 0, measure) == INJECT


def test_overfull_context_counts_as_nothing_remaining() -> None:
    measure = measure_context(5000, 4096)
    assert measure.model_remaining_context_length == 0
    assert measure.context_occupied_percent == 100.0
    assert choose_strategy(1, 0, measure) == RETRIEVAL


def test_unknown_window_retrieves() -> None:
    assert choose_strategy(1, 1, None) == RETRIEVAL


@pytest.mark.parametrize(
    ("new", "old", "expected"),
    [(True, False, None), (True, True, None), (False, True, RETRIEVAL), (False, False, NONE)],
)
def test_route(new: bool, old: bool, expected: str | None) -> None:
    assert route(new, old) == expected
