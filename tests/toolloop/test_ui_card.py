"""The /ui card of a request whose searches the model wrote: each search, with its queries and
what it gave, the turns and the budget (in a real headless Chromium)."""

from __future__ import annotations

from tests.conftest import ROOT
from tests.fakes.browser import Browser
from tests.fakes.tool_calls import Call, Calls, Reply, Say, search, tool_results
from tests.fakes.upstream import FakeUpstream
from tests.stores.support import FAST
from tests.toolloop.support import CATS, Proxy, model, ready

ARTIFACTS = ROOT / "test-artifacts" / "ui"


async def test_a_card_lists_the_searches_the_model_made(
    make_proxy: Proxy, upstream: FakeUpstream, browser: Browser
) -> None:
    def script(body: dict[str, object]) -> Reply:
        done = tool_results(body)  # type: ignore[arg-type]
        if not done:
            return Calls.of(Call("file_search", "{oops"))
        if len(done) == 1:
            return Calls.of(search("lighthouse keeper fed the cats", "cats on the stone steps"))
        return Say("Sardines.")

    model(upstream, script)
    base = make_proxy(vector_stores=FAST)
    client, store_id, _ = ready(base)
    client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": CATS}],
        extra_body={"enrich": {"search": "tool", "vector_store_ids": [store_id]}},
        extra_headers={"X-Request-ID": "searched"},
    )
    await browser.goto(base + "/ui")
    await browser.wait_for("!!document.querySelector('[data-id=searched] .searches')", "the card")
    line = await browser.eval("document.querySelector('[data-id=searched] .searches').textContent")
    assert line.startswith("searches (tool): the model writes the searches")
    assert "turn 1the arguments are not valid JSON" in line
    assert "turn 2lighthouse keeper fed the cats, cats on the stone steps → " in line
    assert "· 3 turns · " in line and " of 2,048 tokens" in line
    await browser.screenshot(ARTIFACTS / "searches.png")
    assert browser.problems == []
