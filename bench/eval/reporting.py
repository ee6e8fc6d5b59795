"""What the evaluations may say about a held-out half, and the log of every held-out run."""

from __future__ import annotations

import csv
import datetime
import re
import subprocess
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

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
