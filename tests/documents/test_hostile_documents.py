"""Hostile documents through the proxy: a clear 4xx naming the file or a correct answer.

Never a 5xx, never a hang; the proxy keeps answering other requests while a hostile document
is parsed, and its own memory (the proxy runs in this process; parsers in child processes)
stays bounded.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import threading
import uuid
import zipfile
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docx
import httpx
import pytest

from tests.fakes.upstream import FakeUpstream

HANG_GUARD_S = 120.0
PARSE_TIMEOUT_S = 10.0
RSS_BOUND_MB = 500.0
CHAT = "/v1/chat/completions"


# -- helpers ----------------------------------------------------------------------------------


def file_part(name: str, data: bytes, mime: str = "application/octet-stream") -> dict[str, Any]:
    encoded = base64.b64encode(data).decode()
    return {
        "type": "file",
        "file": {"filename": name, "file_data": f"data:{mime};base64,{encoded}"},
    }


def ask(name: str, data: bytes, tag: str = "") -> dict[str, Any]:
    # Forced full content: these tests are about parsing, not about the vector store.
    question = {"type": "text", "text": f"Summarise. {tag}"}
    return {
        "model": "m",
        "messages": [{"role": "user", "content": [question, file_part(name, data)]}],
        "enrich": {"strategy": "inject-full-content"},
    }


def chats(upstream: FakeUpstream, tag: str = "") -> int:
    """Chat requests the upstream received (with `tag` in them, when given)."""
    return sum(1 for r in upstream.requests if r.path == CHAT and tag.encode() in r.body)


def check_outcome(response: httpx.Response, name: str) -> str:
    """ "ok" for a 200, else the error code of a clear 4xx whose message names the file."""
    where = f"{name}: {response.status_code} {response.text[:300]}"
    assert response.status_code < 500, where
    if response.status_code == 200:
        return "ok"
    assert 400 <= response.status_code < 500, where
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, where
    assert name in error["message"], where
    return str(error["code"])


@dataclass(frozen=True)
class Prepared:
    """A request body encoded ahead of time, so that measuring RSS counts the proxy, not us."""

    name: str
    tag: str
    body: bytes
    expect: str | None = None  # text the document must have brought to the upstream


def prepare(name: str, data: bytes, expect: str | None = None) -> Prepared:
    tag = f"[request {uuid.uuid4().hex}]"
    return Prepared(name, tag, json.dumps(ask(name, data, tag)).encode(), expect)


def injected_text(upstream: FakeUpstream, prepared: Prepared) -> str:
    """The document's text as the upstream received it: its `** full content **` block."""
    [sent] = [r for r in upstream.to(CHAT) if prepared.tag.encode() in r.body]
    prompt = sent.json["messages"][-1]["content"][0]["text"]
    opening = f"** {prepared.name} full content **\n\n"
    closing = f"\n\n** end of {prepared.name} **"
    assert opening in prompt and closing in prompt, f"{prepared.name}: {prompt[:300]!r}"
    return str(prompt.split(opening, 1)[1].rsplit(closing, 1)[0])


def submit(base: str, upstream: FakeUpstream, prepared: Prepared) -> str:
    """Post one document; its outcome, having checked the upstream saw it only on success,
    and then with the document's text in it."""
    response = httpx.post(
        base + CHAT,
        content=prepared.body,
        headers={"Content-Type": "application/json"},
        timeout=HANG_GUARD_S,
    )
    outcome = check_outcome(response, prepared.name)
    called = chats(upstream, prepared.tag)
    assert called == (1 if outcome == "ok" else 0), f"{prepared.name}: {outcome}, called {called}"
    if outcome == "ok":
        text = injected_text(upstream, prepared)
        assert text.strip(), f"{prepared.name}: answered, but with no text of the document"
        if prepared.expect is not None:
            assert prepared.expect in text, f"{prepared.name}: {text[:300]!r}"
    print(f"{prepared.name}: {outcome}")
    return outcome


