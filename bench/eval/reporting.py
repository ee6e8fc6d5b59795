"""What the evaluations may say about a held-out half, the log of every held-out run, and result
files: what a bench run prints, written under bench/results/ by its `--out` option."""

from __future__ import annotations

import contextlib
import csv
import datetime
import io
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TextIO, TypeVar

Item = TypeVar("Item")

RESULTS = Path(__file__).resolve().parent.parent / "results"
HELDOUT_LOG = RESULTS / "heldout-runs.tsv"
LOG_COLUMNS = ("date", "commit", "runner", "set", "method", "mode", "upstream", "figures")
MERGED = "groups of one document, merged"


def merge_single_documents(
    groups: dict[str, list[Item]], documents: Callable[[Item], Iterable[str]]
) -> dict[str, list[Item]]:
    """Groups of a breakdown with no group made of one document's items: a per-format or
    per-kind figure where the format is one document would be that document's figure.

    Groups of one document are merged together; if what they make is still one document's
    (a single such group, or all about one document), it joins the smallest other group; with
    no other group it is left out (the half's own total, printed apart, already says it)."""

    def spread(items: Sequence[Item]) -> int:
        return len({doc for item in items for doc in documents(item)})

    kept = {name: items for name, items in groups.items() if spread(items) > 1}
    lone = [item for name, items in groups.items() if spread(items) <= 1 for item in items]
    if not lone:
        return kept
    if spread(lone) > 1:
        return {**kept, MERGED: lone}
    if not kept:
        return {}
    smallest = min(kept, key=lambda name: (len(kept[name]), name))
    kept[f"{smallest} + {MERGED}"] = kept.pop(smallest) + lone
    return kept


WORD = re.compile(r"\w+")


def words(text: str) -> set[str]:
    """Distinct lower-cased words of three characters or more."""
    return {word for word in WORD.findall(text.lower()) if len(word) >= 3}


def word_overlap(question: str, answers: Iterable[str]) -> float:
    """The share of the question's words (`words`) that its answer texts also hold: how much a
    question gives away of where its answer is (0: none of its words; 1: all of them)."""
    asked = words(question)
    if not asked:
        return 0.0
    found: set[str] = set()
    for answer in answers:
        found |= words(answer)
    return len(asked & found) / len(asked)


def commit_of(root: Path) -> str:
    """The checkout's commit, `+changes` when its tracked files differ from it."""
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout.strip()  # fmt: skip
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+changes" if status else "")


def log_heldout_run(
    runner: str,
    half: str,
    method: str,
    mode: str,
    upstream: str,
    figures: str,
    root: Path,
    log: Path = HELDOUT_LOG,
) -> None:
    """One line per held-out run (aggregates only), appended to the committed log, so that how
    often the held-out half was measured is a fact anyone can count."""
    log.parent.mkdir(parents=True, exist_ok=True)
    fresh = not log.exists() or log.stat().st_size == 0
    with log.open("a", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
        if fresh:
            writer.writerow(LOG_COLUMNS)
        when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M")
        writer.writerow((when, commit_of(root), runner, half, method, mode, upstream, figures))


class _Tee(io.TextIOBase):
    """Text written to the console and kept for the result file."""

    def __init__(self, console: TextIO, kept: io.StringIO) -> None:
        self.console, self.kept = console, kept

    def write(self, text: str) -> int:
        self.kept.write(text)
        return self.console.write(text)

    def flush(self) -> None:
        self.console.flush()


def command_line(argv: Sequence[str], root: Path = RESULTS.parent.parent) -> str:
    """The command as typed from the repository's root: `python bench/x.py --flag value`."""
    script = Path(argv[0]).resolve() if argv else Path("?")
    with contextlib.suppress(ValueError):
        script = script.relative_to(root)
    return shlex.join(["python", str(script), *argv[1:]])


@contextlib.contextmanager
def recorded(out: Path | None, argv: Sequence[str] | None = None) -> Iterator[None]:
    """What the run prints inside, written also to `out` (a result file, e.g.
    bench/results/retrieval/<date>-<what>.md) once the run has finished, headed by the
    command, the date, the checkout's commit and the load average at start and end: a run
    lands in bench/results/ by command, and one that fails writes nothing."""
    if out is None:
        yield
        return
    argv = sys.argv if argv is None else argv
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load_at_start = os.getloadavg()[0]
    kept = io.StringIO()
    with contextlib.redirect_stdout(_Tee(sys.stdout, kept)):
        yield
    head = (
        f"Command: `{command_line(argv)}`\n\n"
        f"Run {started} at commit {commit_of(RESULTS.parent.parent)}; "
        f"{os.cpu_count()} cores, load average {load_at_start:.1f} at start, "
        f"{os.getloadavg()[0]:.1f} at end.\n\n"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(head + kept.getvalue(), encoding="utf-8")
