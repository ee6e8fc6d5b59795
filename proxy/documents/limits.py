"""Size, page, text and time limits applied to every parsed document."""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024


@dataclass(frozen=True)
class ParseLimits:
    """Limits for one document; exceeding any of them is an error naming the file and the limit."""

    max_file_bytes: int = 50 * MIB
    max_pages: int = 2000
    max_chars: int = 5_000_000
    timeout_s: float = 60.0
