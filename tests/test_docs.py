"""README.md and docs/: links that lead somewhere, the two commands first, nothing outside, every
module named exists."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.upstream import ANSWER
from tests.pipeline.test_enrich import pdf_bytes

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

INSTALL_AND_RUN = (
    "python3 -m venv .venv && .venv/bin/pip install '.[local]' && "
    ".venv/bin/python -m proxy --spawn-llama-server"
)
TESTS = "bash scripts/test"  # what .ci/run calls

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`]+`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6}) +(.+?) *#*$")


def prose(text: str) -> str:
    """The text without fenced blocks and inline code, where a `](` is not a link."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text in lower case, punctuation other than '-' and
    '_' dropped, each space a '-'."""
    text = re.sub(r"[`*]", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor, a repeated one numbered as GitHub numbers it (-1, -2, ...)."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    fenced = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if m:
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(page: Path) -> list[str]:
    return [t for t in LINK.findall(prose(page.read_text())) if not re.match(r"[a-z]+:", t)]


def test_slugs_follow_githubs_rules() -> None:
    assert slug("A window into the proxy: /ui") == "a-window-into-the-proxy-ui"
    assert slug("Vector stores and `file_search`") == "vector-stores-and-file_search"
    assert slug("1. Attach a document") == "1-attach-a-document"
    assert slug("Ollama: no prompt cut unseen") == "ollama-no-prompt-cut-unseen"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_leads_somewhere(page: Path) -> None:
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest.relative_to(ROOT)}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, broken


def test_a_broken_link_or_anchor_is_caught(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## A part: here\n\n[ok](#a-part-here) [gone](#a-part)\n")
    assert "a-part-here" in anchors(page) and "a-part" not in anchors(page)
    assert links(page) == ["#a-part-here", "#a-part"]


def test_readme_starts_with_the_two_commands() -> None:
    blocks = [b.strip() for b in FENCE.findall(README.read_text())]
    assert blocks[:2] == [INSTALL_AND_RUN, TESTS]
    assert TESTS in (ROOT / ".ci/run").read_text()


def test_readme_leads_with_the_tour_and_points_at_every_page() -> None:
    text = README.read_text()
    parts = re.findall(r"^## (.+)$", prose(text), re.M)
    assert parts == [
        "A two-minute tour",
        "Troubleshooting",
        "Client recipes",
        "What it does",
        "Documentation",
    ]
    linked = {t.partition("#")[0] for t in links(README)}
    assert {f"docs/{p.name}" for p in PAGES[1:]} <= linked


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_text_names_a_file_outside_the_repository(page: Path) -> None:
    text = page.read_text()
    named = re.findall(
        r"\bSPEC\b|\bFACTS\b|\bARCHITECTURE\b|\bSTYLE\.md"
        r"|(?i:\bseeds?/|\bthe seed\b|\bseed's|\bissue \d+)",
        text,
    )
    assert not named, named


# `proxy/x/y.py`, `proxy/x/`, and `proxy.x.y` with, maybe, a name in it: a function, a class, or
# the mutated function of a mutmut mutant (`x_name__mutmut_3`, `xǁClassǁmethod__mutmut_1`).
SLASHED = re.compile(r"\bproxy/[\w/.-]*\w")
DOTTED = re.compile(r"\bproxy(?:\.[\wǁ]+)+")
MUTANT = re.compile(r"x_(\w+?)__mutmut_\d+|xǁ(\w+)ǁ(\w+?)__mutmut_\d+|xǁ(\w+)ǁ(\w+)|x_(\w+)|x")
NOT_MODULES = {
    "proxy.log": "bench/soak.py's log file",
    "proxy.lan": "a host name in an example",
    "proxy/upstream/kinds/toy.py": "the module docs/upstreams.md shows how to write",
}


def module_file(parts: list[str]) -> Path | None:
    path = ROOT.joinpath(*parts)
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    return path / "__init__.py" if (path / "__init__.py").is_file() else None


def defined(module: Path) -> set[str]:
    """The functions, classes and module-level names a module defines."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(node.name)
        elif isinstance(node, ast.Assign):
            found |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return found


