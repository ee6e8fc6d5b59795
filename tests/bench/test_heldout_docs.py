"""bench/eval/heldout_docs.py: reproducible conversions, and a check that prints counts only."""

from __future__ import annotations

import importlib.util
import io
import sys
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import docx
import openpyxl
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "eval" / "heldout_docs.py"


@pytest.fixture(scope="module")
def held() -> ModuleType:
    spec = importlib.util.spec_from_file_location("heldout_docs", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["heldout_docs"] = module
    spec.loader.exec_module(module)
    return module


def zipped(members: list[tuple[str, bytes]], when: tuple[int, ...]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, data in members:
            archive.writestr(zipfile.ZipInfo(name, date_time=when), data)  # type: ignore[arg-type]
    return out.getvalue()


def test_a_package_saved_at_another_time_in_another_order_gives_the_same_bytes(
    held: ModuleType,
) -> None:
    core = b'<cp:coreProperties><dcterms:modified xsi:type="W3CDTF">{}</dcterms:modified>'
    first = zipped(
        [
            ("[Content_Types].xml", b"types"),
            ("xl/workbook.xml", b"book"),
            ("docProps/core.xml", core.replace(b"{}", b"2026-05-01T10:00:00Z")),
        ],
        (2026, 5, 1, 10, 0, 0),
    )
    second = zipped(
        [
            ("docProps/core.xml", core.replace(b"{}", b"2027-01-02T03:04:05Z")),
            ("xl/workbook.xml", b"book"),
            ("[Content_Types].xml", b"types"),
        ],
        (2027, 1, 2, 3, 4, 6),
    )
    assert held.reproducible_zip(first) == held.reproducible_zip(second)
    with zipfile.ZipFile(io.BytesIO(held.reproducible_zip(second))) as archive:
        assert archive.namelist()[0] == "[Content_Types].xml"
        assert b"2023-01-01T00:00:00Z" in archive.read("docProps/core.xml")


def test_a_cell_spanning_rows_and_columns_leaves_the_places_it_covers_empty(
    held: ModuleType,
) -> None:
    from selectolax.lexbor import LexborHTMLParser

    table = LexborHTMLParser(
        "<table><tr><th>Part</th><th>Needs</th><th>Note</th></tr>"
        "<tr><td rowspan='2'>Disk</td><td>count</td><td>any</td></tr>"
        "<tr><td colspan='2'>size</td></tr>"
        "<tr><td>Card</td><td>model</td><td>-</td></tr></table>"
    ).css_first("table")
    grid = held.table_grid(table, lambda cell: cell.text(deep=True).strip())
    assert grid == [
        ["Part", "Needs", "Note"],
        ["Disk", "count", "any"],
        ["", "size", ""],
        ["Card", "model", "-"],
    ]


DOCBOOK = {
    "/guide/index.ru.html": """<html><head><title>Guide</title></head><body>
        <div class="navheader">Next page</div><h1>Guide</h1>
        <div class="toc"><dl><dt><a href="ch01.html">1. Start</a></dt>
        <dd><dl><dt><a href="ch01s01.html#x">1.1 Sizes</a></dt></dl></dd></dl></div>
        </body></html>""",
    "/guide/ch01.html": """<html><body><div class="navheader">Prev</div>
        <h2>1. Start</h2><p>First   paragraph
        of the chapter.</p><div class="note"><table><tr><th>Note</th></tr>
        <tr><td><p>Back up your data first.</p></td></tr></table></div>
        <ul><li>one item</li><li><p>a long item</p></li></ul>
        <pre>cp a b
rm c</pre><div class="navfooter">Home</div></body></html>""",
    "/guide/ch01s01.html": """<html><body><h3>1.1 Sizes</h3>
        <div class="table"><p class="title"><b>Table 1.1. Sizes</b></p><a id="sizes"/>
        <table><tr><th>Kind</th><th>Disk</th></tr><tr><td>Desktop</td><td>10 GB</td></tr>
        </table></div></body></html>""",
}


def test_docbook_pages_become_one_docx_in_table_of_contents_order(held: ModuleType) -> None:
    members = {path: text.encode() for path, text in DOCBOOK.items()}
    data = held.docbook_docx(members, "/guide/")
    assert data == held.docbook_docx(members, "/guide/")  # the same bytes every time
    document = docx.Document(io.BytesIO(data))
    paragraphs = [(p.style.name, p.text) for p in document.paragraphs]
    assert paragraphs == [
        ("Heading 1", "Guide"),
        ("Heading 2", "1. Start"),
        ("Normal", "First paragraph of the chapter."),
        ("Normal", "Note"),  # a note is prose, not a table
        ("Normal", "Back up your data first."),
        ("List Bullet", "one item"),
        ("List Bullet", "a long item"),
        ("Normal", "cp a b"),
        ("Normal", "rm c"),
        ("Heading 3", "1.1 Sizes"),
        ("Normal", "Table 1.1. Sizes"),
    ]
    [table] = document.tables
    assert [[cell.text for cell in row.cells] for row in table.rows] == [
        ["Kind", "Disk"],
        ["Desktop", "10 GB"],
    ]
    assert document.core_properties.created == datetime(2023, 1, 1, tzinfo=UTC)


UCD = {
    "ReadMe.txt": "# Unicode Character Database\n# Date: 2022\n#\n# For documentation, see X\n\n"
    "This directory contains\nthe data files.\n",
    "Blocks.txt": "# Blocks-15.0.0.txt\n#\n# Format:\n# Start Code..End Code; Block Name\n"
    "# =====\n\n0000..007F; Basic Latin\n0080..00FF; Latin-1 Supplement\n",
    "PropertyAliases.txt": "# PropertyAliases\n\n# Numeric Properties\nnv ; Numeric_Value\n"
    "age ; Age\nscx ; Script_Extensions ; sx ; ext\n",
    "NamedSequences.txt": "# NamedSequences\nTAMIL SYLLABLE KSSA;0B95 0BCD 0BB7\n",
    "Jamo.txt": "# Jamo\n1100; G   # HANGUL CHOSEONG KIYEOK\n",
}


def test_unicode_data_becomes_a_workbook_with_readme_notes_and_one_sheet_per_file(
    held: ModuleType,
) -> None:
    members = {f"/ucd/{name}": text.encode() for name, text in UCD.items()}
    data = held.unicode_data_xlsx(members, "/ucd/")
    assert data == held.unicode_data_xlsx(members, "/ucd/")
    book = openpyxl.load_workbook(io.BytesIO(data))
    assert book.sheetnames == ["ReadMe", "Notes", "Blocks", "Property aliases",
                               "Named sequences", "Jamo"]  # fmt: skip
    assert [r[0] for r in book["ReadMe"].iter_rows(values_only=True)] == [
        "Unicode Character Database ReadMe",
        "Unicode Character Database Date: 2022",
        "For documentation, see X",
        "This directory contains the data files.",
    ]
    notes = list(book["Notes"].iter_rows(values_only=True))
    assert ("Blocks", "Blocks.txt", "Format: Start Code..End Code; Block Name") in notes
    assert list(book["Blocks"].iter_rows(values_only=True)) == [
        ("First code point", "Last code point", "Block name"),
        ("0000", "007F", "Basic Latin"),
        ("0080", "00FF", "Latin-1 Supplement"),
    ]
    assert list(book["Property aliases"].iter_rows(values_only=True))[1:] == [
        ("nv", "Numeric_Value", None),
        ("age", "Age", None),
        ("scx", "Script_Extensions", "sx, ext"),
    ]
    assert list(book["Named sequences"].iter_rows(values_only=True))[1] == (
        "TAMIL SYLLABLE KSSA", "0B95 0BCD 0BB7"
    )  # fmt: skip
    assert list(book["Jamo"].iter_rows(values_only=True))[1] == ("1100", "G")


def test_the_check_counts_answers_per_document_and_never_prints_a_question_or_answer(
    held: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    questions: list[dict[str, Any]] = [
        {"id": "a-01", "doc": "a", "q": "Secret question one?",
         "answer": "soft\u00adly  spoken words"},
        {"id": "a-02", "doc": "a", "q": "Secret question two?", "answer": "nowhere at all",
         "answers": ["nowhere at all", "ﬁne print here"]},
        {"id": "b-01", "doc": "b", "q": "Secret question three?", "answer": "missing sentence"},
    ]  # fmt: skip
    texts = {
        "a": held.normalise("They were softly\n spoken words, and the fine print here."),
        "b": held.normalise("Nothing that answers."),
    }
    missing = held.check(questions, texts, type("Args", (), {"missing": True})())
    out = capsys.readouterr().out
    assert missing == 1
    assert "a: 2/2 answers found" in out and "b: 0/1 answers found" in out
    assert "all: 2/3" in out and "not found: b-01" in out
    for question in questions:
        assert question["q"] not in out and question["answer"] not in out


def test_a_source_names_its_registry_package_path_and_conversion(held: ModuleType) -> None:
    source = "apt:unicode-data=15.0.0-1:/usr/share/unicode/, convert: xlsx"
    assert held.parse_source(source) == (
        "apt", "unicode-data=15.0.0-1", "/usr/share/unicode/", "xlsx"
    )  # fmt: skip
    assert held.parse_source("pypi:brotli==1.2.1:brotli-1.2.1/tests/testdata/a.txt") == (
        "pypi", "brotli==1.2.1", "brotli-1.2.1/tests/testdata/a.txt", None
    )  # fmt: skip


def turn(q: str, answer: str, **more: str) -> dict[str, str]:
    return {"q": q, "answer": answer, "reply": "A plausible reply.", **more}


def test_the_conversation_check_counts_turns_flags_unusable_ones_and_prints_no_text(
    held: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    follow = {"standalone": "Secret rewrite?", "leans": "pronoun"}
    conversations: list[dict[str, Any]] = [
        {"id": "a-c1", "docs": ["a"], "lang": "en", "turns": [
            turn("Secret first?", "soft\u00adly  spoken words"),
            turn("Secret follow?", "nowhere", answers=["nowhere", "ﬁne print here"], **follow),
            turn("Secret last?", "missing sentence", **{**follow, "leans": "ellipsis"}),
        ]},
        {"id": "b-c1", "docs": ["b"], "lang": "de", "turns": [
            turn("Secret alone?", "Nothing that answers."),
        ]},
        {"id": "b-c2", "docs": ["b"], "lang": "de", "turns": [
            turn("Secret one?", "Nothing that answers."),
            turn("Secret two?", "Nothing that answers.", leans="vibes"),
        ]},
        {"id": "b-c3", "docs": ["nope"], "lang": "de", "turns": [
            turn("Secret three?", "Secret x."), turn("Secret four?", "Secret y.", **follow),
        ]},
    ]  # fmt: skip
    texts = {
        "a": held.normalise("They were softly\n spoken words, and the fine print here."),
        "b": held.normalise("Nothing that answers."),
    }
    bad = held.check_conversations(conversations, texts, type("Args", (), {"missing": True})())
    out = capsys.readouterr().out
    assert (
        "conversations: 4, 3 turns, 1 first questions, 2 follow-ups (ellipsis 1, pronoun 1)" in out
    )
    assert "a: 2/3 turns' answers found" in out and "all turns: 2/3" in out
    assert "not found: a-c1 turn 3" in out
    assert "b-c1: 1 turns" in out and "b-c2: turn 2: no standalone" in out
    assert "b-c2: turn 2: leans 'vibes'" in out and "b-c3: documents not described" in out
    assert bad == 1 + 4
    for conversation in conversations:
        for said in conversation["turns"]:
            assert said["q"] not in out and said["answer"] not in out
            assert said.get("standalone", "Secret") not in out


def test_a_document_both_files_describe_must_be_the_same_file(
    held: ModuleType, tmp_path: Path
) -> None:
    entry = {"file": "a.pdf", "source": "apt:a=1:/a.pdf", "sha256": "11", "kind": "manual"}
    specs: dict[Path, dict[str, Any]] = {
        tmp_path / "heldout.json": {"documents": {"a": entry}},
        tmp_path / "heldout_conversations.json": {
            "documents": {"a": {**entry, "lang": "en"}, "b": {**entry, "file": "b.html"}}
        },
    }
    merged = held.held_out_documents(specs)
    assert merged["a"] == {**entry, "lang": "en"} and merged["b"]["file"] == "b.html"
    specs[tmp_path / "heldout_conversations.json"]["documents"]["a"]["sha256"] = "22"
    with pytest.raises(SystemExit, match=r"a: heldout_conversations\.json gives another sha256"):
        held.held_out_documents(specs)


def test_each_slice_is_counted_on_its_own_and_prints_no_text(
    held: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    questions: list[dict[str, Any]] = [
        {"id": "a-01", "doc": "a", "q": "Secret plain?", "answer": "spoken words"},
        {"id": "a-m1", "doc": "a", "q": "Secret matched?", "answer": "spoken words",
         "slice": "matched"},
        {"id": "a-p1", "doc": "a", "q": "Secret place one?", "answer": "fine print",
         "kind": "place", "slice": "places"},
        {"id": "a-p2", "doc": "a", "q": "Secret place two?", "answer": "Secret absent",
         "kind": "place", "slice": "places"},
    ]  # fmt: skip
    texts = {"a": held.normalise("They were spoken words, and the fine print here.")}
    missing = held.check_slices(questions, texts, type("Args", (), {"missing": True})())
    out = capsys.readouterr().out
    assert missing == 1
    assert "slice matched: all: 1/1" in out and "slice places: all: 1/2" in out
    assert "not found: a-p2" in out
    for question in questions:
        assert question["q"] not in out and question["answer"] not in out


def test_cold_first_questions_are_counted_and_must_follow_each_other_asking_no_place(
    held: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    first = {"cold_first": True, "kind": "fact"}
    questions: list[dict[str, Any]] = [
        {"id": "a-01", "doc": "a", "q": "Secret one?", "answer": "spoken words", **first},
        {"id": "a-02", "doc": "a", "q": "Secret two?", "answer": "fine print", **first},
        {"id": "b-01", "doc": "b", "q": "Secret three?", "answer": "Nothing", **first},
        {"id": "b-02", "doc": "b", "q": "Secret four?", "answer": "Nothing"},
        {"id": "b-03", "doc": "b", "q": "Secret five?", "answer": "Secret gone", **first},
        {"id": "b-04", "doc": "b", "q": "Secret six?", "answer": "answers",
         **{**first, "kind": "place"}},
    ]  # fmt: skip
    texts = {
        "a": held.normalise("They were spoken words, and the fine print here."),
        "b": held.normalise("Nothing that answers."),
    }
    args = type("Args", (), {"missing": True})()
    bad = held.check_cold_first(questions, texts, args)
    out = capsys.readouterr().out
    assert "cold first: a 2 questions, b 3 questions" in out and "all: 4/5" in out
    assert "not found: b-03" in out and "cold first not usable: 2 problems" in out
    assert "b-04: a place question marked cold_first" in out
    assert "b: cold_first questions not one after another" in out
    assert bad == 1 + 2
    for question in questions:
        assert question["q"] not in out and question["answer"] not in out
    # a document's first questions in one run, none a place: nothing to report
    assert held.cold_first_problems(questions[:3]) == []
    assert held.check_cold_first(questions[3:4], texts, args) == 0
