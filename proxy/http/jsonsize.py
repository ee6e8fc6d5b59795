"""How many values a JSON text holds, bounded from above before it is parsed (pure).

A JSON parser builds every value in one call that holds the GIL: a 16 MB body of tiny
messages holds it for a quarter of a second, and the event loop's thread waits that long even
when the parse runs in another thread. Counting first, in steps that let the loop run, keeps
such bodies from being parsed at all. Commas, `[` and `{` outside strings, and strings (keys
included), bound the values from above: every value after the first of a container follows a
comma, every container opens with a bracket.
"""

from __future__ import annotations

import re
import sys
from typing import Any

STEP = 1 << 20
# Items `size_over` looks at before it calls a value big: a 4,096-message chat has about 12,000.
SIZE_ITEMS = 20_000


def quick_bound(raw: bytes) -> int:
    """An upper bound counting commas, brackets and quotes inside strings too (C speed)."""
    return _marks(raw, 0, len(raw)) + raw.count(b'"') // 2 + 1


def _marks(raw: bytes, start: int, end: int) -> int:
    return sum(raw.count(mark, start, end) for mark in (b",", b"[", b"{"))


def values_over(raw: bytes, limit: int) -> bool:
    """Whether `raw` may hold more than `limit` values: a quick count first, a scan that skips
    string contents only when the quick count is over (text full of commas). Either works a
    step at a time and stops as soon as the count passes `limit`."""
    marks = quotes = 0
    for start in range(0, len(raw), STEP):
        marks += _marks(raw, start, start + STEP)
        quotes += raw.count(b'"', start, start + STEP)
        if 1 + marks + quotes // 2 > limit:
            return _scanned_over(raw, limit)
    return False


def _scanned_over(raw: bytes, limit: int) -> bool:
    count = 1
    at, size = 0, len(raw)
    while at < size:
        stop = min(size, at + STEP)
        quote = raw.find(b'"', at, stop)
        outside = stop if quote < 0 else quote
        count += _marks(raw, at, outside)
        if count > limit:
            return True
        if quote < 0:
            at = stop
            continue
        at = _string_end(raw, quote)
        count += 1  # the string: a value or a key
        if at < 0:
            return count > limit
    return count > limit


# A string's contents up to its closing quote: runs of plain bytes, and escapes (`\"` among
# them), possessively (no backtracking).
_CONTENTS = re.compile(rb'(?:[^"\\]++|\\.)*+', re.DOTALL)


def _string_end(raw: bytes, quote: int) -> int:
    """Just past the quote closing the string opened at `quote` (-1: none; the parser will say
    what is wrong), matched a step at a time."""
    at, size = quote + 1, len(raw)
    while at < size:
        match = _CONTENTS.match(raw, at, min(size, at + STEP))
        end = match.end() if match else at
        if end < size and raw[end] == 0x22:  # the closing quote
            return end + 1
        if end == at:  # a lone backslash at the end of the step: take it with the next
            end = at + 1 if raw[at] != 0x5C else at + 2
        at = end
    return -1


def size_over(value: Any, limit: int, max_items: int = SIZE_ITEMS) -> bool:
    """Whether `value` written as JSON may take more than `limit` characters, every field
    counted: strings by their length, other values by a few characters each. A value of more
    than `max_items` items counts as over rather than being walked to the end (the walk runs
    on the event loop), and the walk stops as soon as the count passes `limit`."""
    size = 0
    items = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            size += len(item) + 3
        elif isinstance(item, dict):
            items += len(item)
            if items > max_items:
                return True
            size += 2 + sum(len(key) + 4 if isinstance(key, str) else 24 for key in item)
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            items += len(item)
            if items > max_items:
                return True
            size += 2
            stack.extend(item)
        else:
            size += 24  # a number, true, false, null: at most a few dozen characters
        if size > limit:
            return True
    return False


def held_bytes(value: Any) -> int:
    """Memory the parsed `value` holds, at most: `sys.getsizeof` of every object, keys included
    (an object met twice, such as a key orjson reuses, counted each time), but for the ones
    Python never makes twice (None, booleans, -5 to 256), which cost only their container's
    pointer (counted in the container's size)."""
    size = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if item is None or isinstance(item, bool) or (type(item) is int and -5 <= item <= 256):
            continue
        size += sys.getsizeof(item)
        if isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return size
