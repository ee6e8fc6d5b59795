"""Document bytes a request holds, and all requests of one key hold at once: each has a budget.

A request's references are sized from what is known before reading (the file store's record,
a path's `stat`, the base64 text's length); over `documents.max_request_mb` the request is a
413, over what `documents.max_inflight_mb_per_key` leaves its key a 429, before a byte is read.
The bytes are released when the request's pipeline ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from proxy.errors import PayloadTooLarge, ProxyError

MIB = 1024 * 1024


def _mib(size: int) -> str:
    return f"{size / MIB:.1f}"


class TooManyBytesInFlight(ProxyError):
    """The key's requests already hold as many document bytes as it may (429)."""

    status = 429
    type = "rate_limit_error"

    def __init__(self, wanted: int, held: int, limit: int) -> None:
        super().__init__(
            f"this request's documents ({_mib(wanted)} MiB) with those this key's other requests"
            f" are reading now ({_mib(held)} MiB) exceed documents.max_inflight_mb_per_key"
            f" ({limit / MIB:g} MiB); retry when they have finished",
            param="messages",
            code="too_many_bytes_in_flight",
        )


def request_too_large(size: int, limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"the documents this request references hold {_mib(size)} MiB, over"
        f" documents.max_request_mb ({limit / MIB:g} MiB); reference fewer or smaller files",
        param="messages",
        code="request_documents_too_large",
    )


@dataclass
class Held:
    """One request's share of its key's bytes in flight."""

    ledger: BytesInFlight
    key: str
    size: int = 0

    def add(self, size: int, key_limit: int | None) -> None:
        """More bytes for this request (a fetched URL's), within the key's budget."""
        self.ledger.take(self.key, size, key_limit)
        self.size += size

    def release(self) -> None:
        """Give the request's bytes back (once; later calls do nothing)."""
        self.ledger.give(self.key, self.size)
        self.size = 0


@dataclass
class BytesInFlight:
    """Document bytes held right now by each key's requests (one ledger per process)."""

    _held: dict[str, int] = field(default_factory=dict)

    def held(self, key: str) -> int:
        return self._held.get(key, 0)

    def reserve(self, key: str, size: int, key_limit: int | None) -> Held:
        """`size` bytes for a new request of `key`, or TooManyBytesInFlight."""
        held = Held(self, key)
        held.add(size, key_limit)
        return held

    def take(self, key: str, size: int, key_limit: int | None) -> None:
        now = self.held(key)
        if key_limit is not None and size and now + size > key_limit:
            raise TooManyBytesInFlight(size, now, key_limit)
        if size:
            self._held[key] = now + size

    def give(self, key: str, size: int) -> None:
        left = self.held(key) - size
        if left > 0:
            self._held[key] = left
        else:
            self._held.pop(key, None)
