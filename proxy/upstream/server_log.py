"""The log file a local server writes to: appended per launch, its tail read for messages."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import IO

TAIL_LINES = 40
_TAIL_BYTES = 8192


class ServerLog:
    """One file for every launch of a server; the tail shows the current (or last) launch."""

    def __init__(self, path: Path | None = None) -> None:
        if path is None:
            fd, name = tempfile.mkstemp(prefix="llama-server-", suffix=".log")
            os.close(fd)
            path = Path(name)
        self.path = path
        self._file: IO[bytes] | None = None
        self._offset = 0

    def begin_launch(self) -> IO[bytes]:
        """The file to give the next process as stdout/stderr, after a dated marker line.

        Appended, so the log of a crashed run survives its restart. A file, never a pipe:
        nobody reads a pipe, and a full one blocks the server.
        """
        if self._file is None:
            self._file = self.path.open("ab")
        self._file.write(f"\n=== {time.strftime('%Y-%m-%dT%H:%M:%S')} launch\n".encode())
        self._file.flush()
        self._offset = self._file.tell()
        return self._file

    def tail(self, lines: int = TAIL_LINES) -> str:
        """The last lines the current (or last) launch wrote."""
        try:
            with self.path.open("rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(self._offset, size - _TAIL_BYTES))
                data = fh.read()
        except OSError:
            return ""
        text = data.decode("utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
