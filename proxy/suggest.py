"""The closest valid name to a mistyped one (`citation` → `citations`), for error messages."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

# difflib's ratio: 0.6 is its own default; `citation`/`citations` scores 0.94, `limit`/`strategy`
# 0.15. Lower cut-offs start proposing names that only share a few letters.
CUTOFF = 0.6


def closest_name(name: str, known: Iterable[str]) -> str | None:
    """The known name most like `name` (case and `-`/`_` ignored), or None when none is close."""

    def plain(text: str) -> str:
        return text.lower().replace("-", "_")

    by_plain = {plain(candidate): candidate for candidate in known}
    # A prefix every known name shares (`x_enrich_`) would make any name close to all of them:
    # only what follows it is compared.
    shared = _shared_prefix(list(by_plain)) if len(by_plain) > 1 else ""
    wanted = plain(name)
    if shared and wanted.startswith(shared):
        rests = {key[len(shared) :]: key for key in by_plain}
        found = difflib.get_close_matches(wanted[len(shared) :], list(rests), n=1, cutoff=CUTOFF)
        return by_plain[rests[found[0]]] if found else None
    found = difflib.get_close_matches(wanted, list(by_plain), n=1, cutoff=CUTOFF)
    return by_plain[found[0]] if found else None


def _shared_prefix(names: list[str]) -> str:
    """The characters every name begins with (the first and last in order share what all do)."""
    first, last = min(names), max(names)
    size = 0
    while size < min(len(first), len(last)) and first[size] == last[size]:
        size += 1
    return first[:size]


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`; did you mean `citations`?` when a known name is close to `name`, else ''."""
    closest = closest_name(name, known)
    return f"; did you mean `{closest}`?" if closest else ""
