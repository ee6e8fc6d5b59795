"""JSON read and written at a cost that grows with its length only, whoever wrote it.

orjson reads almost everything, fast; what it refuses (NaN, UTF-16, nesting past 1,024 levels,
lone surrogates, numbers past a double's range, invalid JSON) goes to the json module, which
would make an integer literal an exact int at a cost growing with the square of its digits
(86 µs for 4,299 digits, the most Python converts: 14,000 of them held the GIL 1.2 s) and write
it back the same way (3.4 s). So numbers are read here as orjson reads them — integers within 64
bits exactly, longer ones as floats, one past a double's range refused — and what is read is
always what orjson can write again.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from typing import Any

import orjson

# Texts above this size are read in a thread (`loads_soon`): orjson reads a megabyte in about a
# millisecond, the json module in a few.
OFF_LOOP_BYTES = 1 << 20
INT64_MIN = -(1 << 63)
UINT64_MAX = (1 << 64) - 1
_SURROGATE = re.compile("[\ud800-\udfff]")
STEP = 1 << 20  # characters searched at once


class JsonRefused(ValueError):
    """Valid JSON the proxy does not read: its message says what and why."""


class NumberOutOfRange(JsonRefused):
    def __init__(self, literal: str) -> None:
        shown = literal if len(literal) <= 24 else f"{literal[:12]}… ({len(literal):,} characters)"
        super().__init__(
            f"the number {shown} is beyond what a 64-bit float holds (±1.8e308);"
            " JSON numbers must stay within it"
        )


class LoneSurrogate(JsonRefused):
    def __init__(self) -> None:
        super().__init__(
            "a string holds half of a UTF-16 surrogate pair (such as \\ud800 alone),"
            " which is not a character: send text as valid Unicode"
        )


class NestedTooDeeply(JsonRefused):
    def __init__(self) -> None:
        super().__init__("the JSON is nested too deeply to read")


class OrjsonRefused(Exception):
    """orjson did not read it: the json module must (see `loads_stdlib`)."""


def loads_orjson(raw: bytes | str) -> Any:
    """orjson's reading, or OrjsonRefused (never a ValueError: the json module says what is
    wrong with invalid JSON, in the words clients know)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise OrjsonRefused from None


def loads_stdlib(raw: bytes | str) -> Any:
    """The json module's reading of what orjson refused, numbers read as orjson reads them; a
    ValueError (UnicodeDecodeError included) for what is not JSON or not read (JsonRefused).
    Bytes are decoded strictly (the json module would let an encoded lone surrogate through)."""
    text = raw if isinstance(raw, str) else raw.decode(json.detect_encoding(raw))
    try:
        # The hooks run for every number (a Python call each, which also lets other threads
        # take the GIL between them); without them a 4,299-digit integer costs 86 µs.
        value = json.loads(text, parse_int=_integer, parse_float=_float)
    except RecursionError:
        raise NestedTooDeeply from None
    if "\\u" in text and _holds_surrogate(value):
        raise LoneSurrogate
    return value


def loads(raw: bytes | str) -> Any:
    """orjson, then the json module; a ValueError for anything not read (never a
    RecursionError, never a number that costs more than its length to hold)."""
    try:
        return loads_orjson(raw)
    except OrjsonRefused:
        return loads_stdlib(raw)


async def loads_soon(raw: bytes) -> Any:
    """`loads`, in a thread when `raw` is longer than OFF_LOOP_BYTES."""
    if len(raw) > OFF_LOOP_BYTES:
        return await asyncio.to_thread(loads, raw)
    return loads(raw)


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON. What orjson refuses (nesting past 255 levels, an integer past 64
    bits made by code) the json module writes; a NaN goes as null (orjson's way)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        pass
    try:
        return json.dumps(value, ensure_ascii=False).encode()
    except UnicodeEncodeError:  # a lone surrogate: escaped, as the json module reads it back
        return json.dumps(value).encode()


def _integer(literal: str) -> int | float:
    if len(literal) <= 20:  # cheap to convert; within 64 bits it stays exact, as orjson keeps it
        value = int(literal)
        if INT64_MIN <= value <= UINT64_MAX:
            return value
    return _float(literal)


def _float(literal: str) -> float:
    value = float(literal)  # linear in the digits, unlike int()
    if math.isinf(value):
        raise NumberOutOfRange(literal)
    return value


def _holds_surrogate(value: Any) -> bool:
    """Whether any string of `value`, keys included, holds a lone surrogate (walked without
    recursion: the json module reads nesting deeper than Python recurses; a long string a
    megabyte at a time, so that no single search holds the GIL for long)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not item.isascii():  # O(1): most strings are skipped here
                for start in range(0, len(item), STEP):
                    if _SURROGATE.search(item, start, start + STEP):
                        return True
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
