"""glibc's malloc arenas: two per process, not eight per core, for a server of many threads."""

from __future__ import annotations

import ctypes
import os

M_ARENA_MAX = -8  # glibc's malloc.h
ARENAS = 2
"""Each thread that allocates while others hold an arena may get one of its own, and freed
memory stays split among them: with the threads that parse, index and read files, a worker's
RSS grew 5.5 MB a minute under bench/soak.py's traffic, 2.4 MB (its vector cache filling) with
two arenas (docs/performance.md, A day of traffic)."""


def limit_malloc_arenas(count: int = ARENAS) -> bool:
    """Cap this process's malloc arenas, unless MALLOC_ARENA_MAX says otherwise; True when set
    (False: not glibc, or the operator's own setting stands)."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no C library to ask, or not one with mallopt (macOS)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, count))
