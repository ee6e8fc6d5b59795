"""Where the shared corpus of real documents is, for the benchmarks that read it."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV = "ENRICH_EVAL_CORPUS"  # the evaluation's own (bench/eval/documents.py find_corpus)
HOW = f"pass --corpus PATH (the folder holding MANIFEST.tsv) or set {ENV}"


def default_corpus(root: Path = ROOT, environ: Mapping[str, str] = os.environ) -> Path | None:
    """$ENRICH_EVAL_CORPUS, else ../shared/corpus beside the checkout, or beside the folder
    holding it when it is a worktree (/work/wt/<branch> → /work/shared/corpus); None without."""
    if environ.get(ENV):
        return Path(environ[ENV])
    for base in (root.parent, root.parent.parent):
        if (base / "shared" / "corpus").is_dir():
            return base / "shared" / "corpus"
    return None


def add_corpus_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--corpus",
        type=Path,
        help=f"the shared corpus (default: ${ENV}, else ../shared/corpus beside the checkout"
        " or beside the folder holding its worktree)",
    )


def find_corpus(
    given: Path | None,
    *,
    required: bool = True,
    root: Path = ROOT,
    environ: Mapping[str, str] = os.environ,
) -> Path | None:
    """`given`, else the default; a clear exit when there is none and the run needs one (a run
    that does without is told how to pass it and gets None)."""
    corpus = given or default_corpus(root, environ)
    if corpus is not None and corpus.is_dir():
        return corpus
    said = f"no corpus at {corpus}" if corpus else f"no shared corpus beside {root}"
    if required:
        raise SystemExit(f"{said}: {HOW}")
    print(f"{said} ({HOW})", flush=True)
    return None


def corpus_or_exit(given: Path | None) -> Path:
    """For a run that cannot do without the corpus."""
    corpus = find_corpus(given)
    assert corpus is not None  # find_corpus exits otherwise
    return corpus
