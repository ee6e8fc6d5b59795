"""Stopping a background task without swallowing the caller's own cancellation."""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(task: asyncio.Future[Any]) -> None:
    """Cancel `task` and wait until it has ended.

    Its CancelledError is expected and dropped, unless the caller itself is being cancelled
    meanwhile (a shutdown stopping the caller too): that one is raised, or the caller would
    carry on as if nobody had asked it to stop.
    """
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
