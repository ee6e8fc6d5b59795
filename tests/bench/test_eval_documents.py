"""bench/eval/documents.py: sources, the document list, fetching, conversions and checks."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import docx
import openpyxl
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "eval"))

import documents  # noqa: E402
from documents import (  # noqa: E402
    Document,
    DocumentError,
    Wanted,
    fetch,
    load_documents,
    parse_source,
    select,
    split_convert,
    to_docx,
    to_xlsx,
)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------------
# Sources


def test_sources_of_every_registry_parse() -> None:
    corpus = parse_source("corpus:pdf/freeculture.pdf")
    assert (corpus.scheme, corpus.paths[0].pattern) == ("corpus", "pdf/freeculture.pdf")

    apt = parse_source("apt:installation-guide-amd64=20230508+deb12u1:usr/share/doc/x/ru/*.html")
    assert (apt.scheme, apt.package, apt.version) == (
        "apt",
        "installation-guide-amd64",
        "20230508+deb12u1",
    )
    assert apt.paths[0].matches("./usr/share/doc/x/ru/ch01.html")
    assert not apt.paths[0].matches("usr/share/doc/x/de/ch01.html")

    pypi = parse_source("pypi:some-dist==1.2.0:pkg/data/table.csv")
    assert (pypi.package, pypi.version, pypi.paths[0].pattern) == (
        "some-dist",
        "1.2.0",
        "pkg/data/table.csv",
    )

    npm = parse_source("npm:@scope/name@2.0.1:docs/faq.md")
    assert (npm.package, npm.version) == ("@scope/name", "2.0.1")


def test_several_paths_named_sheets_and_folders() -> None:
    source = parse_source("apt:iso-codes=4.15.0-1:a/one.json as Countries + a/two.json + docs/")
    assert [(w.pattern, w.name) for w in source.paths] == [
        ("a/one.json", "Countries"),
        ("a/two.json", None),
        ("docs/", None),
    ]
    assert source.paths[2].matches("docs/sub/page.html")
    assert not source.paths[2].matches("docsx/page.html")


def test_a_conversion_is_read_from_the_source_text() -> None:
    assert split_convert("apt:x=1:a.html, convert: docx") == ("apt:x=1:a.html", "docx")
    assert split_convert("apt:x=1:a.csv; convert=XLSX") == ("apt:x=1:a.csv", "xlsx")
    assert split_convert("corpus:pdf/a.pdf") == ("corpus:pdf/a.pdf", None)


def test_a_source_without_a_version_is_refused() -> None:
    with pytest.raises(DocumentError, match="no version"):
        parse_source("apt:iso-codes:usr/share/x.json")
    with pytest.raises(DocumentError, match="expected corpus"):
        parse_source("http://example.org/a.pdf")


# ---------------------------------------------------------------------------------------------
# The document list


def write(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value), encoding="utf-8")


def test_the_halves_come_from_the_file_names_and_split_entries_are_merged(tmp_path: Path) -> None:
    write(tmp_path / "tuning.json", {"documents": {"a": {"file": "a.pdf", "source": "corpus:a"}}})
    # the held-out half may keep its sources beside its questions, in a file of its own
    write(tmp_path / "heldout.json", {"documents": {"b": {"file": "b.docx", "lang": "ru"}}})
    write(tmp_path / "heldout_sources.json", [{"id": "b", "source": "apt:p=1:x.html"}])
    found = {d.id: d for d in load_documents(tmp_path)}
    assert (found["a"].half, found["b"].half) == ("tuning", "heldout")
    assert (found["b"].file, found["b"].lang, found["b"].source) == (
        "b.docx",
        "ru",
        "apt:p=1:x.html",
    )
    assert [d.id for d in load_documents(tmp_path, ["tuning"])] == ["a"]


def test_one_document_in_both_halves_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "tuning.json", {"documents": {"a": {"file": "a.pdf", "source": "corpus:a"}}})
    write(tmp_path / "heldout.json", {"documents": {"a": {"file": "a.pdf", "source": "corpus:a"}}})
    with pytest.raises(DocumentError, match="both the heldout and tuning halves"):
        load_documents(tmp_path)


def test_the_tuning_half_lists_its_documents_with_sources_and_checksums() -> None:
    tuning = load_documents(ROOT / "bench" / "eval", ["tuning"])
    assert len(tuning) >= 7
    for document in tuning:
        parse_source(document.source)
        assert len(document.sha256) == 64, document.id
        assert document.licence and document.kind and document.lang


# ---------------------------------------------------------------------------------------------
# Conversions

PAGE = """<html><head><title>Guide</title><link rel="next" href="appendix.html"></head><body>
<div class="navheader"><table><tr><td>Prev</td><td>Next</td></tr></table></div>
<div class="toc"><p>1. Start ... 2. End</p></div>
<h1>Chapter 1. Start</h1>
<p>Plain <b>bold</b> and <code>code</code> text.</p>
<div class="note"><table summary="Note"><tr><th>Note</th></tr>
<tr><td><p>Mind the gap.</p></td></tr></table></div>
<p class="title"><b>Table 1.1. Sizes</b></p>
<table><thead><tr><th>Kind</th><th>Size</th></tr></thead>
<tbody><tr><td>small</td><td>1 MB</td></tr>
<tr><td colspan="2">spanning row</td></tr></tbody></table>
<ul><li>first item</li><li>second item<ul><li>nested</li></ul></li></ul>
<pre>line one
line two</pre>
</body></html>"""

NEXT = """<html><head><link rel="prev" href="index.html"></head><body>
<h2>Chapter 2. End</h2><p>Last words.</p></body></html>"""


def files(*items: tuple[str, str]) -> list[tuple[Wanted, str, bytes]]:
    return [(Wanted(path), path, text.encode()) for path, text in items]


def test_html_pages_become_one_docx_in_reading_order() -> None:
    data = to_docx(files(("ru/appendix.html", NEXT), ("ru/index.html", PAGE)))
    document = docx.Document(io.BytesIO(data))
    paragraphs = [(p.style.name, p.text) for p in document.paragraphs if p.text.strip()]
    texts = [text for _, text in paragraphs]
    # index.html, then where its rel="next" leads (not the alphabetical order)
    assert texts.index("Chapter 1. Start") < texts.index("Chapter 2. End")
    assert ("Heading 1", "Chapter 1. Start") in paragraphs
    assert ("Heading 2", "Chapter 2. End") in paragraphs
    assert ("Caption", "Table 1.1. Sizes") in paragraphs
    assert ("List Bullet", "first item") in paragraphs
    assert ("List Bullet 2", "nested") in paragraphs
    assert "Mind the gap." in texts  # a DocBook note is text, not a table
    assert not any("Prev" in t or "1. Start ..." in t for t in texts)  # navigation, toc dropped
    bold = [run.text for p in document.paragraphs for run in p.runs if run.bold]
    assert "bold" in bold
    assert any("line one" in t and "line two" in t for t in texts)
    assert document.core_properties.title == "Guide"
    (table,) = document.tables
    assert [c.text for c in table.rows[0].cells] == ["Kind", "Size"]
    assert all(run.bold for run in table.rows[0].cells[0].paragraphs[0].runs)
    assert [c.text for c in table.rows[1].cells] == ["small", "1 MB"]
    assert table.rows[2].cells[0].text == "spanning row"
    assert table.rows[2].cells[0]._tc is table.rows[2].cells[1]._tc  # merged


def test_conversions_are_reproducible() -> None:
    pages = files(("index.html", PAGE), ("appendix.html", NEXT))
    assert to_docx(pages) == to_docx(pages)
    sheets = files(("a.csv", "x,y\n1,2\n"))
    assert to_xlsx(sheets) == to_xlsx(sheets)
    with zipfile.ZipFile(io.BytesIO(to_xlsx(sheets))) as zipped:
        assert {info.date_time for info in zipped.infolist()} == {documents.FIXED_DATE}
        # openpyxl stamps the time of saving over what it was told: both dates are fixed
        assert zipped.read("docProps/core.xml").count(b"2000-01-01T00:00:00Z") == 2


def test_json_records_and_csv_become_named_sheets() -> None:
    records = {
        "4217": [
            {"alpha_3": "CHF", "name": "Swiss Franc", "numeric": "756"},
            {"alpha_3": "XDR", "name": "SDR", "numeric": "960", "note": "IMF"},
        ]
    }
    source = [
        (Wanted("cur.json", "Currencies (ISO 4217)"), "cur.json", json.dumps(records).encode()),
        (Wanted("t.csv"), "t.csv", b"a;b\n1;2\n"),
    ]
    workbook = openpyxl.load_workbook(io.BytesIO(to_xlsx(source)))
    assert workbook.sheetnames == ["Currencies (ISO 4217)", "t"]
    sheet = workbook["Currencies (ISO 4217)"]
    rows = [[cell.value for cell in row] for row in sheet.iter_rows()]
    assert rows[0] == ["alpha_3", "name", "numeric", "note"]
    assert rows[2] == ["XDR", "SDR", "960", "IMF"]
    assert sheet["A1"].font.bold
    # values stay text: codes such as "004" keep their zeros
    assert [[c.value for c in r] for r in workbook["t"].iter_rows()] == [["a", "b"], ["1", "2"]]


# ---------------------------------------------------------------------------------------------
# Fetching from a package and checking


def make_deb(folder: Path, name: str, version: str, content: dict[str, bytes]) -> Path:
    root = folder / "root"
    for path, data in content.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: all\n"
        "Maintainer: t <t@example.org>\nDescription: test\n"
    )
    deb = folder / f"{name}_{version}_all.deb"
    subprocess.run(["dpkg-deb", "--build", "-Zgzip", str(root), str(deb)], check=True,
                   capture_output=True)  # fmt: skip
    return deb


@pytest.fixture
def deb(tmp_path: Path) -> Path:
    if shutil.which("dpkg-deb") is None:
        pytest.skip("dpkg-deb is not installed")
    content = {
        "usr/share/doc/guide/index.html": PAGE.encode(),
        "usr/share/doc/guide/appendix.html": NEXT.encode(),
        "usr/share/doc/guide/style.css": b"p {}",
    }
    return make_deb(tmp_path / "build", "guide", "1.0-1", content)


def apt_runner(deb: Path, calls: list[list[str]]) -> Any:
    """Stands in for `apt-get download`: puts the package where apt-get would."""

    def run(argv: list[str], cwd: Path) -> None:
        calls.append(argv)
        shutil.copy(deb, cwd / deb.name)

    return run


def entry(**fields: Any) -> Document:
    base = {"id": "guide", "half": "tuning", "file": "guide.docx", "sha256": ""}
    base["source"] = "apt:guide=1.0-1:usr/share/doc/guide/*.html, convert: docx"
    base.update(fields)
    source, convert = split_convert(base.pop("source"))
    return Document(source=source, convert=convert, **base)


def test_a_package_is_downloaded_once_converted_and_checked(tmp_path: Path, deb: Path) -> None:
    calls: list[list[str]] = []
    cache = tmp_path / "cache"
    made = fetch(entry(), cache, runner=apt_runner(deb, calls))
    assert calls == [["apt-get", "download", "guide=1.0-1"]]
    assert made.status == "mismatch"  # no sha256 recorded yet
    data = made.path.read_bytes()
    assert made.path == cache / "documents" / "guide" / "guide.docx"
    texts = [p.text for p in docx.Document(io.BytesIO(data)).paragraphs]
    assert "Chapter 1. Start" in texts and "Chapter 2. End" in texts  # css left out

    recorded = entry(sha256=sha(data), source_sha256=sha(deb.read_bytes()))
    again = fetch(recorded, cache, runner=apt_runner(deb, calls), refresh=True)
    assert again.status == "ok" and again.usable
    assert len(calls) == 1  # the .deb was kept

    # another python-docx makes other bytes: the source still checks, the difference is said
    differs = fetch(entry(sha256="0" * 64, source_sha256=sha(deb.read_bytes())), cache)
    assert differs.status == "converted differs" and differs.usable
    assert "python-docx" in differs.detail

    wrong = fetch(entry(sha256="0" * 64, source_sha256="1" * 64), cache)
    assert wrong.status == "mismatch" and not wrong.usable


def test_a_recorded_source_checksum_is_enough_for_a_single_file(tmp_path: Path, deb: Path) -> None:
    calls: list[list[str]] = []
    document = entry(
        file="index.html",
        source="apt:guide=1.0-1:usr/share/doc/guide/index.html",
        sha256=sha(PAGE.encode()),
    )
    made = fetch(document, tmp_path / "cache", runner=apt_runner(deb, calls))
    assert made.status == "ok"  # copied as it is: the file is the source
    assert made.path.read_bytes() == PAGE.encode()


def test_a_gzipped_member_is_decompressed_unless_the_file_keeps_the_suffix(
    tmp_path: Path,
) -> None:
    if shutil.which("dpkg-deb") is None:
        pytest.skip("dpkg-deb is not installed")
    text = b"1.1 What is it?\n\n  A tool. Debian compresses documentation like this.\n"
    packed = gzip.compress(text, mtime=0)
    deb = make_deb(tmp_path / "build", "faq", "2.0-1", {"usr/share/doc/faq/FAQ.gz": packed})
    calls: list[list[str]] = []
    source = "apt:faq=2.0-1:usr/share/doc/faq/FAQ.gz"
    plain = entry(id="faq", file="faq.txt", source=source, sha256=sha(text))
    made = fetch(plain, tmp_path / "cache", runner=apt_runner(deb, calls))
    assert made.status == "ok" and made.path.read_bytes() == text
    kept = entry(id="faq-gz", file="FAQ.gz", source=source, sha256=sha(packed))
    made = fetch(kept, tmp_path / "cache", runner=apt_runner(deb, calls))
    assert made.status == "ok" and made.path.read_bytes() == packed


def test_a_missing_path_names_itself(tmp_path: Path, deb: Path) -> None:
    document = entry(source="apt:guide=1.0-1:usr/share/doc/guide/missing.pdf")
    with pytest.raises(DocumentError, match=r"missing\.pdf"):
        fetch(document, tmp_path / "cache", runner=apt_runner(deb, []))


def test_npm_and_sdist_paths_match_without_their_top_folder(tmp_path: Path) -> None:
    tgz = tmp_path / "name-2.0.1.tgz"
    with tarfile.open(tgz, "w:gz") as tar:
        data = b"# FAQ\n"
        info = tarfile.TarInfo("package/docs/faq.md")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    source = parse_source("npm:name@2.0.1:docs/faq.md")
    ((_, path, content),) = select(documents.members(tgz), source)
    assert (path, content) == ("docs/faq.md", b"# FAQ\n")

    wheel = tmp_path / "dist-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zipped:
        zipped.writestr("dist/data/a.csv", "x,y\n")
    found = select(documents.members(wheel), parse_source("pypi:dist==1.0:dist/data/a.csv"))
    assert found[0][2] == b"x,y\n"


def test_the_listing_says_what_is_fetched(tmp_path: Path, deb: Path) -> None:
    cache = tmp_path / "cache"
    document = entry()
    assert "not fetched" in documents.listing([document], cache)[1]
    made = fetch(document, cache, runner=apt_runner(deb, []))
    recorded = entry(sha256=sha(made.path.read_bytes()))
    line = documents.listing([recorded], cache)[1]
    assert "tuning" in line and "guide" in line and " ok " in line


def test_a_corpus_file_is_read_where_it_lies_and_checked(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    (corpus / "pdf").mkdir(parents=True)
    (corpus / "pdf" / "a.pdf").write_bytes(b"%PDF-1.4 a")
    document = Document("a", "tuning", "a.pdf", "corpus:pdf/a.pdf", sha(b"%PDF-1.4 a"))
    found = fetch(document, tmp_path / "cache", corpus=corpus)
    assert (found.status, found.path) == ("ok", corpus / "pdf" / "a.pdf")
    assert not (tmp_path / "cache").exists()  # nothing copied
    changed = Document("a", "tuning", "a.pdf", "corpus:pdf/a.pdf", "0" * 64)
    assert fetch(changed, tmp_path / "cache", corpus=corpus).status == "mismatch"


def test_pypi_and_npm_are_asked_by_their_own_clients(tmp_path: Path) -> None:
    calls: list[list[str]] = []

    def pip_or_npm(argv: list[str], cwd: Path) -> None:
        calls.append(argv)
        if "pip" in argv and "--only-binary" in argv:
            raise DocumentError("no wheel")  # an sdist-only release: pip is asked again
        if "pip" in argv:
            (cwd / "dist-1.0.tar.gz").write_bytes(b"sdist")
        else:
            (cwd / "scope-name-2.0.1.tgz").write_bytes(b"tarball")

    pypi = documents.download(parse_source("pypi:dist==1.0:a.csv"), tmp_path, pip_or_npm)
    assert pypi.name == "dist-1.0.tar.gz"
    assert calls[0][1:4] == ["-m", "pip", "download"] and calls[0][-1] == "dist==1.0"
    assert "--no-binary" in calls[1]
    npm = documents.download(parse_source("npm:@scope/name@2.0.1:a.md"), tmp_path, pip_or_npm)
    assert npm.name == "scope-name-2.0.1.tgz"
    assert calls[2][:3] == ["npm", "pack", "@scope/name@2.0.1"]
    documents.download(parse_source("pypi:dist==1.0:a.csv"), tmp_path, pip_or_npm)
    assert len(calls) == 3  # downloaded once


def test_a_held_out_document_is_fetched_by_its_own_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the held-out half's sources and conversions (DocBook pages to one DOCX, the Unicode data
    # files to an XLSX) are heldout_docs.py's: `python bench/eval/documents.py` on a fresh
    # machine makes them the same way instead of failing on them
    import heldout_docs

    data = b"PK converted"
    asked: list[str] = []

    def made_by_the_script(entry: dict[str, Any], cache: Path) -> tuple[bytes, dict[str, str]]:
        asked.append(entry["source"])
        return data, {"package": "1" * 64}

    monkeypatch.setattr(heldout_docs, "fetch", made_by_the_script)
    source, convert = split_convert("apt:guide-ru=1.0:/usr/share/doc/guide-ru/html/, convert: docx")
    document = Document(
        id="guide-ru",
        half="heldout",
        file="guide-ru.docx",
        sha256=sha(data),
        source=source,
        convert=convert,
        source_sha256="1" * 64,
    )
    made = fetch(document, tmp_path / "cache")
    assert asked == ["apt:guide-ru=1.0:/usr/share/doc/guide-ru/html/, convert: docx"]
    assert made.status == "ok", made.detail
    assert made.path == tmp_path / "cache" / "documents" / "guide-ru" / "guide-ru.docx"
    assert made.path.read_bytes() == data
    again = fetch(document, tmp_path / "cache")  # from the cache, with its record
    assert again.status == "ok" and len(asked) == 1


def test_a_held_out_document_that_cannot_be_made_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import heldout_docs

    def offline(entry: dict[str, Any], cache: Path) -> tuple[bytes, dict[str, str]]:
        raise subprocess.CalledProcessError(100, ["apt-get", "download", "guide-ru=1.0"])

    monkeypatch.setattr(heldout_docs, "fetch", offline)
    source = "apt:guide-ru=1.0:/usr/share/doc/guide-ru/html/"
    document = Document(id="guide-ru", half="heldout", file="g.docx", sha256="", source=source)
    with pytest.raises(DocumentError, match=r"guide-ru: not made by heldout_docs\.py: .*apt-get"):
        fetch(document, tmp_path / "cache")
