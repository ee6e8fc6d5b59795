"""Inconclusive answers about the upstream remembered for a while, the while doubling each time
they come out inconclusive again: a server that never answers a probe is not asked on every
request."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from cachetools import LRUCache

T = TypeVar("T")


@dataclass(frozen=True)
class Paused(Generic[T]):
    """An inconclusive answer, and until when it stands for the real one."""

    value: T
    until: float
    seconds: float


class Backoff(Generic[T]):
    """Per key (a model name, or "" for the upstream itself): the last inconclusive answer, kept
    `first_s` seconds, then twice as long after each inconclusive retry, up to `most_s`."""

    def __init__(
        self,
        first_s: float,
        most_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        size: int = 256,
    ) -> None:
        self.first_s = first_s
        self.most_s = max(first_s, most_s)
        self.clock = clock
        self._paused: LRUCache[str, Paused[T]] = LRUCache(maxsize=size)

    def standing(self, key: str) -> T | None:
        """The answer kept for `key` while its pause lasts; None when it is time to ask."""
        paused = self._paused.get(key)
        if paused is None or self.clock() >= paused.until:
            return None
        return paused.value

    def pause(self, key: str) -> float:
        """Seconds the next inconclusive answer for `key` will be kept."""
        paused = self._paused.get(key)
        return self.first_s if paused is None else min(self.most_s, paused.seconds * 2)

    def remember(self, key: str, value: T, seconds: float) -> None:
        self._paused[key] = Paused(value, self.clock() + seconds, seconds)

    def forget(self, key: str) -> None:
        self._paused.pop(key, None)
