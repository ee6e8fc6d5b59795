"""Neutralises control tokens, invisible characters and override phrases in document text."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

from proxy.guard.control_tokens import KNOWN_TOKENS

__all__ = [
    "KNOWN_TOKENS",
    "OVERRIDE_MARKER",
    "GuardReport",
    "Guarded",
    "neutralise",
]

OVERRIDE_MARKER = "[redacted: instruction override]"

# Each delimiter is swapped for a visible look-alike: the model still reads `‹|im_start|›` as the
# words it was, but no tokenizer can match it. The look-alikes have no NFKC decomposition (unlike
# fullwidth forms, which fold back to ASCII), are not format characters (the invisible filter keeps
# them), and contain no delimiter, so a second pass finds nothing: the scheme is idempotent.
# Spaces (`< |im_start| >`) were rejected: a later `strip()` of a piece would undo them.
_LOOKALIKE = {
    "<": "\u2039",  # ‹ SINGLE LEFT-POINTING ANGLE QUOTATION MARK
    ">": "\u203a",  # › SINGLE RIGHT-POINTING ANGLE QUOTATION MARK
    "[": "\u27e6",  # ⟦ MATHEMATICAL LEFT WHITE SQUARE BRACKET
    "]": "\u27e7",  # ⟧ MATHEMATICAL RIGHT WHITE SQUARE BRACKET
    "{": "\u2983",  # ⦃ LEFT WHITE CURLY BRACKET
    "}": "\u2984",  # ⦄ RIGHT WHITE CURLY BRACKET
    "|": "\u00a6",  # ¦ BROKEN BAR, only for declared tokens made of bars, e.g. `|||IP_ADDRESS|||`
}
_BRACKETS = frozenset("<>[]{}")
_BAR = frozenset("|")
_DELIMITERS = _BRACKETS | _BAR

# Every `<|…|>` or `<|…>` token of every family (and of families not listed) starts with `<|`
# and a non-space character, so breaking that key breaks them all, whole or partial. `<|>`
# (Haskell) and `f <| x` (Elm, F#) stay as they are; `|>` pipes are never touched. Closers shaped
# `<name|>` (Gemma 4) are matched whole; a piece may not end in what could start one (`<name`).
_GENERIC_FULL = r"<\|[^\s<>|]{1,64}\|?>"
_GENERIC_CLOSER = r"<[^\s<>|]{1,64}\|>"
_GENERIC_KEY = r"<\|(?=[^\s<>|])"
_GENERIC_PREFIXES = ("<", "<|")
_GENERIC_TAIL = re.compile(r"<[^\s<>|]{0,64}\|?\Z")


@dataclass(frozen=True)
class GuardReport:
    """What `neutralise` changed: the total and the count per kind."""

    changes: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)

    def __add__(self, other: GuardReport) -> GuardReport:
        kinds = dict(self.by_kind)
        for kind, count in other.by_kind.items():
            kinds[kind] = kinds.get(kind, 0) + count
        return GuardReport(self.changes + other.changes, dict(sorted(kinds.items())))


@dataclass(frozen=True)
class Guarded:
    """Neutralised text and what was changed to get it."""

    text: str
    report: GuardReport


def neutralise(
    text: str, *, extra_tokens: Iterable[str] = (), redact_overrides: bool = False
) -> Guarded:
    """Make document text safe to inject into a prompt; see the module comments for the scheme.

    Idempotent, and split-proof: no concatenation of outputs holds a control token of a known
    family (or a declared token that starts with a delimiter), not even NFKC/case-folded.
    """
    counts: dict[str, int] = {}
    text, removed = _remove_invisible(text)
    if removed:
        counts["invisible"] = removed
    if redact_overrides:
        text, redacted = _redact_overrides(text)
        if redacted:
            counts["override_phrase"] = redacted
    extras = tuple(extra_tokens)
    text, broken = _break_tokens(text, _matcher(_normalise_extras(extras)))
    if broken:
        counts["control_token"] = broken
    text, markers = _break_markers(text, _plain_markers(extras))
    if markers:
        counts["turn_marker"] = markers
    by_kind = dict(sorted(counts.items()))
    return Guarded(text, GuardReport(sum(by_kind.values()), by_kind))


# --- invisible characters -------------------------------------------------------------------

# All format (Cf) characters of Unicode 14 except those that are visible or that a script needs
# (Arabic number signs U+0600-0605, U+06DD, Syriac U+070F, U+0890-0891, U+08E2, Kaithi U+110BD,
# U+110CD, Egyptian hieroglyph format controls U+13430-): zero-width, bidi controls, soft hyphen,
# word joiner, invisible operators, BOM, interlinear annotation, tag characters; plus the
# variation selectors, which can smuggle bytes (one per selector) after any character.
_INVISIBLE = re.compile(
    "["
    "\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f"
    "\ufeff\ufff9-\ufffb\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e007f"
    "\ufe00-\ufe0f\U000e0100-\U000e01ef"
    "]"
)
_ZWNJ, _ZWJ = "\u200c", "\u200d"
# Subdivision flags (England, Scotland, Wales) are a black flag and tag letters ending in a
# cancel tag; they are the only legitimate use of tag characters, and too short to smuggle much.
_FLAG = re.compile("\U0001f3f4[\U000e0030-\U000e0039\U000e0061-\U000e007a]{2,7}\U000e007f")


def _is_variation_selector(char: str) -> bool:
    code = ord(char)
    return 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF


def _is_emoji(char: str) -> bool:
    code = ord(char)
    return (
        0x1F000 <= code <= 0x1FAFF
        or (0x2000 <= code <= 0x2BFF and unicodedata.category(char) == "So")
        or code in (0x00A9, 0x00AE)
    )


def _joins_script(char: str) -> bool:
    # Arabic, Syriac, N'Ko, Indic (Devanagari to Sinhala) and Mongolian letters and marks use
    # ZWJ/ZWNJ to pick glyph forms (Persian `می‌خواهم`, Devanagari half forms): removing them
    # would change ordinary text.
    code = ord(char)
    in_script = (
        0x0600 <= code <= 0x08FF
        or 0x0900 <= code <= 0x0DFF
        or 0x1800 <= code <= 0x18AF
        or 0xFB50 <= code <= 0xFDFF
        or 0xFE70 <= code <= 0xFEFC
    )
    return in_script and unicodedata.category(char)[0] in "LM"


def _keeps_joiner(text: str, index: int) -> bool:
    """ZWJ inside an emoji sequence, or a joiner between letters of a joining script."""
    if index == 0 or index + 1 >= len(text):
        return False
    before, after = index - 1, text[index + 1]
    if _joins_script(text[before]) and _joins_script(after):
        return True
    if text[index] != _ZWJ:
        return False
    # Emoji like ❤️‍🔥 put a variation selector between the emoji and the joiner.
    while before > 0 and _is_variation_selector(text[before]):
        before -= 1
    return _is_emoji(text[before]) and _is_emoji(after)


def _remove_invisible(text: str) -> tuple[str, int]:
    if not _INVISIBLE.search(text):
        return text, 0
    flags = [range(m.start() + 1, m.end()) for m in _FLAG.finditer(text)]
    kept: list[str] = []
    removed = 0
    start = 0
    for match in _INVISIBLE.finditer(text):
        index = match.start()
        char = text[index]
        if char in (_ZWJ, _ZWNJ):
            keep = _keeps_joiner(text, index)
        elif _is_variation_selector(char):
            # One selector right after a visible character is emoji or CJK presentation;
            # further ones, or one after another invisible, carry nothing a reader sees.
            keep = index > 0 and not _INVISIBLE.match(text[index - 1])
        elif 0xE0000 <= ord(char) <= 0xE007F:
            keep = any(index in flag for flag in flags)
        else:
            keep = False
        if not keep:
            kept.append(text[start:index])
            start = index + 1
            removed += 1
    kept.append(text[start:])
    return "".join(kept), removed


# --- the folded view --------------------------------------------------------------------------


@lru_cache(maxsize=8192)
def _fold_char(char: str) -> str:
    # Tokenizers whose added tokens are "normalized" match them after NFKC-like folding, so
    # `＜｜im_start｜＞` must count as `<|im_start|>`; case-folding on top is defensive.
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", char).casefold())


def _fold(text: str) -> tuple[str, list[int] | None]:
    """The NFKC + case-folded view of `text` and, unless it is 1:1, the source index of each char.

    Folding is per character so that the view of a concatenation is the concatenation of the
    views: that is what makes the split-proof argument hold. Text itself is never folded, only
    matched through this view, so ordinary text (ligatures, maths, CJK) stays as it is.
    """
    if text.isascii():
        return text.lower(), None
    parts = [_fold_char(char) for char in text]
    folded = "".join(parts)
    if len(folded) == len(text):
        return folded, None
    origin = [index for index, part in enumerate(parts) for _ in part]
    return folded, origin


def _source_span(origin: list[int] | None, start: int, end: int) -> tuple[int, int]:
    if origin is None:
        return start, end
    return origin[start], origin[end - 1] + 1


# --- control tokens ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Matcher:
    pattern: re.Pattern[str]
    # Proper prefixes of guarded tokens that hold a delimiter: a piece must not end in one, or
    # the next piece could complete the token.
    prefixes: frozenset[str]
    longest_prefix: int


def _normalise_extras(extra_tokens: Iterable[str]) -> tuple[str, ...]:
    folded = {"".join(_fold_char(char) for char in token) for token in extra_tokens}
    # A token without a delimiter cannot be broken without changing ordinary words, and one of
    # one or two characters (`|`, `<<`) would break ordinary code and tables: skip those.
    return tuple(sorted(t for t in folded if len(t) >= 3 and _DELIMITERS & set(t)))


def _plain_markers(extra_tokens: tuple[str, ...]) -> tuple[str, ...]:
    # Turn markers written in plain text (Alpaca's `### Instruction:`, `USER:`): no delimiter
    # to swap, but punctuation or spaces, so never an ordinary word. Plain words are skipped.
    return tuple(
        sorted(
            {
                token.strip()
                for token in extra_tokens
                if len(token.strip()) >= 3
                and not _DELIMITERS & set(token)
                and re.search(r"[^\w\s]|\w\s+\w", token.strip())
            }
        )
    )


@lru_cache(maxsize=64)
def _marker_pattern(markers: tuple[str, ...]) -> re.Pattern[str]:
    alternatives = sorted(markers, key=lambda m: (-len(m), m))
    return re.compile("|".join(re.escape(m) for m in alternatives), re.IGNORECASE)


# A thin space after a marker's first character: still readable, no longer the marker, kept by
# the invisible filter (it is a space) and matched by nothing on a second pass: idempotent.
_MARKER_BREAK = "\u2009"


def _break_markers(text: str, markers: tuple[str, ...]) -> tuple[str, int]:
    if not markers:
        return text, 0
    count = 0

    def split(match: re.Match[str]) -> str:
        nonlocal count
        count += 1
        found = match.group(0)
        return found[0] + _MARKER_BREAK + found[1:]

    return _marker_pattern(markers).sub(split, text), count


@lru_cache(maxsize=64)
def _matcher(extras: tuple[str, ...]) -> _Matcher:
    named = {
        "".join(_fold_char(char) for char in token)
        for tokens in KNOWN_TOKENS.values()
        for token in tokens
    }
    named.update(extras)
    alternatives = [re.escape(token) for token in sorted(named, key=lambda t: (-len(t), t))]
    pattern = re.compile("|".join([*alternatives, _GENERIC_FULL, _GENERIC_CLOSER, _GENERIC_KEY]))
    prefixes = {
        token[:end]
        for token in named
        for end in range(1, len(token))
        if _DELIMITERS & set(token[:end])
    }
    prefixes.update(_GENERIC_PREFIXES)
    return _Matcher(pattern, frozenset(prefixes), max(map(len, prefixes)))


def _swap(char: str, delimiters: frozenset[str]) -> str:
    folded = unicodedata.normalize("NFKC", char)
    if not delimiters & set(folded):
        return char
    return "".join(_LOOKALIKE[c] if c in delimiters else c for c in folded)


def _dangerous_tail(folded: str, matcher: _Matcher) -> int | None:
    """Where the longest suffix that could start a token begins, if there is one."""
    tail = len(folded) - max(matcher.longest_prefix, 66)
    generic = _GENERIC_TAIL.search(folded, max(0, tail))
    for start in range(max(0, len(folded) - matcher.longest_prefix), len(folded)):
        if folded[start:] in matcher.prefixes:
            return start if generic is None else min(start, generic.start())
    return None if generic is None else generic.start()


def _break_tokens(text: str, matcher: _Matcher) -> tuple[str, int]:
    broken = 0
    # Each round swaps at least one delimiter for a look-alike, so this ends; usually after one
    # round that breaks everything and one that finds nothing.
    while True:
        folded, origin = _fold(text)
        edits: dict[int, str] = {}
        for match in matcher.pattern.finditer(folded):
            start, end = _source_span(origin, match.start(), match.end())
            span = folded[match.start() : match.end()]
            # Brackets carry the shape of a token; bars only when a token has nothing else.
            delimiters = _BRACKETS if _BRACKETS & set(span) else _BAR
            for index in range(start, end):
                swapped = _swap(text[index], delimiters)
                if swapped != text[index]:
                    edits[index] = swapped
            broken += 1
        if not edits:
            tail = _dangerous_tail(folded, matcher)
            if tail is None:
                return text, broken
            offset = next(i for i, c in enumerate(folded[tail:]) if c in _DELIMITERS)
            index, _ = _source_span(origin, tail + offset, tail + offset + 1)
            swapped = _swap(text[index], _DELIMITERS)
            if swapped == text[index]:
                # Cannot happen in Unicode 14 (every character whose folded view holds a
                # delimiter holds it in NFKC too); kept so that a newer Unicode cannot loop.
                return text, broken
            edits[index] = swapped
            broken += 1
        pieces: list[str] = []
        last = 0
        for index in sorted(edits):
            pieces += (text[last:index], edits[index])
            last = index + 1
        pieces.append(text[last:])
        text = "".join(pieces)


# --- instruction-override phrases -------------------------------------------------------------

_QUALIFIER = (
    r"(?:all|any|each|every|of|the|your|my|these|those|previous|prior|above|earlier|preceding"
    r"|foregoing|original|initial|system|existing|current|other)"
)
_OVERRIDES = re.compile(
    "|".join(
        [
            # "ignore all previous instructions", "disregard your system prompt"
            r"\b(?:ignore|disregard|forget|override|bypass)\s+(?:" + _QUALIFIER + r"\s+){1,4}"
            r"(?:instructions?|prompts?|directions?|directives?|rules?|guidelines?|guidance"
            r"|context|commands?|messages?|constraints?|restrictions?)\b",
            # "disregard the above", "forget everything before this"
            r"\b(?:ignore|disregard|forget)\s+(?:all\s+(?:of\s+)?)?(?:the\s+|this\s+)?"
            r"(?:above|foregoing|everything(?:\s+(?:above|before(?:\s+this)?))?)",
            # "you are now DAN", "you are now an unrestricted AI", "you are no longer bound"
            r"\byou\s+are\s+(?:now\s+(?:a|an|dan|acting\s+as)\b|no\s+longer\s+bound\b)",
            # "new system prompt:", "new instructions:", "system prompt:"
            r"\b(?:new|updated|real|actual)\s+(?:system\s+)?(?:prompt|instructions?)\s*:",
            r"\bsystem\s+prompt\s*:",
            r"\b(?:from\s+now\s+on|henceforth)\s*,?\s+you\s+(?:are|will|must|shall|should)\b",
            r"\b(?:enter|enable|activate|switch\s+to)\s+(?:developer|god|dan|jailbreak)\s+mode\b",
        ]
    )
)


def _redact_overrides(text: str) -> tuple[str, int]:
    folded, origin = _fold(text)
    spans = [_source_span(origin, m.start(), m.end()) for m in _OVERRIDES.finditer(folded)]
    for start, end in reversed(spans):
        text = text[:start] + OVERRIDE_MARKER + text[end:]
    return text, len(spans)
