"""Memory tracing for `bench/soak.py --trace`: each proxy worker writes down what grew, a minute
apart.

Loaded by the proxy's parent through PYTHONPATH (bench only, never the product). The workers are
forked from the parent, so the tracer starts in each forked child whose parent is the proxy's
main process (the two workers; not their parse workers). Every SOAK_TRACE_EVERY_S seconds a
worker appends one JSON line to SOAK_TRACE_DIR/worker-<pid>.jsonl: its RSS, the heap as glibc
sees it (mallinfo2: in use, free inside the arenas, mmapped), Python's allocated blocks, the
fill of every bounded cache it holds (cachetools caches, deques with a maxlen, lru_caches of the
proxy's modules), and the object types whose count grew most since the first line. With
SOAK_TRACE_FRAMES=N (> 0) tracemalloc runs too (slow: it halves the traffic) and each line
carries the source lines whose allocations grew most since the baseline.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import itertools
import json
import os
import sys
import threading
import time
import tracemalloc
import types
from collections import Counter, deque
from pathlib import Path
from typing import Any

MAIN_PID = os.getpid()


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
            "fordblks", "keepcost",
        )
    ]  # fmt: skip


def _heap() -> dict[str, float]:
    """glibc's view: bytes handed out, free inside the arenas (fragmentation), mmapped."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallinfo2.restype = _MallInfo2
        info = libc.mallinfo2()
    except (OSError, AttributeError):
        return {}
    mb = 2**20
    return {
        "in_use_mb": round((info.uordblks + info.hblkhd) / mb, 1),
        "free_in_arenas_mb": round(info.fordblks / mb, 1),
        "mmapped_mb": round(info.hblkhd / mb, 1),
    }


def _rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return round(int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


MAX_WALKED = 2_000_000  # objects; a worker holds well under a million


def _reachable(names: dict[int, str]) -> list[Any]:
    """Objects reachable from the modules and the threads' frames (the proxy's app calls
    gc.freeze() at start, so gc.get_objects() misses everything made before the workers
    forked). Walking them holds the GIL for a second or two: the worker answers late meanwhile."""
    here = threading.get_ident()  # not this thread: its frames would hold the walk itself
    frames = [f for thread, f in sys._current_frames().items() if thread != here]
    roots: list[Any] = [*sys.modules.values(), *frames]
    seen: set[int] = set()
    found: list[Any] = []
    while roots and len(seen) < MAX_WALKED:
        obj = roots.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        found.append(obj)
        try:  # some objects' __getattr__ raise anything (pydantic's mock validators)
            attributes = object.__getattribute__(obj, "__dict__")
        except Exception:
            attributes = None
        if isinstance(attributes, dict) and not isinstance(obj, (type, types.ModuleType)):
            for key, value in list(attributes.items()):
                if _bounded(value):  # named here: gc.get_referrers does not see frozen objects
                    names[id(value)] = f"{type(obj).__name__}.{key}"
        if isinstance(obj, types.FrameType):  # a running frame's locals are not referents
            roots.extend([obj.f_locals, obj.f_back])
        else:
            roots.extend(gc.get_referents(obj))
    return found


def _bounded(obj: Any) -> bool:
    cachetools = sys.modules.get("cachetools")
    return (
        (cachetools is not None and isinstance(obj, cachetools.Cache))
        or (isinstance(obj, deque) and obj.maxlen is not None)
        or (
            isinstance(obj, functools._lru_cache_wrapper)  # type: ignore[attr-defined]
            and (getattr(obj, "__module__", "") or "").startswith("proxy")
        )
    )


def _caches(objects: list[Any], names: dict[int, str]) -> dict[str, list[float]]:
    """Each bounded cache by its type and where it was made: [filled, bound]."""
    found: dict[str, list[float]] = {}
    cachetools = sys.modules.get("cachetools")
    for obj in objects:
        if cachetools is not None and isinstance(obj, cachetools.Cache):
            key = f"{type(obj).__name__} {names.get(id(obj), '?')}#{id(obj) % 1000}"
            found[key] = [obj.currsize, obj.maxsize]
        elif isinstance(obj, deque) and obj.maxlen:
            found[f"deque {names.get(id(obj), '?')}#{id(obj) % 1000}"] = [len(obj), obj.maxlen]
        elif isinstance(obj, functools._lru_cache_wrapper):  # type: ignore[attr-defined]
            module = getattr(obj, "__module__", "") or ""
            if module.startswith("proxy"):
                info = obj.cache_info()
                found[f"lru {module}.{obj.__qualname__}"] = [info.currsize, info.maxsize or -1]
    return found


def _trace(out: Path, every: float, frames: int) -> None:
    started = time.monotonic()
    base_types: Counter[str] | None = None
    baseline: tracemalloc.Snapshot | None = None
    names: dict[int, str] = {}
    held: list[Any] = []  # the bounded caches, found by a walk every ten lines (it costs RSS)
    for number in itertools.count():
        time.sleep(every)
        if number % 10 == 0:
            held = [o for o in _reachable(names) if _bounded(o)]
        objects = gc.get_objects()
        types = Counter(type(o).__qualname__ for o in objects)
        line: dict[str, Any] = {
            "minute": round((time.monotonic() - started) / 60, 1),
            "rss_mb": _rss_mb(),
            **_heap(),
            "python_blocks": sys.getallocatedblocks(),
            "objects": len(objects),
            "caches": _caches(held, names),
        }
        del objects
        if base_types is None:
            base_types = types
        else:
            types.subtract(base_types)
            line["types_grown"] = dict(types.most_common(12))
        if frames:
            mine = [tracemalloc.__file__, __file__]
            snapshot = tracemalloc.take_snapshot().filter_traces(
                [tracemalloc.Filter(False, name) for name in mine]
            )
            line["traced_mb"] = round(tracemalloc.get_traced_memory()[0] / 2**20, 1)
            line["tracemalloc_own_mb"] = round(tracemalloc.get_tracemalloc_memory() / 2**20, 1)
            if baseline is None:
                baseline = snapshot
            else:
                line["lines_grown"] = [str(s) for s in snapshot.compare_to(baseline, "lineno")[:15]]
        with open(out, "a") as handle:
            handle.write(json.dumps(line) + "\n")


def _in_child() -> None:
    if os.getppid() != MAIN_PID:
        return
    frames = int(os.environ.get("SOAK_TRACE_FRAMES", "0"))
    if frames:
        tracemalloc.start(frames)
    out = Path(os.environ["SOAK_TRACE_DIR"]) / f"worker-{os.getpid()}.jsonl"
    every = float(os.environ.get("SOAK_TRACE_EVERY_S", "60"))
    threading.Thread(target=_trace, args=(out, every, frames), daemon=True).start()


if os.environ.get("SOAK_TRACE_DIR"):
    os.register_at_fork(after_in_child=_in_child)
