"""Worker processes: a hanging, killed or crashing worker costs one parse, never the server."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from proxy import logs
from proxy.documents.limits import ParseLimits
from proxy.documents.parser import DocumentParser
from proxy.errors import DocumentError

HOOK_WORKER = [sys.executable, str(Path(__file__).with_name("hook_worker.py"))]
PdfMaker = Callable[[list[str]], bytes]


@pytest.fixture
async def parser(tmp_path: Path) -> AsyncIterator[DocumentParser]:
    parser = DocumentParser(
        tmp_path, ParseLimits(timeout_s=5.0), workers=1, worker_argv=HOOK_WORKER
    )
    await parser.start()
    yield parser
    await parser.close()


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def _wait_for(statuses: list[str], wanted: str) -> None:
    while wanted not in statuses:
        await asyncio.sleep(0.01)


async def test_timeout_kills_a_hanging_worker(
    tmp_path: Path, make_pdf: PdfMaker, page_texts: list[str]
) -> None:
    parser = DocumentParser(
        tmp_path, ParseLimits(timeout_s=1.0), workers=1, worker_argv=HOOK_WORKER
    )
    try:
        await parser.start()
        (pid,) = parser.pool.pids()
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        task = asyncio.create_task(ticker())
        with pytest.raises(DocumentError) as caught:
            await parser.parse("hang.pdf", b"%PDF-HANG\n")
        task.cancel()
        assert caught.value.code == "parse_timeout"
        assert caught.value.message == "hang.pdf: took longer than the limit of 1 seconds to parse"
        assert ticks > 5, "the event loop stalled while the worker hung"
        await _wait_until(lambda: _gone(pid))
        document = await parser.parse("after.pdf", make_pdf(page_texts))
        assert len(document.pages) == 7
        assert pid not in parser.pool.pids()
    finally:
        await parser.close()


async def _wait_until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.01)


async def test_killed_worker_fails_one_parse_then_recovers(
    parser: DocumentParser, make_pdf: PdfMaker, page_texts: list[str]
) -> None:
    statuses: list[str] = []
    parse = asyncio.create_task(parser.parse("victim.pdf", b"%PDF-HANG\n", statuses.append))
    await _wait_for(statuses, "PyMuPDF loaded for victim.pdf...")
    (pid,) = parser.pool.pids()
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(DocumentError) as caught:
        await parse
    assert caught.value.code == "parser_crashed"
    assert caught.value.message.startswith("victim.pdf: crashed the parser (exit code -9)")
    document = await parser.parse("next.pdf", make_pdf(page_texts))
    assert [page.text for page in document.pages] == page_texts


async def test_segfault_is_a_document_error(
    parser: DocumentParser, make_pdf: PdfMaker, page_texts: list[str]
) -> None:
    with pytest.raises(DocumentError, match=r"crash\.pdf: crashed the parser \(exit code -11\)"):
        await parser.parse("crash.pdf", b"%PDF-CRASH\n")
    assert len((await parser.parse("fine.pdf", make_pdf(page_texts))).pages) == 7


async def test_worker_killed_while_idle_is_replaced_transparently(
    parser: DocumentParser, make_pdf: PdfMaker, page_texts: list[str]
) -> None:
    (pid,) = parser.pool.pids()
    os.kill(pid, signal.SIGKILL)
    document = await parser.parse("fine.pdf", make_pdf(page_texts))
    assert len(document.pages) == 7


async def test_other_parses_continue_while_one_hangs(
    tmp_path: Path, make_pdf: PdfMaker, page_texts: list[str]
) -> None:
    parser = DocumentParser(
        tmp_path, ParseLimits(timeout_s=30.0), workers=2, worker_argv=HOOK_WORKER
    )
    try:
        await parser.start()
        statuses: list[str] = []
        hang = asyncio.create_task(parser.parse("hang.pdf", b"%PDF-HANG\n", statuses.append))
        await _wait_for(statuses, "PyMuPDF loaded for hang.pdf...")
        for n in range(3):
            document = await parser.parse(f"ok{n}.pdf", make_pdf([*page_texts, str(n)]))
            assert len(document.pages) == 8
        assert not hang.done()
        hang.cancel()
        with pytest.raises(asyncio.CancelledError):
            await hang
        # Cancelling the request killed its worker; the pool is whole again.
        assert len((await parser.parse("last.pdf", make_pdf(page_texts))).pages) == 7
    finally:
        await parser.close()


async def test_memory_cap_fails_the_parse_not_the_machine(
    parser: DocumentParser, make_pdf: PdfMaker, page_texts: list[str]
) -> None:
    with pytest.raises(DocumentError, match=r"greedy\.pdf: needs more memory") as caught:
        await parser.parse("greedy.pdf", b"%PDF-GREEDY\n")
    assert caught.value.code == "document_too_large"
    assert len((await parser.parse("fine.pdf", make_pdf(page_texts))).pages) == 7


async def test_a_worker_left_holding_memory_is_recycled(
    tmp_path: Path, make_pdf: PdfMaker, page_texts: list[str]
) -> None:
    parser = DocumentParser(
        tmp_path, workers=1, worker_argv=HOOK_WORKER, recycle_rss_bytes=200 * 1024**2
    )
    await parser.start()
    try:
        [before] = parser.pool.pids()
        bloated = b"%PDF-BLOAT" + make_pdf(["keeps 300 MB after its job"])[5:]
        document = await parser.parse("bloat.pdf", bloated)
        assert "keeps 300 MB" in document.text  # the job itself succeeded
        assert parser.pool.recycled == 1
        fresh = await parser.parse("next.pdf", make_pdf(page_texts))
        assert fresh.pages[0].text == page_texts[0]
        assert before not in parser.pool.pids()
        for _ in range(200):
            if _gone(before):
                break
            await asyncio.sleep(0.01)
        assert _gone(before)
        # An ordinary job keeps its worker.
        [kept] = parser.pool.pids()
        await parser.parse("again.pdf", make_pdf(["small"]))
        assert parser.pool.pids() == [kept]
        assert parser.pool.recycled == 1
    finally:
        await parser.close()


def test_a_child_is_told_the_proxys_log_format_and_level(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logs, "_format", "json")
    monkeypatch.setattr(logs, "_level", logging.WARNING)
    assert logs.child_environment() == {logs.CHILD_LOG: "json:warning"}


async def test_a_worker_logs_in_the_proxys_format_and_level(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # server.log_format: json, log_level: warning. Before, a worker logged its info lines in
    # structlog's default console format, whatever the proxy was told.
    monkeypatch.setattr(logs, "_format", "json")
    monkeypatch.setattr(logs, "_level", logging.WARNING)
    parser = DocumentParser(
        tmp_path, ParseLimits(timeout_s=5.0), workers=1, worker_argv=HOOK_WORKER
    )
    try:
        await parser.start()
        with pytest.raises(DocumentError):  # not a real PDF after its marker
            await parser.parse("log.pdf", b"%PDF-LOG\n")
    finally:
        await parser.close()
    lines = [line for line in capfd.readouterr().err.splitlines() if "hook" in line]
    assert [json.loads(line)["event"] for line in lines] == ["hook warning line"]
