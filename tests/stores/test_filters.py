"""Attribute filters of vector store searches: parsed with errors naming the part, applied
to a file's attributes (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.errors import BadRequest
from proxy.stores.filters import MAX_LIST_VALUES, matches, parse_filter

ATTRIBUTES = {"author": "ann", "year": 2021, "draft": False, "date": "2024-03-01", "score": 4.5}


def passes(rule: dict[str, Any], attributes: dict[str, Any] = ATTRIBUTES) -> bool:
    return matches(parse_filter(rule), attributes)


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        ({"type": "eq", "key": "author", "value": "ann"}, True),
        ({"type": "eq", "key": "author", "value": "bob"}, False),
        ({"type": "ne", "key": "author", "value": "bob"}, True),
        ({"type": "gt", "key": "year", "value": 2020}, True),
        ({"type": "gt", "key": "year", "value": 2021}, False),
        ({"type": "gte", "key": "year", "value": 2021}, True),
        ({"type": "lt", "key": "score", "value": 5}, True),
        ({"type": "lte", "key": "score", "value": 4.5}, True),
        ({"type": "lt", "key": "score", "value": 4.5}, False),
        ({"type": "gte", "key": "date", "value": "2024-01-01"}, True),  # ISO dates as strings
        ({"type": "in", "key": "author", "value": ["bob", "ann"]}, True),
        ({"type": "nin", "key": "author", "value": ["bob", "ann"]}, False),
        ({"type": "in", "key": "year", "value": [2020, 2021]}, True),
        ({"type": "eq", "key": "draft", "value": False}, True),
    ],
)
def test_comparisons(rule: dict[str, Any], expected: bool) -> None:
    assert passes(rule) is expected


def test_kinds_never_mix() -> None:
    # A boolean is no number, a number is no string: 0 is not False, "2021" is not 2021.
    assert not passes({"type": "eq", "key": "draft", "value": 0})
    assert not passes({"type": "eq", "key": "year", "value": "2021"})
    assert not passes({"type": "gt", "key": "author", "value": 1})
    assert not passes({"type": "in", "key": "draft", "value": [0, 1]})


def test_a_missing_attribute_matches_only_the_negations() -> None:
    for kind, value in [("eq", "x"), ("gt", 1), ("in", ["x"])]:
        assert not passes({"type": kind, "key": "missing", "value": value})
    assert passes({"type": "ne", "key": "missing", "value": "x"})
    assert passes({"type": "nin", "key": "missing", "value": ["x"]})


def test_compound_filters_nest() -> None:
    rule = {
        "type": "and",
        "filters": [
            {"type": "eq", "key": "author", "value": "ann"},
            {
                "type": "or",
                "filters": [
                    {"type": "gt", "key": "year", "value": 2022},
                    {"type": "eq", "key": "draft", "value": False},
                ],
            },
        ],
    }
    assert passes(rule)
    assert not passes(rule, {**ATTRIBUTES, "draft": True})
    assert not passes(rule, {**ATTRIBUTES, "author": "bob"})


@pytest.mark.parametrize(
    ("rule", "param"),
    [
        ("author = ann", "filters"),
        ({"type": "like", "key": "a", "value": "b"}, "filters.type"),
        ({"type": "eq", "key": "", "value": "b"}, "filters.key"),
        ({"type": "eq", "key": "a", "value": {"x": 1}}, "filters.value"),
        ({"type": "in", "key": "a", "value": "b"}, "filters.value"),
        ({"type": "gt", "key": "a", "value": True}, "filters.value"),
        ({"type": "eq", "key": "a", "value": "b", "extra": 1}, "filters"),
        ({"type": "and", "filters": []}, "filters.filters"),
        ({"type": "or", "filters": [{"type": "eq", "key": "a"}]}, "filters.filters[0].value"),
    ],
)
def test_malformed_filters_name_the_part(rule: Any, param: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_filter(rule)
    assert caught.value.param == param
    assert caught.value.code == "invalid_filter"


def test_filters_are_bounded() -> None:
    deep: dict[str, Any] = {"type": "eq", "key": "a", "value": 1}
    for _ in range(10):
        deep = {"type": "and", "filters": [deep]}
    with pytest.raises(BadRequest, match="nest"):
        parse_filter(deep)
    wide = {"type": "or", "filters": [{"type": "eq", "key": "a", "value": i} for i in range(65)]}
    with pytest.raises(BadRequest, match="comparisons"):
        parse_filter(wide)
    # `in` and `nin` lists are capped like the comparisons, before a value is looked at.
    for kind in ("in", "nin"):
        at_cap = {"type": kind, "key": "year", "value": [*range(MAX_LIST_VALUES - 1), 2021]}
        assert passes(at_cap) is (kind == "in")
        too_long = {"type": kind, "key": "a", "value": [object()] * (MAX_LIST_VALUES + 1)}
        with pytest.raises(BadRequest, match=f"at most {MAX_LIST_VALUES} values") as caught:
            parse_filter(too_long)
        assert caught.value.param == "filters.value"


def test_list_membership_keeps_the_kinds_apart() -> None:
    # One set lookup per file, with the same rules as eq: 1 is 1.0, never True or "1".
    assert passes({"type": "in", "key": "year", "value": [2021.0]})
    assert passes({"type": "in", "key": "score", "value": [4.5, "x"]})
    assert not passes({"type": "in", "key": "year", "value": ["2021", True]})
    assert not passes({"type": "in", "key": "draft", "value": [0, "False"]})
    assert passes({"type": "in", "key": "draft", "value": [False]})
    assert passes({"type": "nin", "key": "draft", "value": [0]})
    assert not passes({"type": "in", "key": "odd", "value": ["x"]}, {"odd": ["x"]})
