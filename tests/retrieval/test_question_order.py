"""Once a document is indexed, a question gets the same passages whatever was asked before it,
on this proxy or on a fresh one: nothing a question leaves behind (its early candidates' preview
vectors, its translation, the background's order) changes what a later one finds."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fakes.upstream import FakeUpstream
from tests.pipeline.test_enrich import ask, preview, text_part

TOPICS = [
    "harbour",
    "lighthouse",
    "granary",
    "orchard",
    "foundry",
    "vineyard",
    "observatory",
    "tannery",
    "apiary",
    "quarry",
    "library",
    "brewery",
]
KEEPERS = ["Ann", "Bo", "Cy", "Di", "Ed", "Flo", "Gus", "Hal", "Ida", "Jo", "Kit", "Lu"]
# Chapters longer than the heads a first question embeds (128 tokens), so that what those
# heads rank differs from what the whole passages rank.
FILLER = " ".join(f"Day {d}: the {{topic}} stayed open past {d} o'clock." for d in range(1, 25))
BOOK = "\n\n".join(
    f"Chapter {n}. The {topic} of the town was built in {1700 + 7 * n}; its keeper, "
    f"{name}, counted {n * 13} visitors in the first year and wrote about the {topic} at length. "
    + FILLER.format(topic=topic)
    for n, (topic, name) in enumerate(
        zip(TOPICS, KEEPERS, strict=True),
        start=1,
    )
)
QUESTIONS = [
    "When was the lighthouse built?",
    "Who kept the apiary?",
    "How many visitors came to the quarry in its first year?",
    "What did the keeper of the orchard write about?",
]
SETTINGS = {"chunk_tokens": 400, "chunk_overlap": 0, "new_document_candidates": 2}
ENRICH = {"strategy": "retrieval", "affinity_threshold": 0.0}


def asked(base: str, question: str) -> dict[str, Any]:
    return preview(base, ask([text_part("town.txt", BOOK)], question, enrich=ENRICH))


def indexed(base: str) -> None:
    """Asks until the document's dense index is complete (the background fills it)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        record = asked(base, "What is this book about?")
        if record["decision"]["retrieval"]["indexed"] == {"town.txt": 100}:
            return
        time.sleep(0.1)
    raise AssertionError("the document was not indexed within 60 s")


def found(record: dict[str, Any]) -> tuple[list[tuple[int, str]], str]:
    """The candidates (passage, outcome) and the prompt the upstream would get."""
    retrieval = record["decision"]["retrieval"]
    candidates = [(c["passage"], c["outcome"]) for c in retrieval["candidates"]]
    return candidates, str(record["upstream"]["body"]["messages"][-1]["content"][0]["text"])


def test_the_same_passages_whatever_came_before(
    make_proxy: Callable[..., str], upstream: FakeUpstream, tmp_path: Path
) -> None:
    first = make_proxy(retrieval=SETTINGS)
    # Questions on the new document first: each one's candidates are embedded (their heads)
    # before the rest, so the background's order follows them.
    for question in QUESTIONS:
        asked(first, question)
    indexed(first)
    forwards = {question: found(asked(first, question)) for question in QUESTIONS}
    assert all(prompt.startswith("The following citations") for _, prompt in forwards.values())
    again = {question: found(asked(first, question)) for question in reversed(QUESTIONS)}
    assert again == forwards  # the same proxy, the other order

    fresh = make_proxy(retrieval=SETTINGS, server={"data_dir": str(tmp_path / "other")})
    for question in reversed(QUESTIONS):  # a different history: other questions first
        asked(fresh, question)
    indexed(fresh)
    backwards = {question: found(asked(fresh, question)) for question in reversed(QUESTIONS)}
    assert backwards == forwards
