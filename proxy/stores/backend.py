"""Where the records of vector stores are kept: small JSON objects by key, on disk here (the
object store's version is proxy.stores.bucket). Both answer the same blocking calls."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

from proxy.files.store import atomic_write

Change = Callable[[bytes | None], bytes | None]
"""What a record becomes given what it is (None: missing); returning None leaves it as it is."""


class RecordBackend(Protocol):
    """Records under keys like `stores/vs_x.json`; keys are made of ids the routes checked."""

    def get(self, key: str) -> bytes | None: ...

    def put(self, key: str, data: bytes) -> None: ...

    def delete(self, key: str) -> None:
        """Remove the record; a missing one is no error."""
        ...

    def names(self, folder: str) -> list[str]:
        """The keys directly in `folder` (`files/vs_x/`), without the folder."""
        ...

    def update(self, key: str, change: Change) -> bytes | None:
        """Apply `change` atomically (no other update of the key in between, in any process
        or replica); the record as it is afterwards."""
        ...


class DiskRecords:
    """Records as files under `root`, each written to a temp file and renamed into place (a
    reader never sees half a record); every write holds an fcntl lock shared by the worker
    processes on this data_dir, so an update's read and write have nothing in between."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.root / key

    def get(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None

    def put(self, key: str, data: bytes) -> None:
        # Under the lock too: an update in flight must not write its older version over this.
        with self._locked():
            self._write(key, data)

    def _write(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data)

    def delete(self, key: str) -> None:
        # Under the lock: an update in flight must not write the record back after this.
        with self._locked(), contextlib.suppress(FileNotFoundError):
            self._path(key).unlink()

    def names(self, folder: str) -> list[str]:
        try:
            entries = list((self.root / folder).iterdir())
        except FileNotFoundError:
            return []
        return sorted(e.name for e in entries if e.is_file() and not e.name.startswith("."))

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        # A new open file description per call: flock then also excludes this process's threads.
        with open(self.root / ".lock", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def update(self, key: str, change: Change) -> bytes | None:
        with self._locked():
            current = self.get(key)
            wanted = change(current)
            if wanted is None:
                return current
            self._write(key, wanted)
            return wanted
