"""The serving process caps glibc's malloc arenas, unless the operator set MALLOC_ARENA_MAX."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ASK = "from proxy.arenas import limit_malloc_arenas; print(limit_malloc_arenas())"


def run(env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", ASK], capture_output=True, text=True, cwd=ROOT, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only"
)
def test_arenas_are_capped_unless_the_operator_chose() -> None:
    assert run({"PATH": "/usr/bin:/bin"}) == "True"
    assert run({"PATH": "/usr/bin:/bin", "MALLOC_ARENA_MAX": "8"}) == "False"


def test_the_serving_process_caps_them_before_its_threads_start() -> None:
    source = (ROOT / "proxy" / "serve.py").read_text()
    run_body = source.split("def _run(", 1)[1].split("\ndef ", 1)[0]
    assert run_body.index("limit_malloc_arenas()") < run_body.index("_event_loop()")
