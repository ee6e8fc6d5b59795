"""How many values a JSON text holds, bounded from above before it is parsed (pure).

A JSON parser builds every value in one call that holds the GIL: a 16 MB body of tiny
messages holds it for a quarter of a second, and the event loop's thread waits that long even
when the parse runs in another thread. Counting first, in steps that let the loop run, keeps
such bodies from being parsed at all. Commas, `[` and `{` outside strings, and strings (keys
included), bound the values from above: every value after the first of a container follows a
comma, every container opens with a bracket.
"""

from __future__ import annotations

STEP = 1 << 20


def quick_bound(raw: bytes, start: int = 0, end: int | None = None) -> int:
    """An upper bound counting commas and brackets inside strings too (C speed, no scan)."""
    end = len(raw) if end is None else end
    quotes = raw.count(b'"', start, end)
    return sum(raw.count(mark, start, end) for mark in (b",", b"[", b"{")) + quotes // 2 + 1


def values_over(raw: bytes, limit: int) -> bool:
    """Whether `raw` may hold more than `limit` values: a quick count first, a scan that skips
    string contents only when the quick count is over (text full of commas). Either works a
    step at a time and stops as soon as the count passes `limit`."""
    total = 1
    for start in range(0, len(raw), STEP):
        total += quick_bound(raw, start, start + STEP) - 1
        if total > limit:
            return _scanned_over(raw, limit)
    return False


def _scanned_over(raw: bytes, limit: int) -> bool:
    count = 1
    at, size = 0, len(raw)
    while at < size:
        stop = min(size, at + STEP)
        quote = raw.find(b'"', at, stop)
        outside = stop if quote < 0 else quote
        count += sum(raw.count(mark, at, outside) for mark in (b",", b"[", b"{"))
        if count > limit:
            return True
        if quote < 0:
            at = stop
            continue
        at, escaped = _string_end(raw, quote, limit - count)
        count += 1 + escaped  # the string (a value or a key); each escaped quote a step
        if at < 0 or count > limit:
            return count > limit
    return False


def _string_end(raw: bytes, quote: int, budget: int) -> tuple[int, int]:
    """Just past the quote closing the string opened at `quote` (-1: none; the parser will say
    what is wrong), and how many escaped quotes were stepped over (at most `budget` + 1)."""
    at, size, escaped = quote + 1, len(raw), 0
    while at < size:
        close = raw.find(b'"', at, min(size, at + STEP))
        if close < 0:
            at = min(size, at + STEP)
            continue
        if _backslashes_before(raw, close, quote + 1) % 2 == 0:
            return close + 1, escaped
        escaped += 1
        if escaped > budget:
            return close + 1, escaped
        at = close + 1
    return -1, escaped


def _backslashes_before(raw: bytes, end: int, floor: int) -> int:
    """The backslashes right before `end` (not before `floor`), counted a window at a time."""
    count, high = 0, end
    while high > floor:
        low = max(floor, high - 4096)
        window = raw[low:high]
        kept = len(window.rstrip(b"\\"))
        count += len(window) - kept
        if kept:
            return count
        high = low
    return count
