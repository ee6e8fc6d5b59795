"""The data folder of one process and the room kept free on its disk."""

from __future__ import annotations

from pathlib import Path

from proxy.config import Settings
from proxy.disk import DiskRoom


def data_dir(settings: Settings) -> Path:
    path = settings.server.data_dir
    path.mkdir(parents=True, exist_ok=True)
    return path


def disk_room(settings: Settings) -> DiskRoom:
    """The data folder's disk and the room kept free on it (server.min_free_disk_mb)."""
    return DiskRoom(data_dir(settings), int(settings.server.min_free_disk_mb * 1024 * 1024))