def missing_modules(text: str) -> list[str]:
    """The module paths and names in `text` that are not in the repository."""
    missing = [
        path
        for path in SLASHED.findall(text)
        if path not in NOT_MODULES and not (ROOT / path).exists()
    ]
    for dotted in DOTTED.findall(text):
        parts = dotted.split(".")
        if dotted in NOT_MODULES:
            continue
        found = next(
            ((k, f) for k in range(len(parts), 0, -1) if (f := module_file(parts[:k]))), None
        )
        if found is None:
            missing.append(dotted)
            continue
        depth, module = found
        if depth == len(parts):
            continue
        mutant = MUTANT.fullmatch(parts[depth])
        wanted = [n for n in mutant.groups() if n] if mutant else [parts[depth]]
        if not set(wanted) <= defined(module):
            missing.append(dotted)
    return missing


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_a_page_names_exists(page: Path) -> None:
    assert missing_modules(page.read_text()) == []


def test_a_renamed_module_or_moved_function_is_caught() -> None:
    named = " ".join(
        [
            "`proxy/documents/protocol.py`, `proxy/retrieval/retriever.py`,",
            "`proxy.upstream.kinds`,",
            "`proxy.pipeline.stages.retrieve.x_outcomes__mutmut_6`,",
            "`proxy.pipeline.candidates.x_outcomes__mutmut_6`,",
            "`proxy.files.store.xǁDiskFileStoreǁrecover__mutmut_2`,",
            "`proxy.files.store.xǁDiskFileStoreǁgone__mutmut_2`,",
            "`proxy.documents.kinds`, `proxy.documents.framing`,",
            "--only 'proxy.files.store.xǁDiskFileStoreǁrecover*'",
            "--only 'proxy.files.store.xǁDiskFileStoreǁgone*'",
        ]
    )
    assert missing_modules(named) == [
        "proxy/documents/protocol.py",
        "proxy.pipeline.stages.retrieve.x_outcomes__mutmut_6",
        "proxy.files.store.xǁDiskFileStoreǁgone__mutmut_2",
        "proxy.documents.kinds",
        "proxy.files.store.xǁDiskFileStoreǁgone",
    ]


CALLS_A_MODEL = re.compile(
    r"completions\.create\(|responses\.create\(|\.invoke\(|Runner\.run\(|llm\.chat\(|llm -m |"
    r'"messages":'
)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_example_that_calls_a_model_caps_the_answer(page: Path) -> None:
    text = page.read_text()
    blocks = FENCE.findall(text) + re.findall(r"(?:^    \S.*\n)+", FENCE.sub("", text), re.M)
    uncapped = [
        b for b in blocks if CALLS_A_MODEL.search(b) and not re.search(r"max_(?:output_)?tokens", b)
    ]
    assert not uncapped, uncapped


def test_the_tour_runs_as_written(
    make_proxy: Callable[..., str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tour's two Python examples, as the README prints them, against a proxy in front of an
    upstream that answers with a fixed text: the PDF goes whole, and inline citations name it."""
    tour = README.read_text().split("## A two-minute tour", 1)[1].split("\n## ", 1)[0]
    attach, cite, *_ = re.findall(r"^```python\n(.*?)^```$", tour, re.M | re.S)
    base = make_proxy()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "report.pdf").write_bytes(pdf_bytes(["The report concludes that sardines win."]))
    scope: dict[str, Any] = {}
    exec(compile(attach.replace("http://127.0.0.1:8000", base), "README: attach", "exec"), scope)
    assert scope["answer"].choices[0].message.content == "".join(ANSWER)
    raw = scope["client"].chat.completions.with_raw_response.create(
        model="any", max_tokens=200, messages=scope["messages"]
    )
    assert raw.headers["X-Enrich-Strategy"] == "inject-full-content"
    assert raw.headers["X-Enrich-Sources"] == "report.pdf"
    exec(compile(cite, "README: citations", "exec"), scope)
    assert scope["answer"].choices[0].message.content == (
        "".join(ANSWER) + "\n\nSources:\n- report.pdf, whole document"
    )


SOURCES = sorted(
    path for folder in ("proxy", "tests", "bench") for path in (ROOT / folder).rglob("*.py")
)
# The design notes kept outside the repository, cited by section ("SPEC §1", "(§1, §2)") or
# named as a source ("SPEC's chat prompts", "SPEC.md").
OUTSIDE_CITATION = re.compile(r"\bSPEC §|\(§\d|\bSPEC(?:'s|\.md)\b")


def test_no_source_cites_or_names_a_file_outside_the_repository() -> None:
    cited = [
        f"{path.relative_to(ROOT)}: {match.group()}"
        for path in SOURCES
        if path != Path(__file__).resolve()
        for match in OUTSIDE_CITATION.finditer(path.read_text(encoding="utf-8"))
    ]
    assert not cited, cited
