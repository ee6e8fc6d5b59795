"""Mutation testing on demand: mutmut on the modules that decide what the model receives.

Each group of modules is mutated with the tests that cover it (a subset, for speed), in its own
workspace under `.mutation/<group>/` (mutmut keeps its results there, so a second run only
re-tests what changed). Prints mutants, killed, survived and equivalent per module; the
equivalent ones are the mutant names listed in docs/mutation.md.

    bash scripts/mutation                  # every group
    bash scripts/mutation guard budget     # some groups
    bash scripts/mutation --list           # the groups, their modules and tests
    bash scripts/mutation --report         # the last results again, without running
    bash scripts/mutation stages --only 'proxy.pipeline.stages.decide*'   # some mutants first
    bash scripts/mutation relay --retest-survivors   # survivors again, after adding tests
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKSPACES = ROOT / ".mutation"
MUTMUT = [sys.executable, "-m", "mutmut"]
EQUIVALENT_LIST = ROOT / "docs" / "mutation.md"


@dataclass(frozen=True)
class Group:
    modules: tuple[str, ...]
    tests: tuple[str, ...]


GROUPS = {
    "prompts": Group(
        ("proxy/pipeline/prompts.py", "proxy/pipeline/strategy.py"),
        (
            "tests/pipeline/test_strategy.py",
            "tests/pipeline/test_prompt_texts.py",
            "tests/pipeline/test_enrich.py",
        ),
    ),
    "budget": Group(
        ("proxy/retrieval/budget.py",),
        ("tests/retrieval/test_budget.py", "tests/retrieval/test_flow.py"),
    ),
    "guard": Group(
        ("proxy/guard/neutralise.py", "proxy/guard/control_tokens.py", "proxy/guard/texts.py"),
        ("tests/guard/test_guard.py",),
    ),
    "keys": Group(
        ("proxy/upstream/headers.py", "proxy/upstream/client.py"),
        (
            "tests/upstream/test_relay.py",
            "tests/test_logs_and_secrets.py",
            "tests/pipeline/test_enrich.py",
            "tests/upstream/test_client.py",
        ),
    ),
    "references": Group(
        ("proxy/pipeline/file_refs.py", "proxy/pipeline/stages/references.py"),
        (
            "tests/pipeline/test_references.py",
            "tests/pipeline/test_path_traversal.py",
            "tests/files/test_file_references.py",
            "tests/files/test_file_ownership.py",
            "tests/pipeline/test_request_caps.py",
            "tests/documents/test_hostile_documents.py",
            "tests/http/test_hostile_requests.py",
            "tests/pipeline/test_client_options.py",
            "tests/pipeline/test_enrich.py",
        ),
    ),
    "stages": Group(
        (
            "proxy/pipeline/stages/adapt.py",
            "proxy/pipeline/stages/cite.py",
            "proxy/pipeline/stages/decide.py",
            "proxy/pipeline/stages/documents.py",
            "proxy/pipeline/guard_report.py",
            "proxy/pipeline/stages/inject.py",
            "proxy/pipeline/stages/names.py",
            "proxy/pipeline/stages/options.py",
            "proxy/pipeline/stages/passages.py",
            "proxy/pipeline/stages/query.py",
            "proxy/pipeline/stages/retrieve.py",
            "proxy/pipeline/stages/shape.py",
            "proxy/pipeline/stages/validate.py",
            "proxy/pipeline/stages/window.py",
            "proxy/pipeline/bounds.py",
            "proxy/pipeline/candidates.py",
            "proxy/pipeline/citing.py",
            "proxy/pipeline/option_layers.py",
            "proxy/pipeline/parsing.py",
            "proxy/pipeline/renaming.py",
            "proxy/pipeline/retrieval_state.py",
            "proxy/pipeline/rewrite.py",
            "proxy/pipeline/searches.py",
        ),
        (
            "tests/pipeline",
            "tests/formats/test_adapter.py",
            "tests/documents/test_document_locations.py",
            "tests/guard/test_guard_names_and_formats.py",
            "tests/upstream/test_relay.py",
            "tests/http/test_decisions.py",
            "tests/files/test_file_references.py",
            "tests/responses/test_responses_api.py",
            "tests/stores/test_file_search.py",
            "tests/retrieval/test_flow.py",
        ),
    ),
    "files": Group(
        ("proxy/files/store.py",),
        (
            "tests/files/test_files_api.py",
            "tests/files/test_file_store_contract.py",
            "tests/files/test_file_store_race.py",
            "tests/files/test_disk_file_store_damage.py",
            "tests/files/test_file_ownership.py",
            "tests/http/test_load.py::test_disk_full_for_the_files_store",
        ),
    ),
    "relay": Group(
        ("proxy/upstream/relay.py", "proxy/upstream/forward.py"),
        (
            "tests/upstream/test_relay.py",
            "tests/upstream/test_relay_transform.py",
            "tests/pipeline/test_client_options.py",
            "tests/http/test_client_gone.py",
            "tests/http/test_hot_path.py",
            "tests/http/test_bad_input.py",
            "tests/http/test_load.py::test_upstream_dies_mid_stream",
        ),
    ),
    "conversations": Group(
        (
            "proxy/retrieval/history.py",
            "proxy/retrieval/referring.py",
            "proxy/retrieval/follow_up.py",
            "proxy/retrieval/standalone.py",
            "proxy/retrieval/standalone_answer.py",
        ),
        (
            "tests/retrieval/test_history.py",
            "tests/retrieval/test_history_search.py",
            "tests/retrieval/test_conversations.py",
            "tests/retrieval/test_standalone.py",
            "tests/retrieval/test_question_order.py",
            "tests/retrieval/test_referring.py",
        ),
    ),
    "toolloop": Group(
        (
            "proxy/toolloop/loop.py",
            "proxy/toolloop/turn.py",
            "proxy/toolloop/function.py",
            "proxy/toolloop/written.py",
            "proxy/pipeline/search_space.py",
            "proxy/pipeline/file_search.py",
            "proxy/http/search_loop.py",
        ),
        (
            "tests/toolloop",
            "tests/stores/test_file_search.py",
            "tests/http/test_ui_searches.py",
        ),
    ),
    "orphans": Group(("proxy/files/orphans.py",), ("tests/files/test_orphans.py",)),
    "chains": Group(
        ("proxy/responses/chain.py", "proxy/http/chained_turns.py", "proxy/responses/owners.py"),
        ("tests/responses/test_native_chain.py", "tests/responses/test_native_owners.py"),
    ),
    "ranking": Group(
        ("proxy/retrieval/document_ranking.py", "proxy/retrieval/fusion.py"),
        (
            "tests/retrieval/test_document_ranking.py",
            "tests/retrieval/test_fusion.py",
            "tests/retrieval/test_retriever.py",
            "tests/retrieval/test_history_search.py",
            # Not test_overview.py: it reads bench/eval/tuning.json, which workspaces lack.
            "tests/retrieval/test_windows.py",
            "tests/retrieval/test_lexical.py",
        ),
    ),
}

# mutmut's names: proxy.guard.texts.x_function__mutmut_3, proxy.files.store.xǁClassǁmethod__mutmut_1
MUTANT = re.compile(r"^\s*(?P<name>(?P<module>[\w.]+)\.x[_ǁ]\S+__mutmut_\d+): (?P<status>.+)$")


def present(tests: tuple[str, ...]) -> list[str]:
    """The test selections whose file exists (an older checkout may lack some)."""
    return [test for test in tests if (ROOT / test.partition("::")[0]).exists()]


def workspace(name: str, group: Group) -> Path:
    """A copy of the code and tests with a [tool.mutmut] section for this group."""
    where = WORKSPACES / name
    where.mkdir(parents=True, exist_ok=True)
    for folder in ("proxy", "tests"):
        shutil.copytree(
            ROOT / folder,
            where / folder,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    # The README's tours are checked against what the code prints (tests/toolloop/test_tour.py):
    # here for mutmut's `also_copy`, which copies it on into the mutants' folder.
    shutil.copy2(ROOT / "README.md", where / "README.md")
    section = "\n".join(
        [
            "",
            "[tool.mutmut]",
            'source_paths = ["proxy"]',
            'also_copy = ["README.md"]',
            f"only_mutate = {list(group.modules)!r}",
            f"pytest_add_cli_args_test_selection = {present(group.tests)!r}",
            'pytest_add_cli_args = ["-p", "no:cacheprovider"]',
            # Tests start threads (servers, thread pools): a child forked from a process that
            # ran them can deadlock on a lock another thread held. A fork server that has only
            # collected the tests forks clean children.
            'process_isolation = "forkserver"',
            # A mutant that loops forever costs the whole timeout: 10 times the tests' own time
            # (plus 5 s) is still far above what a busy shared machine adds to a passing run.
            "timeout_multiplier = 10.0",
            "timeout_constant = 5.0",
            "",
        ]
    ).replace("'", '"')
    (where / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text() + section)
    return where


def equivalent_mutants() -> set[str]:
    if not EQUIVALENT_LIST.exists():
        return set()
    return set(re.findall(r"`(proxy\.[\w.ǁ]+__mutmut_\d+)`", EQUIVALENT_LIST.read_text()))


def run_group(
    name: str, group: Group, children: int, only: list[str]
) -> list[tuple[str, str, str]]:
    """Mutate the group's modules and run its tests; (module, mutant, status) of each mutant.
    `only`: mutant name patterns (`proxy.pipeline.stages.decide*`) to run, the others waiting."""
    where = workspace(name, group)
    # CI: hypothesis runs the same examples each time, so a verdict does not change by chance.
    env = {**os.environ, "CI": "1"}
    command = [*MUTMUT, "run", "--max-children", str(children), *only]
    subprocess.run(command, cwd=where, env=env)
    return results_of(where)


def retest_survivors(name: str, only: list[str]) -> int:
    """Forget the open survivors' verdicts, and those of mutants no test ran, in a workspace
    (those matching `only`, if given), so that the next run tries them against tests added
    since (a killed mutant stays killed: tests are only ever added; one listed as equivalent
    stays a survivor: no test can kill it, and each costs a whole run of its tests)."""
    forgotten = 0
    equivalent = equivalent_mutants()
    for meta in (WORKSPACES / name / "mutants").rglob("*.meta"):
        data = json.loads(meta.read_text())
        for key, exit_code in data["exit_code_by_key"].items():
            wanted = key not in equivalent and (
                not only or any(fnmatch.fnmatch(key, pattern) for pattern in only)
            )
            # The tests passed (survived), or none ran it (5, 33: "no tests"; one added since may).
            if exit_code in (0, 5, 33) and wanted:
                data["exit_code_by_key"][key] = None
                forgotten += 1
        meta.write_text(json.dumps(data))
    return forgotten


def results_of(where: Path) -> list[tuple[str, str, str]]:
    """(module, mutant, status) of each mutant of the last run in workspace `where`."""
    results = subprocess.run(
        [*MUTMUT, "results", "--all", "true"],
        cwd=where,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = []
    for line in results.splitlines():
        match = MUTANT.match(line)
        if match:
            found.append((match["module"], match["name"], match["status"].strip()))
    return found


def report(found: list[tuple[str, str, str]]) -> None:
    equivalent = equivalent_mutants()
    rows: dict[str, Counter[str]] = {}
    open_survivors = []
    unchecked = 0
    for module, name, status in found:
        if status == "not checked":  # an interrupted run: no verdict yet
            unchecked += 1
            continue
        counts = rows.setdefault(module, Counter())
        counts["mutants"] += 1
        if status in ("killed", "timeout", "segfault", "caught by type check"):
            counts["killed"] += 1
        elif name in equivalent:
            counts["equivalent"] += 1
        else:
            counts["survived"] += 1
            open_survivors.append(f"{name}: {status}")
    total: Counter[str] = Counter()
    print("\n| module | mutants | killed | survived | equivalent |")
    print("|---|---|---|---|---|")
    for module, counts in sorted(rows.items()):
        total.update(counts)
        print(
            f"| {module} | {counts['mutants']} | {counts['killed']} | {counts['survived']} "
            f"| {counts['equivalent']} |"
        )
    print(
        f"| **all** | {total['mutants']} | {total['killed']} | {total['survived']} "
        f"| {total['equivalent']} |"
    )
    if total["mutants"]:
        share = (total["survived"] + total["equivalent"]) / total["mutants"]
        print(f"\nsurvivors (open + equivalent): {share:.1%}")
    if unchecked:
        print(f"{unchecked} mutants not checked yet (an interrupted run): run the groups again")
    if open_survivors:
        print("\nopen survivors (see one with: cd .mutation/<group> && mutmut show NAME):")
        for line in open_survivors:
            print("  " + line)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("groups", nargs="*", help=f"any of {', '.join(GROUPS)}; default: all")
    parser.add_argument("--list", action="store_true", help="show the groups and exit")
    parser.add_argument("--children", type=int, default=2, help="parallel mutants (default 2)")
    parser.add_argument(
        "--report", action="store_true", help="only print the last results of the groups"
    )
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="PATTERN",
        help="run only mutants matching this name pattern (repeatable), e.g. "
        "'proxy.pipeline.stages.decide*'",
    )
    parser.add_argument(
        "--retest-survivors",
        action="store_true",
        help="try the survivors of the last run again (after adding tests)",
    )
    args = parser.parse_args()
    if args.list:
        for name, group in GROUPS.items():
            print(f"{name}: {' '.join(group.modules)}\n    tests: {' '.join(group.tests)}")
        return 0
    unknown = set(args.groups) - set(GROUPS)
    if unknown:
        parser.error(f"unknown groups {sorted(unknown)}; known: {', '.join(GROUPS)}")
    found = []
    for name in args.groups or list(GROUPS):
        if args.report:
            if (WORKSPACES / name / "mutants").exists():
                found += results_of(WORKSPACES / name)
            continue
        print(f"== {name}", flush=True)
        if args.retest_survivors:
            print(f"{retest_survivors(name, args.only)} survivors to try again", flush=True)
        found += run_group(name, GROUPS[name], args.children, args.only)
    report(found)
    return 0


if __name__ == "__main__":
    sys.exit(main())
