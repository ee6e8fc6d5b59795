"""Where the benchmarks find the shared corpus: --corpus, $ENRICH_EVAL_CORPUS, ../shared/corpus
beside the checkout or beside the folder holding its worktree, else a clear exit."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.corpus import ENV, default_corpus, find_corpus
from tests.conftest import ROOT


def tree(tmp_path: Path, *checkouts: str) -> Path:
    corpus = tmp_path / "shared" / "corpus"
    corpus.mkdir(parents=True)
    (corpus / "MANIFEST.tsv").write_text("path\tsource\n")
    for checkout in checkouts:
        (tmp_path / checkout).mkdir(parents=True)
    return corpus


def test_found_beside_a_checkout_and_beside_the_folder_holding_a_worktree(tmp_path: Path) -> None:
    corpus = tree(tmp_path, "main", "wt/leftovers")
    assert default_corpus(tmp_path / "main", environ={}) == corpus
    assert default_corpus(tmp_path / "wt" / "leftovers", environ={}) == corpus
    assert find_corpus(None, root=tmp_path / "wt" / "leftovers", environ={}) == corpus


def test_the_option_then_the_environment_come_first(tmp_path: Path) -> None:
    tree(tmp_path, "main")
    other = tmp_path / "elsewhere"
    other.mkdir()
    given = tmp_path / "given"
    given.mkdir()
    environ = {ENV: str(other)}
    assert default_corpus(tmp_path / "main", environ=environ) == other
    assert find_corpus(given, root=tmp_path / "main", environ=environ) == given


def test_none_found_is_a_clear_exit_or_none_for_a_run_that_does_without(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "wt" / "branch").mkdir(parents=True)
    root = tmp_path / "wt" / "branch"
    assert default_corpus(root, environ={}) is None
    with pytest.raises(SystemExit, match=r"no shared corpus beside .*pass --corpus PATH"):
        find_corpus(None, root=root, environ={})
    with pytest.raises(SystemExit, match=r"no corpus at .*missing: pass --corpus PATH"):
        find_corpus(tmp_path / "missing", root=root, environ={})
    assert find_corpus(None, required=False, root=root, environ={}) is None
    assert f"or set {ENV}" in capsys.readouterr().out


def test_a_script_told_a_wrong_corpus_says_so_before_doing_anything() -> None:
    run = subprocess.run(
        [
            *(sys.executable, str(ROOT / "bench" / "token_estimates.py")),
            *("--upstream", "http://x", "--corpus", "/nonexistent/corpus"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )
    assert run.returncode == 1
    assert "no corpus at /nonexistent/corpus: pass --corpus PATH" in run.stderr


def test_no_bench_script_finds_the_corpus_by_its_own_path() -> None:
    """Each goes through bench/corpus.py (which knows worktrees) and takes --corpus."""
    own_path = re.compile(r"""["']shared["']\s*/\s*["']corpus["']|\.\./shared/corpus""")
    readers = []
    for script in sorted((ROOT / "bench").glob("*.py")):
        if script.name == "corpus.py":
            continue
        text = script.read_text()
        assert not own_path.search(text), f"{script.name} builds the corpus's path itself"
        if "corpus" in text.lower() and "__main__" in text:
            readers.append(script.name)
            assert "add_corpus_option(parser)" in text, f"{script.name} takes no --corpus"
    assert "retrieval.py" in readers and "soak.py" in readers
