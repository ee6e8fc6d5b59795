"""How large a window to ask Ollama for (pure)."""

from __future__ import annotations

# Ollama reloads a model whenever a request's num_ctx differs from the one it runs with
# (server/sched.go needsReload), so sizes come in few steps: powers of two from 2,048.
SMALLEST = 2048


def num_ctx_for(needed: int, *, floor: int, ceiling: int) -> int | None:
    """The window for a request that needs `needed` tokens (prompt and answer): the next power
    of two, never below `floor` (the window the model already runs with, or one asked for
    before: going back down would reload it) nor above `ceiling` (its trained window and the
    operator's cap). None when even `ceiling` is too small."""
    if needed > ceiling:
        return None
    size = SMALLEST
    while size < needed:
        size *= 2
    return max(min(size, ceiling), floor, needed)
