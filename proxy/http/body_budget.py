"""Request bodies in flight: the memory each key's requests hold, and all requests together.

A body is charged as its bytes arrive; once parsed, at what its objects hold (measured, see
proxy.http.jsonsize.held_bytes) while the bytes still exist too, then at the objects alone; the
bytes sent upstream are added as they are written. All of it is given back when the request
ends, however it ends (proxy.http.middleware). Without a budget a client could hold a 64 MiB
body on each of its 128 connections for the 120 s a body may take (8 GiB), and a parsed body
of tiny values holds 20 times its length.

Refusals say whose turn it is: a body that alone takes more than a budget can never be read
(413); a key whose other requests hold its budget may retry when they end (429); a process whose
requests together hold the whole budget is busy for everyone, through nobody's fault (503).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from proxy.config import ServerSettings
from proxy.errors import PayloadTooLarge, ProxyError

MIB = 1024 * 1024


def _mib(size: int) -> str:
    return f"{size / MIB:.1f}"


class TooManyBodiesInFlight(ProxyError):
    """The key's other requests hold its budget already (429)."""

    status = 429
    type = "rate_limit_error"


class BodiesFull(ProxyError):
    """The process's requests together hold its whole budget (503)."""

    status = 503
    type = "server_error"


@dataclass
class BodyBudget:
    """Bytes of request bodies held right now, per key and in all (one ledger per process)."""

    key_limit: int | None
    total_limit: int | None
    total: int = 0
    _held: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, server: ServerSettings) -> BodyBudget:
        def limit(mib: float | None) -> int | None:
            return None if mib is None else int(mib * MIB)

        return cls(limit(server.max_inflight_body_mb_per_key), limit(server.max_inflight_body_mb))

    def held(self, key: str) -> int:
        return self._held.get(key, 0)

    def hold(self, key: str) -> HeldBody:
        """A new request's share of `key`'s budget (nothing held yet)."""
        return HeldBody(self, key)

    def check(self, key: str, request_size: int, more: int) -> None:
        """Raise if `more` bytes would not fit, for a request of `key` holding `request_size`."""
        if more <= 0:
            return
        wanted = request_size + more
        for limit, setting, who in (
            (self.key_limit, "server.max_inflight_body_mb_per_key", "one key"),
            (self.total_limit, "server.max_inflight_body_mb", "all requests"),
        ):
            if limit is not None and wanted > limit:
                raise PayloadTooLarge(
                    f"this request's body takes {_mib(wanted)} MiB once read, more than"
                    f" {setting} ({limit / MIB:g} MiB) lets {who} hold at once",
                    code="request_too_large",
                )
        now = self.held(key)
        if self.key_limit is not None and now + more > self.key_limit:
            raise TooManyBodiesInFlight(
                f"this request's body ({_mib(wanted)} MiB once read) with the bodies of this"
                f" key's other requests ({_mib(now - request_size)} MiB) exceed"
                f" server.max_inflight_body_mb_per_key ({self.key_limit / MIB:g} MiB); retry"
                " when they have finished",
                code="too_many_bodies_in_flight",
            )
        if self.total_limit is not None and self.total + more > self.total_limit:
            raise BodiesFull(
                f"the proxy holds {_mib(self.total)} MiB of request bodies, all callers"
                f" together, and this one's {_mib(more)} MiB more would pass"
                f" server.max_inflight_body_mb ({self.total_limit / MIB:g} MiB); retry shortly",
                code="proxy_busy",
            )

    def take(self, key: str, request_size: int, more: int, *, refuse: bool = True) -> None:
        if refuse:
            self.check(key, request_size, more)
        if more:
            self._held[key] = self.held(key) + more
            self.total += more

    def give(self, key: str, size: int) -> None:
        left = self.held(key) - size
        if left > 0:
            self._held[key] = left
        else:
            self._held.pop(key, None)
        self.total = max(0, self.total - size)


@dataclass
class HeldBody:
    """What one request's body holds: its bytes as read, its parsed objects, what it sends."""

    budget: BodyBudget
    key: str
    raw: int = 0
    parsed: int = 0
    sent: int = 0

    @property
    def size(self) -> int:
        return self.raw + self.parsed + self.sent

    def expect(self, size: int) -> None:
        """Refuse now a body whose declared length would be refused once it arrived."""
        self.budget.check(self.key, self.size, size)

    def arrived(self, size: int) -> None:
        self.budget.take(self.key, self.size, size)
        self.raw += size

    def parsed_as(self, size: int) -> None:
        """The parsed body holds `size` bytes (the raw ones are still held)."""
        self.budget.take(self.key, self.size, size - self.parsed)
        self.parsed = size

    def raw_dropped(self) -> None:
        self.budget.give(self.key, self.raw)
        self.raw = 0

    def sending(self, size: int) -> None:
        """The body as it goes upstream: counted, never refused (the work is done)."""
        self.budget.take(self.key, self.size, size, refuse=False)
        self.sent += size

    def release(self) -> None:
        """Give everything back (once; later calls do nothing)."""
        self.budget.give(self.key, self.size)
        self.raw = self.parsed = self.sent = 0
