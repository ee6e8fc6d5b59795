"""Who created each response and conversation an upstream that speaks Responses gave out.

The upstream keeps them under the proxy's own credential, for every key alike; the proxy
records the key that created each id and lets only that key (or an admin) reach it. An id the
proxy has no record of is refused the same way as another key's: a 404 that never reaches the
upstream. Records are small JSON objects in the same place as the vector stores' (data_dir on
disk, or the bucket the replicas share), named by a digest of the id (ids are the upstream's
text, not safe file names). A response's record lasts `keep_s` from its creation, as OpenAI keeps
a response 30 days; a conversation's until it is deleted, as OpenAI's are. Blocking calls: run
them off the event loop.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Callable
from typing import Any, Literal

from proxy.errors import ProxyError
from proxy.responses.chain import Chain, read_chain
from proxy.stores.backend import RecordBackend

Kind = Literal["response", "conversation"]
MAX_ID_CHARS = 256  # longer ids were never given out by an upstream we relay
SWEEP_READS = 16
"""Records of the new record's folder read (at random) for expired ones each time a response is
recorded: the folders fill evenly, so every folder is read in turn as responses come, and the
expired ones kept waiting stay a small share (about one in `SWEEP_READS`)."""


def record_key(kind: Kind, ident: str) -> str:
    digest = hashlib.sha256(ident.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{kind}s/{digest[:2]}/{digest}.json"


def expired(found: dict[str, Any], kind: Kind, now: float, keep_s: float | None) -> bool:
    """Whether a response's record is past `keep_s` from its creation (None or 0: kept until
    deleted). A conversation's never is; nor is a record without a time of creation."""
    created = found.get("created")
    if kind != "response" or not keep_s or not isinstance(created, int | float):
        return False
    return now - created > keep_s


def encoded(found: dict[str, Any]) -> bytes:
    """A record as UTF-8 JSON, readable as it is; escaped where a string holds half of a
    surrogate pair (an upstream's text may), which UTF-8 cannot hold."""
    try:
        return json.dumps(found, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return json.dumps(found).encode()


def not_found(kind: Kind, ident: str, param: str) -> ProxyError:
    """The answer for an unknown id and for another key's, word for word the same."""
    shown = ident if len(ident) <= 64 else ident[:61] + "..."
    return ProxyError(
        f"No {kind} found with id {shown!r}.",
        status=404,
        type="invalid_request_error",
        param=param,
        code=f"{kind}_not_found",
    )


class Owners:
    """The owner of each id, by kind."""

    def __init__(
        self,
        backend: RecordBackend,
        clock: Any = time.time,
        keep_s: float | None = None,
        pick: Callable[[list[str], int], list[str]] = random.sample,
    ) -> None:
        self.backend = backend
        self.clock = clock
        self.keep_s = keep_s
        self.pick = pick

    def record(self, kind: Kind, ident: str, owner: str, chain: Chain | None = None) -> None:
        """`owner` created `ident` (with the `chain` up to it, in the same write). An id already
        recorded keeps its first owner and chain (an expired record is a new one)."""
        if not ident or len(ident) > MAX_ID_CHARS:
            return
        found: dict[str, Any] = {"id": ident, "owner": owner, "created": self.clock()}
        if chain is not None:
            found["chain"] = chain.to_json()
        data = encoded(found)
        key = record_key(kind, ident)

        def change(current: bytes | None) -> bytes | None:
            return data if current is None or self._found(kind, ident, current) is None else None

        self.backend.update(key, change)

    def sweep_beside(self, ident: str) -> int:
        """After a response is recorded: its folder swept (`sweep`), when responses expire (any
        id names a folder: sweeping one is harmless)."""
        if not self.keep_s:
            return 0
        return self.sweep("response", record_key("response", ident).rsplit("/", 1)[0] + "/")

    def sweep(self, kind: Kind, folder: str) -> int:
        """Removes expired records among up to `SWEEP_READS` of `folder`'s; how many."""
        names = self.backend.names(folder)
        removed = 0
        for name in self.pick(names, min(SWEEP_READS, len(names))):
            raw = self.backend.get(folder + name)
            try:
                found = json.loads(raw) if raw is not None else None
            except ValueError:
                continue
            if isinstance(found, dict) and expired(found, kind, self.clock(), self.keep_s):
                self.backend.delete(folder + name)
                removed += 1
        return removed

    def _found(self, kind: Kind, ident: str, raw: bytes | None = None) -> dict[str, Any] | None:
        if not ident or len(ident) > MAX_ID_CHARS:
            return None
        if raw is None:
            raw = self.backend.get(record_key(kind, ident))
        if raw is None:
            return None
        try:
            found = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(found, dict) or found.get("id") != ident:
            return None
        return None if expired(found, kind, self.clock(), self.keep_s) else found

    def owner(self, kind: Kind, ident: str) -> str | None:
        found = self._found(kind, ident)
        owner = None if found is None else found.get("owner")
        return owner if isinstance(owner, str) else None

    def chain(self, kind: Kind, ident: str) -> Chain:
        """What the proxy kept of the turns up to `ident` (empty for an id it kept none of)."""
        found = self._found(kind, ident)
        return read_chain(None if found is None else found.get("chain"))

    def keep_chain(self, kind: Kind, ident: str, change: Callable[[Chain], Chain]) -> None:
        """The recorded `ident`'s chain changed (atomically: two turns of one conversation at
        once both land); an id without a record gets none."""

        def update(current: bytes | None) -> bytes | None:
            found = self._found(kind, ident, current) if current is not None else None
            if found is None:
                return None
            found["chain"] = change(read_chain(found.get("chain"))).to_json()
            return encoded(found)

        if ident and len(ident) <= MAX_ID_CHARS:
            self.backend.update(record_key(kind, ident), update)

    def may_use(self, kind: Kind, ident: str, name: str, admin: bool) -> bool:
        """Whether the caller `name` may reach `ident`: its own, or any recorded one for an
        admin key."""
        owner = self.owner(kind, ident)
        return owner is not None and (admin or owner == name)

    def forget(self, kind: Kind, ident: str) -> None:
        if ident and len(ident) <= MAX_ID_CHARS:
            self.backend.delete(record_key(kind, ident))
