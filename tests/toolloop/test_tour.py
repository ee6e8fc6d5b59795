"""The README tour's search loop (part 4), as printed, against a proxy in front of the stand-in
for llama-server whose scripted model calls tools: it prints what the README shows in the same
shape (the README's transcript is a real model's; tests/e2e runs that model)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import ROOT
from tests.fakes.tool_calls import Calls, Reply, Say, search, tool_results
from tests.fakes.upstream import FakeUpstream
from tests.pipeline.test_enrich import pdf_bytes
from tests.stores.support import FAST
from tests.toolloop.support import Proxy, chat_turns, model

# Each page long enough to be a passage of its own (its sentence again and again).
PAGES = [
    "TraceMonkey runs the loop benchmarks ten times faster than the interpreter. " * 30,
    "It is slower than the interpreter on recursive code, which it does not trace. " * 30,
]


def conversation(body: dict[str, Any]) -> Reply:
    """A model that searches for the first two questions (rephrasing the second) and answers
    the third from the conversation."""
    asked = sum(1 for m in body["messages"] if m["role"] == "user")
    found = tool_results(body)
    if asked == 1:
        if not found:
            return Calls.of(
                search("TraceMonkey loop benchmarks", "ten times faster than the interpreter")
            )
        return Say("About ten times faster than the interpreter on loops.")
    if asked == 2:
        if not found:
            return Calls.of(search("slower than the interpreter on recursive code"))
        return Say("On recursive code, which it does not trace.")
    return Say("You are welcome.")


def test_the_search_tour_prints_what_the_readme_shows(
    make_proxy: Proxy,
    upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    readme = (ROOT / "README.md").read_text()
    part = readme.split("### 4. Let the model search", 1)[1].split("\n## ", 1)[0]
    [code] = re.findall(r"^```python\n(.*?)^```$", part, re.M | re.S)
    [shown] = re.findall(r"^```text\n(.*?)^```$", part, re.M | re.S)
    model(upstream, conversation)
    base = make_proxy(vector_stores=FAST)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "report.pdf").write_bytes(pdf_bytes(PAGES))
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
    scope: dict[str, Any] = {"client": client}
    exec(compile(code, "README: let the model search", "exec"), scope)
    printed = capsys.readouterr().out.splitlines()  # the proxy's own log lines go there too
    lines = [line for line in printed if line.startswith(("Q: ", "  searched: ", "A: "))]
    # The README's questions, each answered; the searches this scripted model made shown.
    assert [q for q in lines if q.startswith("Q: ")] == [
        q for q in shown.splitlines() if q.startswith("Q: ")
    ]
    assert lines == [
        "Q: How much faster is TraceMonkey?",
        "  searched: ['TraceMonkey loop benchmarks', 'ten times faster than the interpreter']",
        "A: About ten times faster than the interpreter on loops.",
        "Q: Where is it slower?",
        "  searched: ['slower than the interpreter on recursive code']",
        "A: On recursive code, which it does not trace.",
        "Q: Thanks, that is all.",
        "A: You are welcome.",
    ]
    # The first two answers cite the report; the third needed no search.
    turns = chat_turns(upstream)
    assert len(turns) == 5
    assert "slower than the interpreter" in turns[3]["messages"][-1]["content"]
    records = httpx.get(base + "/v1/enrich/decisions?limit=3", timeout=30).json()["data"]
    cited = [{c.split("#")[0] for c in record["citations"]} for record in reversed(records)]
    assert cited == [{"report.pdf"}, {"report.pdf"}, set()]
