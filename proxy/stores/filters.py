"""Attribute filters of a vector store search, parsed and applied to a file's attributes (pure).

A comparison (`eq`, `ne`, `gt`, `gte`, `lt`, `lte`, `in`, `nin`) looks at one attribute; `and`
and `or` combine filters. An attribute the file does not have matches only `ne` and `nin`.
`gt`/`gte`/`lt`/`lte` compare numbers with numbers and strings with strings (ISO dates order
as strings); a boolean is never a number here.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from proxy.errors import BadRequest

Scalar = str | int | float | bool
MAX_DEPTH = 8
MAX_COMPARISONS = 64
MAX_LIST_VALUES = 1000
"""Values of one `in`/`nin` list: checked before any is looked at, like the comparisons."""
_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    "gt": operator.gt,
    "gte": operator.ge,
    "lt": operator.lt,
    "lte": operator.le,
}
COMPARISONS = frozenset({"eq", "ne", "in", "nin", *_ORDER})


@dataclass(frozen=True)
class Comparison:
    key: str
    type: str
    value: Scalar | tuple[Scalar, ...]
    # `in`/`nin`: the values as `_kind_of` keys, so a file is matched in one set lookup.
    members: frozenset[tuple[str, Scalar]] = frozenset()


@dataclass(frozen=True)
class Compound:
    type: str  # and | or
    filters: tuple[Filter, ...]


Filter = Comparison | Compound


def _bad(where: str, message: str) -> BadRequest:
    return BadRequest(f"{where}: {message}", param=where, code="invalid_filter")


def _scalar(value: Any) -> bool:
    return isinstance(value, str | bool | int | float)


def parse_filter(raw: Any, where: str = "filters") -> Filter:
    """A filter from its JSON form; a malformed one is a 400 naming the part that is wrong."""
    count = [0]
    return _parse(raw, where, 0, count)


def _parse(raw: Any, where: str, depth: int, count: list[int]) -> Filter:
    if not isinstance(raw, dict):
        raise _bad(where, "a filter must be an object")
    kind = raw.get("type")
    if kind in ("and", "or"):
        if depth >= MAX_DEPTH:
            raise _bad(where, f"filters nest at most {MAX_DEPTH} deep")
        if set(raw) - {"type", "filters"}:
            raise _bad(where, "a compound filter has only type and filters")
        parts = raw.get("filters")
        if not isinstance(parts, list) or not parts:
            raise _bad(f"{where}.filters", "must be a non-empty array of filters")
        return Compound(
            kind,
            tuple(
                _parse(part, f"{where}.filters[{i}]", depth + 1, count)
                for i, part in enumerate(parts)
            ),
        )
    if kind not in COMPARISONS:
        raise _bad(f"{where}.type", "must be eq, ne, gt, gte, lt, lte, in, nin, and or or")
    if set(raw) - {"type", "key", "value"}:
        raise _bad(where, "a comparison filter has only type, key and value")
    count[0] += 1
    if count[0] > MAX_COMPARISONS:
        raise _bad(where, f"at most {MAX_COMPARISONS} comparisons")
    key, value = raw.get("key"), raw.get("value")
    if not isinstance(key, str) or not key:
        raise _bad(f"{where}.key", "must be a non-empty string")
    if kind in ("in", "nin"):
        if not isinstance(value, list):
            raise _bad(f"{where}.value", f"{kind} needs an array of strings or numbers")
        if len(value) > MAX_LIST_VALUES:
            raise _bad(
                f"{where}.value", f"{kind} takes at most {MAX_LIST_VALUES} values ({len(value)})"
            )
        if not all(_scalar(item) for item in value):
            raise _bad(f"{where}.value", f"{kind} needs an array of strings or numbers")
        return Comparison(key, kind, tuple(value), frozenset(_kind_of(item) for item in value))
    if not _scalar(value):
        raise _bad(f"{where}.value", "must be a string, a number or a boolean")
    if kind in _ORDER and isinstance(value, bool):
        raise _bad(f"{where}.value", f"{kind} compares numbers or strings, not booleans")
    assert isinstance(value, str | bool | int | float)
    return Comparison(key, kind, value)


def _same(left: Any, right: Any) -> bool:
    """Equal and of the same kind: True is not 1, "1" is not 1."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if isinstance(left, str) or isinstance(right, str):
        return isinstance(left, str) and isinstance(right, str) and left == right
    return bool(left == right)


def _kind_of(value: Scalar) -> tuple[str, Scalar]:
    """A value with its kind, equal where `_same` says equal: True is not 1, "1" is not 1, but
    1 is 1.0 (numbers hash and compare by value)."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, str):
        return ("str", value)
    return ("number", value)


def _ordered(left: Any, right: Any) -> bool:
    if isinstance(left, bool) or isinstance(right, bool):
        return False
    both_numbers = isinstance(left, int | float) and isinstance(right, int | float)
    return both_numbers or (isinstance(left, str) and isinstance(right, str))


def matches(rule: Filter, attributes: Mapping[str, Any]) -> bool:
    """Whether a file with these attributes passes the filter."""
    if isinstance(rule, Compound):
        results = (matches(part, attributes) for part in rule.filters)
        return all(results) if rule.type == "and" else any(results)
    if rule.key not in attributes:
        return rule.type in ("ne", "nin")
    value = attributes[rule.key]
    if rule.type == "eq":
        return _same(value, rule.value)
    if rule.type == "ne":
        return not _same(value, rule.value)
    if rule.type in ("in", "nin"):
        found = _scalar(value) and _kind_of(value) in rule.members
        return found if rule.type == "in" else not found
    return _ordered(value, rule.value) and _ORDER[rule.type](value, rule.value)
