"""Parser processes shared fairly between keys: a cap per key, and the next free process to the
key running the fewest jobs (then to the one served least recently, then the oldest waiter)."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from dataclasses import dataclass, field


@dataclass(eq=False)
class _Waiter:
    key: str
    order: int
    granted: asyncio.Future[None]


@dataclass
class FairShare:
    """`slots` jobs at once, at most `per_key` of one key: one key sending big documents cannot
    hold every parser process while another key's small one waits behind them."""

    slots: int
    per_key: int
    running: Counter[str] = field(default_factory=Counter)
    _waiting: list[_Waiter] = field(default_factory=list)
    _orders: itertools.count[int] = field(default_factory=itertools.count)
    _served: dict[str, int] = field(default_factory=dict)  # key → order of its last grant

    @property
    def busy(self) -> int:
        return sum(self.running.values())

    async def acquire(self, key: str) -> None:
        """Wait for this key's turn; then it holds one slot until `release`."""
        waiter = _Waiter(key, next(self._orders), asyncio.get_running_loop().create_future())
        self._waiting.append(waiter)
        self._dispatch()
        try:
            await waiter.granted
        except asyncio.CancelledError:
            if waiter.granted.done() and not waiter.granted.cancelled():
                self.release(key)  # granted just as the caller went away: give it back
            else:
                self._waiting.remove(waiter)
            raise

    def release(self, key: str) -> None:
        self.running[key] -= 1
        if self.running[key] <= 0:
            del self.running[key]
        self._dispatch()

    def _dispatch(self) -> None:
        while self.busy < self.slots:
            eligible = [w for w in self._waiting if self.running[w.key] < self.per_key]
            if not eligible:
                return
            chosen = min(
                eligible, key=lambda w: (self.running[w.key], self._served.get(w.key, -1), w.order)
            )
            self._waiting.remove(chosen)
            self.running[chosen.key] += 1
            self._served[chosen.key] = next(self._orders)
            chosen.granted.set_result(None)
