"""Parsing speed against the libraries' own plain passes, in one run.

`formats`: one large document of every kind (bench/documents.py: a Russian contract DOCX with
cost tables, ledgers XLSX/ODS, ODT, PPTX, Markdown, text, and the Debian Russian HTML, EPUB and
PDF), our parser's CPU time (the worker's extraction, in this process) against the library's
plain pass, and our whole parse (worker, cache write). `pdf`: pages/second of DocumentParser
(cold cache) against raw PyMuPDF, with and without PDF table extraction, the table finder run on
every page (what the ruling-line gate avoids), OCR pages/s, and cached-parse latency.

    .venv/bin/python bench/parse.py [formats] [pdf] [--corpus PATH]   (both when none is named)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench.documents
from bench.corpus import add_corpus_option, default_corpus, find_corpus
from bench.documents import odfpy_pass, plain_pass, samples, source_text
from proxy.documents.cache import DocumentCache
from proxy.documents.job import Job, Unit
from proxy.documents.ocr import ocr_status
from proxy.documents.parser import DocumentParser
from proxy.documents.readers.dispatch import extract_units
from proxy.documents.readers.pdf import _mupdf

CORPUS = (default_corpus() or Path("shared-corpus-not-found")) / "pdf"  # main sets it
FILES = ("GeoTopo-komprimiert.pdf", "freeculture.pdf", "chinese-tables.pdf")
SCAN = "test_3863.pdf"
OCR_PAGES = 4
RUNS = 5
TABLES = "DocumentParser.parse()"
PLAIN = "  same, pdf_tables: false"


def cpu_seconds(pids: list[int]) -> float:
    """CPU time of this process plus `pids`: unlike wall time, other load does not inflate it."""
    ticks = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])
    return time.process_time() + ticks / os.sysconf("SC_CLK_TCK")


def raw_seconds(data: bytes, every_page_tables: bool = False) -> tuple[float, float]:
    """Wall and CPU seconds of plain `page.get_text()` over every page, in this process
    (and of PyMuPDF's table finder on every page, if asked)."""
    cpu, started = time.process_time(), time.perf_counter()
    with _mupdf.open(stream=data, filetype="pdf") as document:
        for page in document:
            page.get_text()
            if every_page_tables:
                page.find_tables()
    return time.perf_counter() - started, time.process_time() - cpu


async def ours_seconds(
    parser: DocumentParser, name: str, data: bytes, cache: Path, tables: bool = True
) -> tuple[float, float]:
    """A full parse (size check, detect, sha256, worker, cache write) with an empty cache."""
    parser.cache = DocumentCache(cache)
    parser.limits = replace(parser.limits, pdf_tables=tables)
    pids = parser.pool.pids()
    cpu, started = cpu_seconds(pids), time.perf_counter()
    await parser.parse(name, data)
    return time.perf_counter() - started, cpu_seconds(pids) - cpu


async def memory_hit_ms(parser: DocumentParser, data: bytes) -> float:
    timings = []
    for n in range(20):
        started = time.perf_counter()
        await parser.parse(f"renamed-{n}.pdf", data)
        timings.append((time.perf_counter() - started) * 1000)
    return statistics.median(timings)


async def disk_hit_ms(cache: Path, data: bytes) -> list[float]:
    """A fresh parser per call, so only the on-disk entry can answer (no worker is started)."""
    timings = []
    for _ in range(10):
        parser = DocumentParser(cache, workers=1)
        started = time.perf_counter()
        await parser.parse("from-disk.pdf", data)
        timings.append((time.perf_counter() - started) * 1000)
        assert parser.pool.jobs == 0
        await parser.close()
    return timings


def _line(label: str, pages: int, walls: list[float], cpus: list[float], raw: float) -> str:
    best = min(walls)
    return (
        f"  {label:<26}{pages / best:6.0f} pages/s  best {best:.3f} s"
        f"  median {statistics.median(walls):.3f} s  CPU {min(cpus):.3f} s"
        f"  ratio to raw {raw / best:.2f}x"
    )


async def ocr_pages_per_second(scratch: Path) -> None:
    path = CORPUS / SCAN
    status = ocr_status("auto", ["eng"], 300, OCR_PAGES)
    if not path.exists() or status.options is None:
        print(f"OCR: skipped ({status.describe()}, {path.name} present: {path.exists()})")
        return
    data = path.read_bytes()
    parser = DocumentParser(scratch / "ocr", workers=1, ocr=status)
    await parser.start()
    started = time.perf_counter()
    document = await parser.parse(SCAN, data)
    wall = time.perf_counter() - started
    await parser.close()
    with _mupdf.open(stream=data, filetype="pdf") as scan:
        raw_started = time.perf_counter()
        for index in range(OCR_PAGES):
            page = scan.load_page(index)
            textpage = page.get_textpage_ocr(
                language="eng", dpi=300, full=True, tessdata=status.options.tessdata
            )
            page.get_text(textpage=textpage)
        raw = time.perf_counter() - raw_started
    print(
        f"OCR, {SCAN} (scanned forms), first {OCR_PAGES} pages at 300 dpi, eng:\n"
        f"  DocumentParser.parse()   {len(document.ocr_pages) / wall:6.2f} pages/s"
        f"  ({wall:.2f} s, {len(document.text)} characters read)\n"
        f"  raw get_textpage_ocr()   {OCR_PAGES / raw:6.2f} pages/s  ({raw:.2f} s)"
    )


FORMAT_RUNS = 3


def _cpu(work: Callable[[], object]) -> float:
    started = time.process_time()
    work()
    return time.process_time() - started


async def formats(scratch: Path) -> None:
    """Ours against the library's plain pass, every kind, interleaved runs, best CPU time."""
    _, source = source_text()
    print(f"Every format: large documents from {source}; best of {FORMAT_RUNS} interleaved runs")
    print(
        f"(load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; CPU seconds, so"
        " other load inflates them less than wall time)"
    )
    parser = DocumentParser(scratch / "formats", workers=1)
    await parser.start()
    header = (
        f"  {'kind':<9}{'document':<28}{'size':>8}{'chars':>10}{'plain':>8}{'ours':>8}"
        f"{'ratio':>7}{'parse()':>9}{'CPU':>7}   plain pass"
    )
    print(header)
    for sample in samples(scratch):
        job = Job(sample.kind, sample.name)
        chars = 0
        plains, ours, walls, cpus = [], [], [], []
        kind, data = sample.kind, sample.data
        for run in range(FORMAT_RUNS):
            plains.append(_cpu(partial(plain_pass, kind, data)))
            units: list[Unit] = []
            # extract_units is a generator: its work happens inside extend, inside _cpu.
            ours.append(_cpu(partial(units.extend, extract_units(kind, data, job))))
            chars = sum(len(unit.text) for unit in units)
            parser.cache = DocumentCache(scratch / f"formats-{sample.name}-{run}")
            pids = parser.pool.pids()
            cpu, started = cpu_seconds(pids), time.perf_counter()
            await parser.parse(sample.name, sample.data)
            walls.append(time.perf_counter() - started)
            cpus.append(cpu_seconds(pids) - cpu)
        plain, our = min(plains), min(ours)
        print(
            f"  {sample.kind:<9}{sample.name[:27]:<28}{len(sample.data) / 1e6:7.2f}M"
            f"{chars:>10,}{plain:8.2f}{our:8.2f}{our / plain:6.2f}x{min(walls):8.2f}s"
            f"{min(cpus):6.2f}s   "
            f"{sample.plain}"
        )
        if sample.kind in ("ods", "odt"):
            odfpy = min(_cpu(partial(odfpy_pass, data)) for _ in range(2))
            print(f"  {'':<45}odfpy load + every paragraph's text: {odfpy:.2f} s")
    await parser.close()
    print(
        "  plain/ours: CPU seconds in this process (ours = the worker's extraction into units);\n"
        "  parse() = DocumentParser.parse with a cold cache, wall (worker, frames, cache write),"
        " and CPU of this process and the worker"
    )


async def main() -> None:
    global CORPUS
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("parts", nargs="*", help="formats, pdf (default: both)")
    add_corpus_option(parser)
    args = parser.parse_args()
    chosen = set(args.parts) or {"formats", "pdf"}
    if chosen - {"formats", "pdf"}:
        parser.error(f"unknown part {sorted(chosen - {'formats', 'pdf'})}: formats or pdf")
    corpus = find_corpus(args.corpus, required=False)
    if corpus is not None:
        CORPUS = corpus / "pdf"
        bench.documents.CORPUS = corpus
    if "formats" in chosen:
        with tempfile.TemporaryDirectory() as scratch_dir:
            await formats(Path(scratch_dir))
    if "pdf" in chosen:
        await pdf_speed()


async def pdf_speed() -> None:
    present = [CORPUS / file for file in FILES if (CORPUS / file).exists()]
    if not present:
        print(f"skipped: none of {', '.join(FILES)} under {CORPUS}")
        return
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        parser = DocumentParser(scratch / "ours", workers=2)
        started = time.perf_counter()
        await parser.start()
        print(f"worker pool start-up (2 workers, ready): {time.perf_counter() - started:.2f} s")
        print(
            f"best of {RUNS} interleaved runs, cold cache for ours; CPU = this process + workers"
            f" (load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
        )
        for path in present:
            data = path.read_bytes()
            with _mupdf.open(stream=data, filetype="pdf") as document:
                pages = document.page_count
            walls: dict[str, list[float]] = {"raw": [], TABLES: [], PLAIN: []}
            cpus: dict[str, list[float]] = {"raw": [], TABLES: [], PLAIN: []}
            for run in range(RUNS):
                for label in walls:
                    cache = scratch / f"{path.name}-{len(label)}-{run}"
                    if label == "raw":
                        wall, cpu = raw_seconds(data)
                    else:
                        tables = label == TABLES
                        wall, cpu = await ours_seconds(parser, path.name, data, cache, tables)
                    walls[label].append(wall)
                    cpus[label].append(cpu)
            every_wall, every_cpu = raw_seconds(data, every_page_tables=True)
            raw = min(walls["raw"])
            print(f"{path.name}: {pages} pages")
            for name in walls:
                shown = "raw pymupdf get_text()" if name == "raw" else name
                print(_line(shown, pages, walls[name], cpus[name], raw))
            print(_line("raw + find_tables() all", pages, [every_wall], [every_cpu], raw))
            memory = await memory_hit_ms(parser, data)
            disk = await disk_hit_ms(scratch / f"{path.name}-{len(TABLES)}-0", data)
            print(
                f"  cached, in-memory LRU     {memory:.2f} ms (median of 20)\n"
                f"  cached, disk entry        {statistics.median(disk):.2f} ms"
                f" (median of 10 fresh parsers; first {disk[0]:.2f} ms)"
            )
        await parser.close()
        await ocr_pages_per_second(scratch)


if __name__ == "__main__":
    asyncio.run(main())
