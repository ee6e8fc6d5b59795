"""Parser processes shared between keys: one key's big documents never hold them all."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from proxy.config import load_settings
from proxy.documents.fairness import FairShare
from proxy.documents.limits import ParseLimits
from proxy.documents.parser import DocumentParser
from proxy.wiring import parse_workers_per_key
from tests.documents.test_workers import HOOK_WORKER

PdfMaker = Callable[[list[str]], bytes]


async def test_a_small_document_of_another_key_is_parsed_while_two_big_ones_run(
    tmp_path: Path, make_pdf: PdfMaker
) -> None:
    parser = DocumentParser(
        tmp_path, ParseLimits(timeout_s=30), workers=2, worker_argv=HOOK_WORKER, per_key=1
    )
    try:
        await parser.start()
        big = [
            asyncio.create_task(
                parser.parse(f"big-{n}.pdf", f"%PDF-SLOW {n}".encode(), owner="alice")
            )
            for n in (1, 2)
        ]
        await asyncio.sleep(0.2)  # both of alice's documents asked for first
        small = await parser.parse("note.pdf", make_pdf(["One paragraph."]), owner="bob")
        assert small.pages[0].text == "One paragraph."
        # Bob's document did not wait for either of alice's: both are still being parsed.
        assert not any(task.done() for task in big)
        assert parser.pool.share.running == {"alice": 1}
        await asyncio.gather(*big, return_exceptions=True)
    finally:
        await parser.close()


async def test_the_next_free_process_goes_to_the_key_served_least() -> None:
    share = FairShare(slots=1, per_key=1)
    granted: list[str] = []

    async def job(key: str, started: asyncio.Event | None = None) -> None:
        await share.acquire(key)
        granted.append(key)
        await asyncio.sleep(0.01)
        share.release(key)

    await asyncio.gather(job("a"), job("a"), job("a"), job("b"), job("c"))
    assert granted == ["a", "b", "c", "a", "a"]
    assert share.running == {}


async def test_a_cancelled_waiter_gives_its_turn_back() -> None:
    share = FairShare(slots=1, per_key=1)
    await share.acquire("a")
    waiting = asyncio.create_task(share.acquire("b"))
    await asyncio.sleep(0)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    share.release("a")
    await asyncio.wait_for(share.acquire("c"), 1)
    assert share.running == {"c": 1}


def test_keys_hold_all_parser_processes_but_one() -> None:
    keys = {"api_keys": [{"name": "a", "key": "a" * 16}, {"name": "b", "key": "b" * 16}]}
    for server, documents, per_key in [
        (keys, {"parse_workers": 2}, 1),
        (keys, {"parse_workers": 4}, 3),
        (keys, {"parse_workers": 1}, 1),
        ({}, {"parse_workers": 2}, 2),  # no keys: every caller is one identity
        (keys, {"parse_workers": 4, "parse_workers_per_key": 2}, 2),
    ]:
        settings = load_settings(
            None, environ={}, overrides={"server": server, "documents": documents}
        )
        assert parse_workers_per_key(settings) == per_key
