"""Helpers for the vector store tests: generated files, polling (the SDK: tests.callers)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import openai

# Each one its own topic, so a question finds exactly one of them.
TOPICS = {
    "lighthouse.txt": "The lighthouse keeper fed the cats every morning with fresh sardines "
    "from the harbour. The cats waited on the stone steps of the lighthouse.",
    "quarks.txt": "Quantum chromodynamics describes the strong interaction between quarks "
    "and gluons. Gluons carry the colour charge between the quarks.",
    "bakery.txt": "The bakery on the corner sells sourdough bread and croissants at dawn. "
    "The baker kneads the sourdough before the sun rises.",
}
FAST = {"poll_after_ms": 20}


def upload(client: openai.OpenAI, name: str, data: bytes | str) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return client.files.create(file=(name, raw), purpose="assistants").id


def upload_topics(client: openai.OpenAI) -> dict[str, str]:
    """The generated topic files uploaded: name → file id."""
    return {name: upload(client, name, text) for name, text in TOPICS.items()}


def corpus_bytes(corpus: Path, *names: str) -> dict[str, bytes]:
    return {Path(name).name: (corpus / name).read_bytes() for name in names}


def wait_until(check: Any, timeout: float = 60.0) -> Any:
    """Poll `check()` until it gives something truthy (the condition, never a duration, is
    what the tests assert)."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"still not there after {timeout} s: {check}")
        time.sleep(0.05)
