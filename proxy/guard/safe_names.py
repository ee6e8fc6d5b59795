"""Document names that enter the prompt (`** name full content **`, `[attached: name]`): one
line, bounded, guarded like document text: a client chooses them."""

from __future__ import annotations

import re
from collections.abc import Iterable

from proxy.guard.neutralise import neutralise

MAX_NAME_CHARS = 200
_BREAKS = re.compile(r"[\s\x00-\x1f\x7f-\x9f\u2028\u2029]+")


def safe_name(name: str, extra_tokens: Iterable[str] = ()) -> str:
    """`name` on one line (line breaks and control characters become spaces), at most
    MAX_NAME_CHARS, with control tokens and turn markers neutralised."""
    flat = _BREAKS.sub(" ", name).strip()
    if len(flat) > MAX_NAME_CHARS:
        flat = flat[: MAX_NAME_CHARS - 1] + "…"
    return neutralise(flat, extra_tokens=extra_tokens).text or "file"