def send(
    base: str, upstream: FakeUpstream, name: str, data: bytes, expect: str | None = None
) -> str:
    return submit(base, upstream, prepare(name, data, expect))


def plain_chat_ok(base: str) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "still there?"}]}
    response = httpx.post(base + CHAT, json=body, timeout=HANG_GUARD_S)
    assert response.status_code == 200, response.text


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@contextmanager
def peak_rss_growth() -> Iterator[list[float]]:
    """Samples this process's RSS while the block runs; yields [growth in MB] when done."""
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc (Linux)")
    baseline = rss_mb()
    peak = [baseline]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.02):
            peak[0] = max(peak[0], rss_mb())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    result: list[float] = []
    try:
        yield result
    finally:
        stop.set()
        sampler.join()
        peak[0] = max(peak[0], rss_mb())
        result.append(peak[0] - baseline)


def concurrently_responsive(base: str, upstream: FakeUpstream, prepared: Prepared) -> str:
    """Send the hostile document and, while it is being handled, a plain chat that must work."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        hostile = pool.submit(submit, base, upstream, prepared)
        plain_chat_ok(base)
        overlapped = not hostile.done()
        outcome = hostile.result(timeout=HANG_GUARD_S)
    print(f"{prepared.name}: {outcome}; plain chat answered while it ran: {overlapped}")
    return outcome


def raw_pdf(objects: list[bytes]) -> bytes:
    """A PDF with a correct xref table: object i+1 is objects[i]; object 1 is the catalog."""
    out = io.BytesIO()
    out.write(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\n" % (len(objects) + 1))
    out.write(b"startxref\n%d\n%%%%EOF\n" % xref)
    return out.getvalue()


def pdf_with_pages(pages: int, content: bytes, content_dict: bytes = b"") -> bytes:
    """`pages` pages sharing one content stream (object 4)."""
    first_page = 5
    kids = b" ".join(b"%d 0 R" % (first_page + i) for i in range(pages))
    page = (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
        b" /Resources << /Font << /F1 3 0 R >> >> >>"
    )
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< "
        + content_dict
        + b" /Length %d >>\nstream\n" % len(content)
        + content
        + b"\nendstream",
        *([page] * pages),
    ]
    return raw_pdf(objects)


def text_stream(text: str) -> bytes:
    return b"BT /F1 12 Tf 72 720 Td (" + text.encode() + b") Tj ET"


# -- the shared corpus ------------------------------------------------------------------------


def manifest(corpus_dir: Path) -> list[str]:
    with (corpus_dir / "MANIFEST.tsv").open(newline="") as handle:
        return [row["file"] for row in csv.DictReader(handle, delimiter="\t")]


# What some corpus documents must bring to the upstream (their opening words).
KNOWN_TEXT = {
    "pdf/tracemonkey.pdf": "Trace-based Just-in-Time Type Specialization for Dynamic",
    "epub/alice.epub": "Alice's Adventures In Wonderland",
    "text/tinyshakespeare.txt": "First Citizen:\nBefore we proceed any further, hear me speak.",
}


def test_every_corpus_document(
    make_proxy: Callable[..., str], upstream: FakeUpstream, corpus_dir: Path
) -> None:
    # A context window large enough for any corpus document injected in full.
    base = make_proxy(
        documents={"parse_timeout_s": 30},
        models={"*": {"context_length": 50_000_000}},
    )
    files = manifest(corpus_dir)
    assert len(files) >= 40
    outcomes: dict[str, str] = {}

    def one(file: str) -> None:
        path = corpus_dir / file
        outcomes[file] = send(base, upstream, path.name, path.read_bytes(), KNOWN_TEXT.get(file))

    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(one, files))
    ok = sorted(f for f, o in outcomes.items() if o == "ok")
    refused = {f: o for f, o in outcomes.items() if o != "ok"}
    print(f"corpus: {len(ok)} answered, {len(refused)} refused: {refused}")
    for readable in ("pdf/tracemonkey.pdf", "epub/alice.epub", "text/tinyshakespeare.txt"):
        assert outcomes[readable] == "ok"
    for broken, code in (
        ("pdf_broken/zero-bytes.pdf", "empty_file"),
        ("pdf/libreoffice-writer-password.pdf", "encrypted_document"),
        ("other/test_open2.doc", "unsupported_format"),
    ):
        assert outcomes[broken] == code
    # A PNG named .pdf is an image: read by OCR when it is on (a smiley has no text).
    assert outcomes["pdf_broken/smile-png-named.pdf"] in ("image_not_document", "no_text")
    plain_chat_ok(base)


# -- generated hostile documents --------------------------------------------------------------


@pytest.fixture
def hostile_proxy(make_proxy: Callable[..., str]) -> str:
    return make_proxy(
        documents={"parse_timeout_s": PARSE_TIMEOUT_S, "max_pages": 1000},
        models={"*": {"context_length": 50_000_000}},
    )


@pytest.mark.slow
def test_many_pages_hit_the_page_limit(hostile_proxy: str, upstream: FakeUpstream) -> None:
    data = pdf_with_pages(20_000, b"")
    assert send(hostile_proxy, upstream, "pages.pdf", data) == "too_many_pages"
    # Just under the limit is fine (each page says the same thing).
    data = pdf_with_pages(999, text_stream("page text"))
    assert send(hostile_proxy, upstream, "fine.pdf", data, "page text") == "ok"


def test_a_page_count_that_lies(hostile_proxy: str, upstream: FakeUpstream) -> None:
    data = pdf_with_pages(1, text_stream("one real page")).replace(
        b"/Count 1 ", b"/Count 1000000000 "
    )
    outcome = send(hostile_proxy, upstream, "liar.pdf", data, "one real page")
    assert outcome in {"ok", "too_many_pages", "corrupt_document"}


@pytest.mark.slow
def test_decompression_bomb(hostile_proxy: str, upstream: FakeUpstream) -> None:
    # 300 MiB of spaces after a line of text, flate-compressed to ~300 KiB.
    squeeze = zlib.compressobj(9)
    pieces = [squeeze.compress(text_stream("bomb text") + b"\n")]
    spaces = b" " * (1 << 20)
    pieces += [squeeze.compress(spaces) for _ in range(300)]
    pieces.append(squeeze.flush())
    data = pdf_with_pages(1, b"".join(pieces), b"/Filter /FlateDecode")
    assert len(data) < 1 << 20
    prepared = prepare("bomb.pdf", data, "bomb text")
    with peak_rss_growth() as growth:
        outcome = concurrently_responsive(hostile_proxy, upstream, prepared)
    print(f"bomb.pdf: parent RSS growth {growth[0]:.1f} MB")
    assert outcome in {"ok", "parse_timeout", "document_too_large", "no_text"}
    assert growth[0] < RSS_BOUND_MB
    plain_chat_ok(hostile_proxy)


def test_a_stream_claiming_a_gigabyte(hostile_proxy: str, upstream: FakeUpstream) -> None:
    content = text_stream("short stream")
    data = pdf_with_pages(1, content).replace(
        b"/Length %d >>" % len(content), b"/Length 1073741824 >>"
    )
    outcome = send(hostile_proxy, upstream, "giga.pdf", data, "short stream")
    assert outcome in {"ok", "corrupt_document", "no_text"}
    plain_chat_ok(hostile_proxy)


@pytest.mark.slow
def test_deeply_nested_html(hostile_proxy: str, upstream: FakeUpstream) -> None:
    depth = 50_000
    html = "<html><body>" + "<div>" * depth + "deep html text" + "</div>" * depth + "</body></html>"
    prepared = prepare("deep.html", html.encode())
    with peak_rss_growth() as growth:
        outcome = concurrently_responsive(hostile_proxy, upstream, prepared)
    # Refused from a linear scan of the tags, before lexbor's quadratic tree building.
    assert outcome == "corrupt_document"
    assert growth[0] < RSS_BOUND_MB


def test_deeply_nested_docx(hostile_proxy: str, upstream: FakeUpstream) -> None:
    document = docx.Document()
    document.add_paragraph("shallow docx text")
    buffer = io.BytesIO()
    document.save(buffer)
    depth = 20_000
    nested = (
        "<w:sdt><w:sdtContent>" * depth
        + "<w:p><w:r><w:t>deep docx text</w:t></w:r></w:p>"
        + "</w:sdtContent></w:sdt>" * depth
    )
    source = zipfile.ZipFile(io.BytesIO(buffer.getvalue()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for item in source.infolist():
            content = source.read(item.filename)
            if item.filename == "word/document.xml":
                content = content.replace(b"<w:sectPr", nested.encode() + b"<w:sectPr", 1)
            target.writestr(item, content)
    outcome = send(hostile_proxy, upstream, "deep.docx", out.getvalue(), "shallow docx text")
    assert outcome in {"ok", "corrupt_document", "invalid_document"}
    plain_chat_ok(hostile_proxy)


def test_deeply_nested_json_text(hostile_proxy: str, upstream: FakeUpstream) -> None:
    depth = 200_000
    data = ("[" * depth + '"deep json text"' + "]" * depth).encode()
    # One 400 kB line of brackets is text: it parses into pages like any other.
    assert send(hostile_proxy, upstream, "deep.json", data, '"deep json text"') == "ok"


@pytest.mark.slow
def test_a_huge_text_of_one_repeated_line(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(documents={"parse_timeout_s": 30})  # defaults: 50 MiB, 5M chars
    line = b"All work and no play makes Jack a dull boy.\n"
    data = line * (40 * 1024 * 1024 // len(line))
    prepared = prepare("jack.txt", data)
    del data
    with peak_rss_growth() as growth:
        outcome = concurrently_responsive(base, upstream, prepared)
    print(f"jack.txt (40 MiB): parent RSS growth {growth[0]:.1f} MB")
    # 40 MiB of text is over documents.max_chars (5M) and, cut into pages, over max_pages.
    assert outcome in {"too_much_text", "too_many_pages"}
    assert growth[0] < RSS_BOUND_MB


def test_a_file_over_max_file_mb(make_proxy: Callable[..., str], upstream: FakeUpstream) -> None:
    base = make_proxy(documents={"max_file_mb": 1})
    assert send(base, upstream, "big.txt", b"x" * (2 * 1024 * 1024)) == "file_too_large"


def test_zero_bytes_and_wrong_extensions(hostile_proxy: str, upstream: FakeUpstream) -> None:
    pdf = pdf_with_pages(1, text_stream("a real pdf"))
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
    document = docx.Document()
    document.add_paragraph("a real docx")
    buffer = io.BytesIO()
    document.save(buffer)
    cases: dict[str, tuple[bytes, set[str], str | None]] = {
        "empty.txt": (b"", {"empty_file"}, None),
        "pdf-named.txt": (pdf, {"ok"}, "a real pdf"),
        "pdf-named.docx": (pdf, {"ok"}, "a real pdf"),
        # An image (a broken one here): refused as such, or, with OCR on, as unreadable.
        "png-named.pdf": (png, {"image_not_document", "corrupt_document"}, None),
        "docx-named.pdf": (buffer.getvalue(), {"ok"}, "a real docx"),
        # Content over the declared type: text named .pdf is read as the text it is.
        "text-named.pdf": (b"just some text", {"ok"}, "just some text"),
        "binary-named.pdf": (bytes(range(256)) * 4, {"corrupt_document"}, None),
        "binary-named.txt": (bytes(range(256)) * 4, {"unsupported_format"}, None),
    }
    for name, (data, expected, text) in cases.items():
        assert send(hostile_proxy, upstream, name, data, text) in expected, name
    plain_chat_ok(hostile_proxy)
