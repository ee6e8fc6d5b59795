"""Room on the data folder's disk: the space kept free there, and the 507 when there is none."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

from proxy.errors import ProxyError

FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


class DiskFull(ProxyError):
    """The data folder's disk is full, or under the room the proxy keeps free (507)."""

    status = 507
    type = "server_error"

    def __init__(self, what: str) -> None:
        # No path: the data folder is the operator's business, not a caller's.
        super().__init__(
            f"the proxy's data folder is out of space: {what} was not saved. Try again later;"
            " the proxy's operator must free space on its disk (server.data_dir)",
            code="insufficient_storage",
        )


def disk_full(error: BaseException) -> bool:
    """Whether a failed write failed for want of space (or of quota on the disk)."""
    return isinstance(error, OSError) and error.errno in FULL


@dataclass(frozen=True)
class DiskRoom:
    """The disk holding `path`, and `reserve_bytes` kept free there.

    Writes the proxy can refuse (uploads, the embedded vector index) or skip (caches) stop
    below the reserve, so that none of them meets a full disk half-way: embedded Chroma fails
    its writes on a full disk without saying why, and once it has failed can hang until it is
    restarted (seen with chromadb 1.x).
    """

    path: Path
    reserve_bytes: int

    def free(self) -> int:
        found = os.statvfs(self.path)
        return found.f_bavail * found.f_frsize

    def low(self) -> bool:
        try:
            return self.free() < self.reserve_bytes
        except OSError:
            return False  # not there yet: the write itself will say what is wrong

    def check(self, what: str) -> None:
        """Raise DiskFull when the disk is under the reserve."""
        if self.low():
            raise DiskFull(what)
