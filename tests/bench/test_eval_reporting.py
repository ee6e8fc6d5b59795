"""bench/eval/reporting.py's result files: what a bench run prints, written by its `--out`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "bench" / "eval"))

import conversation_eval  # noqa: E402
import indexing  # noqa: E402
import retrieval_eval  # noqa: E402
from reporting import command_line, recorded  # noqa: E402

TABLE = "| half | hit rate |\n|---|---|\n| tuning | 87/106 |"


def test_what_is_printed_is_written_under_the_command_that_printed_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results" / "retrieval" / "run.md"
    argv = [str(ROOT / "bench" / "retrieval_eval.py"), "--set", "tuning", "--mode", "warm"]
    with recorded(out, argv):
        print(TABLE)
    assert capsys.readouterr().out == TABLE + "\n"  # the console still gets it
    head, table = out.read_text(encoding="utf-8").split("\n\n", 2)[::2]
    assert head == "Command: `python bench/retrieval_eval.py --set tuning --mode warm`"
    assert table == TABLE + "\n"
    run_line = out.read_text(encoding="utf-8").split("\n\n")[1]
    assert run_line.startswith("Run 20") and "at commit " in run_line
    assert "load average" in run_line and "at start" in run_line and "at end" in run_line


def test_no_out_writes_nothing_and_a_failed_run_leaves_no_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with recorded(None):
        print(TABLE)
    assert capsys.readouterr().out == TABLE + "\n"
    out = tmp_path / "run.md"
    with pytest.raises(RuntimeError), recorded(out, ["bench/indexing.py"]):
        print("half a table")
        raise RuntimeError("the run broke")
    assert not out.exists()


def test_a_command_is_named_from_the_repository_root_and_quoted() -> None:
    argv = [str(ROOT / "bench" / "indexing.py"), "--contenders", "stock;new"]
    assert command_line(argv) == "python bench/indexing.py --contenders 'stock;new'"


@pytest.mark.parametrize(
    ("module", "run", "argv"),
    [
        (retrieval_eval, "evaluate", ["--set", "heldout", "--mode", "cold"]),
        (conversation_eval, "evaluate", ["--window", "2048"]),
        (indexing, "measure", ["--sweep"]),
    ],
    ids=["retrieval_eval", "conversation_eval", "indexing"],
)
def test_each_bench_writes_its_printed_tables_with_out(
    module: object, run: str, argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bench's own `main` parses `--out` and records what its run prints (the run itself,
    which needs the documents and minutes, replaced by one that prints a table)."""
    out = tmp_path / "bench-run.md"
    seen: list[object] = []

    def printing(args: object) -> None:
        seen.append(args)
        print(TABLE)

    monkeypatch.setattr(module, run, printing)
    script = str(ROOT / "bench" / f"{module.__name__}.py")  # type: ignore[attr-defined]
    monkeypatch.setattr(sys, "argv", [script, *argv, "--out", str(out)])
    module.main()  # type: ignore[attr-defined]
    assert len(seen) == 1
    text = out.read_text(encoding="utf-8")
    assert f"Command: `python bench/{module.__name__}.py {' '.join(argv)} --out" in text  # type: ignore[attr-defined]
    assert text.endswith(TABLE + "\n")
